"""Debian's Chromium driven by Playwright, for the web view's tests and screenshot.

No browser is downloaded: Playwright drives the ``chromium`` found on ``PATH``
(``apt-get install chromium``), found as ``.ci/run`` finds it; without one the
browser tests are skipped (and under ``CI`` that skip fails the run).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

from playwright.sync_api import Browser, Playwright

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "launch"]

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


def launch(playwright: Playwright) -> Browser:
    if CHROMIUM is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
