"""``scripts/gen_screenshots.py`` keeps working: its seeding and its capture of two
pages, in a real browser (Playwright driving Debian's Chromium), into a temporary
folder, give a valid PNG of the viewport's size; and a page it does not know is
refused by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Final

import httpx
import pytest

from .browser import NEEDS_CHROMIUM

ROOT: Final = Path(__file__).resolve().parents[2]

pytestmark = NEEDS_CHROMIUM


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_screenshots", ROOT / "scripts" / "gen_screenshots.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_script_seeds_serves_and_captures_the_scheduled_calls_and_updates_panes(
    tmp_path: Path,
) -> None:
    gen = script()
    db = tmp_path / "seeded.db"
    gen.seed(db)
    with gen.serving(db) as (url, token):
        # The seeded runs, as the API gives them: fixed ids, fixed times, every kind.
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as api:
            runs = {r["runId"]: r for r in api.get("/api/runs").json()["runs"]}
            assert {runs[i]["status"] for i in ("order-a1001", "order-a1002")} == {
                "completed",
                "failed",
            }
            assert "batch-b2001/refund#1" in runs
            assert runs["order-a1001"]["createdAt"] == "2026-03-02T09:00:00.000Z"
            # The expense's update waits on its question (the updates page's subject).
            updates = api.get("/api/runs/expense-e310/updates").json()
            assert [(u["updateId"], u["status"]) for u in updates] == [("approve-1", "running")]
            with pytest.raises(ValueError, match="no such page to capture: nope"):
                gen.capture(url, token, tmp_path / "out", ["nope"])
        written = gen.capture(url, token, tmp_path / "out", ["scheduled", "updates"])
    assert written == [tmp_path / "out" / "scheduled.png", tmp_path / "out" / "updates.png"]
    for path in written:
        assert gen.png_size(path) == (gen.WIDTH, gen.HEIGHT)
        assert path.stat().st_size > 10_000  # a picture, not a blank page
    (tmp_path / "not.png").write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(ValueError, match="not a PNG image"):
        gen.png_size(tmp_path / "not.png")
