"""Cross-references on the raw mapping: a tolerant walk over a spec's steps and
the strings they hold, finding duplicate step ids, undeclared tools and
expressions that read unknown step ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .hooks import _did_you_mean
from .model import _IDENT
from .positions import _format_path
from .reads import check_reads
from .walk import _all_steps

# --- cross-references on the raw mapping ------------------------------------------


def _cross_check(raw: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []
    steps = raw.get("steps")
    if not isinstance(steps, list):
        return out
    tools = raw.get("tools") if isinstance(raw.get("tools"), dict) else {}
    seen: dict[str, tuple[Any, ...]] = {}
    for step, path in _all_steps(raw):
        sid = step.get("id")
        if isinstance(sid, str) and _IDENT.match(sid):
            if sid in seen:
                first = _format_path(seen[sid])
                out.append(((*path, "id"), f"duplicate step id {sid!r} (first used at {first})"))
            else:
                seen[sid] = path
        for kind in ("call_tool", "schedule"):
            body = step.get(kind)
            if isinstance(body, dict) and isinstance(body.get("tool"), str):
                tool = body["tool"]
                if tools is not None and tool not in tools:
                    hint = _did_you_mean(tool, tools)
                    message = f"tool {tool!r} is not declared under 'tools'{hint}"
                    out.append(((*path, kind, "tool"), message))
    out.extend(check_reads(raw))
    return out
