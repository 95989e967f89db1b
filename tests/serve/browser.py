"""Debian's Chromium driven by Playwright, for the web view's tests and screenshot.

No browser is downloaded: Playwright drives the ``chromium`` found on ``PATH``
(``apt-get install chromium``), found as ``.ci/run`` finds it; without one the
browser tests are skipped (and under ``CI`` that skip fails the run).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

import pytest
from playwright.sync_api import Browser, Playwright

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "NEEDS_CHROMIUM", "WAIT_MS", "launch"]

_FOUND = shutil.which("chromium")
CHROMIUM: Final[Path | None] = Path(_FOUND) if _FOUND else None
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# How long a check waits for the page (``expect``'s timeout): long, for a busy machine.
WAIT_MS: Final = 20_000
# The mark of a browser test module (``pytestmark = NEEDS_CHROMIUM``).
NEEDS_CHROMIUM: Final = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH for the browser tests (apt-get install chromium)",
)


def launch(playwright: Playwright) -> Browser:
    if CHROMIUM is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
