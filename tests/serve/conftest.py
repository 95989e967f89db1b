"""The browser the web view's tests share: one Chromium per test module
(``browser``), with every ``expect`` waiting ``WAIT_MS``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from .browser import WAIT_MS, launch


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    expect.set_options(timeout=WAIT_MS)  # also for the checks that name none
    with sync_playwright() as playwright:
        found = launch(playwright)
        try:
            yield found
        finally:
            found.close()
