"""``flowcore replay`` shows times as people read them (ISO-8601, UTC, to the
millisecond), and keeps the log's epoch milliseconds in ``--json``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flowcore_cli.main import run

REPO = Path(__file__).resolve().parents[2]
VECTOR = REPO / "specs" / "conformance" / "triage-example"


def test_replay_prints_iso_times_and_json_keeps_epoch_ms(
    capfd: pytest.CaptureFixture[str],
) -> None:
    log, spec = VECTOR / "log.ndjson", REPO / "specs" / "examples" / "triage.yaml"
    capfd.readouterr()
    assert run(["replay", str(log), "--spec", str(spec), "--json"]) == 0
    document = json.loads(capfd.readouterr().out)
    ats = [e["at"] for e in document["trajectory"]]
    assert ats and all(isinstance(at, int) for at in ats)
    assert run(["replay", str(log), "--spec", str(spec)]) == 0
    text = capfd.readouterr().out
    assert "at (UTC)" in text
    shown = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text)
    first = ats[0]
    assert shown, text
    expected = datetime.fromtimestamp(first / 1000, tz=UTC).isoformat(timespec="milliseconds")
    assert expected.replace("+00:00", "Z") in shown
