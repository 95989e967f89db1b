"""The suite runs alike serially and on pytest-xdist's workers (``make unit`` runs
``pytest -n 2``): what a test's subprocess inherits, the exit once a Temporal
client was used, and Hypothesis's examples and files (tests/conftest.py; the CI
skip check under xdist is in test_ci_skips.py).

A test here that needs a whole pytest run starts one in a subprocess over a few
files of its own, with tests/conftest.py as a plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT


def run_python(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_a_subprocess_gets_no_terminal_size_from_the_runner() -> None:
    # pytest imported readline, which exported COLUMNS and LINES into this
    # process's C environment: a subprocess inheriting it and one given a copy of
    # os.environ (as an xdist worker's was made) must both be without them.
    show = "import os; print(os.environ.get('COLUMNS'), os.environ.get('LINES'))"
    assert run_python(show).split() == ["None", "None"]
    assert run_python(show, env=dict(os.environ)).split() == ["None", "None"]


def test_a_subprocess_reads_no_standard_input_of_the_runner() -> None:
    # Never execnet's channel to the xdist controller: pytest's capture (and
    # execnet itself, in a worker) holds /dev/null on the descriptor it inherits.
    same = "import os; print(os.path.samestat(os.fstat(0), os.stat(os.devnull)))"
    assert run_python(same).strip() == "True"


def inner_pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest under ``CI`` over the files in ``where``, with tests/conftest.py."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_") and k != "HYPOTHESIS_STORAGE_DIRECTORY"
    }
    env["CI"] = "true"
    env.pop("FLOWCORE_HYPOTHESIS_PROFILE", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "hosts"), *filter(None, [env.get("PYTHONPATH")])]
    )
    plugins = ["-p", "tests.conftest", "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-q", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=where,
        env=env,
        check=False,
    )


DRAWS = """\
import os

from hypothesis import given, strategies as st


def test_a_loads_a_module() -> None:
    import magic  # a local module, loaded by a test as a tool file is

    assert magic.LIMIT


@given(st.integers(), st.text(), st.floats(allow_nan=False))
def test_b_draws(i: int, s: str, f: float) -> None:
    with open(os.environ["DRAWN"], "a") as out:
        out.write(repr((i, s, f)) + "\\n")
"""


def test_a_derandomized_test_draws_the_same_alone_in_the_suite_and_on_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "magic.py").write_text(
        'LIMIT = 987_654_321\nNAMES = ["flowcore-magic", "wait-for-it"]\nRATIO = 0.123456789\n'
    )
    (tmp_path / "test_draws.py").write_text(DRAWS)
    drawn: dict[str, list[str]] = {}
    for name, args in [
        ("after the module was loaded", ["test_draws.py"]),
        ("alone", ["test_draws.py::test_b_draws"]),
        ("on two workers", ["-n", "2", "test_draws.py"]),
    ]:
        out = tmp_path / f"drawn-{len(drawn)}.txt"
        monkeypatch.setenv("DRAWN", str(out))
        done = inner_pytest(tmp_path, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        drawn[name] = out.read_text().splitlines()
    first, *others = drawn.values()
    assert len(first) == 100  # the ci profile's max_examples
    assert all(other == first for other in others), {k: v[:5] for k, v in drawn.items()}
    # Hypothesis's caches went to the temporary directory, not where pytest ran.
    assert not (tmp_path / ".hypothesis").exists()


CLIENT = """\
import temporalio.client  # noqa: F401  (its finalization is what os._exit avoids)


def test_passes() -> None:
    pass


def test_fails() -> None:
    raise AssertionError("the one failure")
"""


@pytest.mark.parametrize(("select", "status"), [([], 1), (["-k", "passes"], 0)])
def test_workers_that_used_a_temporal_client_end_with_the_runs_status(
    tmp_path: Path, select: list[str], status: int
) -> None:
    pytest.importorskip("temporalio.client")
    (tmp_path / "test_client.py").write_text(CLIENT)
    done = inner_pytest(tmp_path, "-n", "2", *select, "test_client.py")
    out = done.stdout + done.stderr
    assert done.returncode == status, out
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("1 failed, 1 passed in" if status else "1 passed in"), out
    assert ("the one failure" in done.stdout) == bool(status), out
    assert "crashed" not in out and "node down" not in out.lower(), out
