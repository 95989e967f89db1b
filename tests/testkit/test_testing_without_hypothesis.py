"""flowcore without the ``testing`` extra: hypothesis unimportable in a fresh
interpreter, ``flowcore``, ``flowcore.testing`` (simulator, invariants,
exploration) and ``flowcore check`` still work, and a name that needs
hypothesis raises ``ImportError`` naming the extra to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..explore.test_explore import FIXED_SAGA

ROOT = Path(__file__).resolve().parents[2]

WORLD = """
from flowcore.testing import Fail, Ok, Unknown, World

SHOP = World(
    tools={
        "payments.charge": [Ok({"id": "ch-1"}), Fail("declined"), Unknown()],
        "inventory.reserve": [Ok(), Fail("out-of-stock")],
        "payments.refund": [Ok()],
    }
)
"""

# Run in a fresh interpreter where ``import hypothesis`` fails, as when the
# extra is not installed; prints one JSON document of what it saw.
SCRIPT = """
import contextlib, io, json, sys
sys.modules["hypothesis"] = None  # import hypothesis now raises ModuleNotFoundError

import flowcore
import flowcore.testing
from flowcore.testing import World, check_run, explore, simulate
from flowcore_cli.main import run

seen = {"explore": callable(explore) and callable(check_run) and callable(simulate)}
with contextlib.redirect_stdout(io.StringIO()) as printed:
    seen["check"] = run(
        ["check", "order.yaml", "--input", '{"order": "o-1"}', "--world", "checks.py:SHOP"]
    )
seen["check_output"] = printed.getvalue()
refused = {}
for name in ("flows", "event_streams", "faults", "FlowMachine"):
    try:
        exec(f"from flowcore.testing import {name}")
    except ImportError as e:
        refused[name] = str(e)
seen["refused"] = refused
seen["hypothesis_loaded"] = sys.modules.get("hypothesis") is not None
print(json.dumps(seen))
"""


def test_flowcore_testing_and_check_work_without_hypothesis(tmp_path: Path) -> None:
    (tmp_path / "order.yaml").write_text(FIXED_SAGA)
    (tmp_path / "checks.py").write_text(WORLD)
    path = os.pathsep.join(
        [str(ROOT), str(ROOT / "hosts"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["explore"] is True
    assert seen["check"] == 0, seen["check_output"]
    assert "complete" in seen["check_output"]
    assert seen["hypothesis_loaded"] is False
    assert set(seen["refused"]) == {"flows", "event_streams", "faults", "FlowMachine"}
    for name, message in seen["refused"].items():
        assert f"flowcore.testing.{name} needs hypothesis" in message
        assert "pip install 'flowcore[testing]'" in message
