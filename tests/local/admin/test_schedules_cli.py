"""``flowcore schedule ...`` run for real in subprocesses against a database file.

The worker's firing of due slots is tested with an injected clock
(test_schedules_local.py); here the commands read and change schedules, and a
backfill and a trigger start runs without waiting for the wall clock.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..test_local_cli import bad, ok

SPEC = """\
flow: report
steps:
  - {id: nap, sleep: {for_ms: 10}}
output: "${input}"
schedules:
  nightly:
    cron: "0 7 * * *"
    timezone: Europe/Paris
    overlap: allow_all
    input: {day: "${schedule.at}"}
  hourly: {every: 1h, offset: 15m, limit: 3}
"""


def test_every_schedule_command(tmp_path: Path) -> None:
    spec = tmp_path / "report.yaml"
    spec.write_text(SPEC)
    db = ["--db", str(tmp_path / "s.db")]
    out = ok("schedule", "add", "--spec", str(spec), *db)
    assert "schedule nightly (report): cron 0 7 * * * (Europe/Paris); active; next " in out
    assert "schedule hourly (report): every 1h +15m; active; next " in out
    listed = json.loads(ok("schedule", "list", "--json", *db))
    assert [s["name"] for s in listed] == ["hourly", "nightly"]
    assert listed[0]["remaining"] == 3 and len(listed[1]["nextSlotsMs"]) == 5
    assert "nightly" in ok("schedule", "list", *db)

    out = ok(
        "schedule",
        "backfill",
        "nightly",
        "--start",
        "2026-11-28T00:00:00Z",
        "--end",
        "2026-11-30T12:00:00+01:00",
        *db,
    )
    assert out.splitlines() == [
        "started 2026-11-28T06:00:00Z nightly@2026-11-28T06:00:00Z",
        "started 2026-11-29T06:00:00Z nightly@2026-11-29T06:00:00Z",
        "started 2026-11-30T06:00:00Z nightly@2026-11-30T06:00:00Z",
        "3 of 3 slot(s) started (a worker runs them)",
    ]
    shown = json.loads(ok("show", "nightly@2026-11-29T06:00:00Z", "--json", *db))
    assert shown["status"] == "running"
    again = json.loads(
        ok(
            "schedule",
            "backfill",
            "nightly",
            "--start",
            "2026-11-29T06:00:00Z",
            "--end",
            "2026-11-29T06:00:00Z",
            "--json",
            *db,
        )
    )
    assert [(a["action"], a["why"]) for a in again] == [
        ("skipped", "run 'nightly@2026-11-29T06:00:00Z' exists already")
    ]

    assert ok("schedule", "pause", "nightly", "--note", "holiday week", *db).strip() == (
        "schedule nightly paused"
    )
    assert ok("schedule", "trigger", "nightly", *db).strip() == (
        "started nightly@trigger-1 (a worker runs it)"
    )
    out = ok("schedule", "show", "nightly", *db)
    assert "schedule nightly: flow report, paused: holiday week" in out
    assert "next slots  none" in out and "triggered" in out
    info = json.loads(ok("schedule", "show", "nightly", "--json", *db))
    assert [a["action"] for a in info["actions"]] == ["started"] * 3 + ["skipped", "started"]
    assert info["paused"] and len(info["running"]) == 4
    out = ok("schedule", "resume", "nightly", *db)
    assert out.startswith("schedule nightly resumed; next ")
    assert ok("schedule", "delete", "hourly", *db).strip() == "schedule hourly deleted"
    assert [s["name"] for s in json.loads(ok("schedule", "list", "--json", *db))] == ["nightly"]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "report.yaml"
    spec.write_text(SPEC)
    db = ["--db", str(tmp_path / "s.db")]
    ok("schedule", "add", "--spec", str(spec), *db)
    assert bad("schedule", "show", "nope", *db) == "flowcore: no schedule 'nope' in the database"
    assert "is not an ISO-8601 time" in bad(
        "schedule",
        "backfill",
        "nightly",
        "--start",
        "yesterday",
        "--end",
        "2026-11-30T00:00:00Z",
        *db,
    )
    assert "has no time zone" in bad(
        "schedule",
        "backfill",
        "nightly",
        "--start",
        "2026-11-30T00:00:00",
        "--end",
        "2026-11-30T00:00:00Z",
        *db,
    )
    assert "before it starts" in bad(
        "schedule",
        "backfill",
        "nightly",
        "--start",
        "2026-11-30T00:00:00Z",
        "--end",
        "2026-11-29T00:00:00Z",
        *db,
    )
    plain = tmp_path / "plain.yaml"
    plain.write_text(SPEC.split("schedules:")[0])
    assert bad("schedule", "add", "--spec", str(plain), *db).endswith(
        "plain.yaml: the spec declares no schedules"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text(SPEC.replace("Europe/Paris", "Europe/Pariss"))
    line = bad("schedule", "add", "--spec", str(broken), *db)
    assert "broken.yaml:8:5: unknown time zone 'Europe/Pariss'" in line
    assert bad("schedule", "list", "--db", str(tmp_path / "none.db")).startswith(
        "flowcore: no database at"
    )
