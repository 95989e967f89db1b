"""Hypothesis profiles: ``ci`` is derandomized (a fixed seed) and used when the
``CI`` environment variable is set; ``dev`` explores with fresh randomness.
``FLOWCORE_HYPOTHESIS_PROFILE`` picks one explicitly."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

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


_status = {"code": 0}


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    _status["code"] = int(exitstatus)


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
