"""Debian's Chromium driven by Playwright, for the web view's tests and screenshot.

No browser is downloaded: Playwright drives ``/usr/bin/chromium``
(``apt-get install chromium``); without it the browser tests are skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from playwright.sync_api import Browser, Playwright

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "launch"]

CHROMIUM: Final = Path("/usr/bin/chromium")
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
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
