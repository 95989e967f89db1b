"""A tool that holds until told to finish (the stopping tests' handler).

``held.call`` writes ``input.started`` once it runs, then waits until the file
``input.release`` exists (at most a minute) and returns. A test can so stop a
process while the handler is surely running, and let it finish after.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from flowcore import CallTool


def held(call: CallTool) -> dict[str, Any]:
    Path(call.input["started"]).write_text("started")
    release = Path(call.input["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"finished": True, "released": release.exists()}


TOOLS = {"held.call": held}
