"""The registry folder: the flow specs ``POST /api/runs`` may start, by flow id.

Every ``*.yaml``, ``*.yml`` and ``*.json`` file of the folder that is a valid
flow is one entry; a file that is not is skipped. Where two files hold the
same flow id, the higher version wins (then the later file name). The folder
is read again on each request, so a spec dropped in is startable at once.
"""

from __future__ import annotations

from pathlib import Path

import attrs

import flowcore

from ._http import ApiError

__all__ = ["FlowFolder"]

_PATTERNS = ("*.yaml", "*.yml", "*.json")
_MAX_SPEC_BYTES = 1 << 20


@attrs.frozen
class FlowFolder:
    folder: Path | None

    def flows(self) -> list[tuple[flowcore.Flow, Path]]:
        if self.folder is None:
            return []
        best: dict[str, tuple[flowcore.Flow, Path]] = {}
        files = sorted(p for pattern in _PATTERNS for p in self.folder.glob(pattern))
        for path in files:
            try:
                if path.stat().st_size > _MAX_SPEC_BYTES:
                    continue
                flow = flowcore.parse_flow(path.read_text(encoding="utf-8"), str(path))
            except (OSError, UnicodeDecodeError, flowcore.SpecError):
                continue  # a folder may hold files that are not flows
            held = best.get(flow.id)
            if held is None or flow.version >= held[0].version:
                best[flow.id] = (flow, path)
        return sorted(best.values(), key=lambda item: item[0].id)

    def path_of(self, flow_id: str) -> Path:
        for flow, path in self.flows():
            if flow.id == flow_id:
                return path
        if self.folder is None:
            raise ApiError(
                422, "unknown-flow", "this server has no registry folder (serve --flows DIR)"
            )
        raise ApiError(422, "unknown-flow", f"no flow {flow_id[:200]!r} in the registry folder")
