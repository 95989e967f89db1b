"""What ``flowcore flows`` prints: the flows of ``--flows`` (spec files, or folders
of them, as ``flowcore serve --flows`` reads its registry folder), each with the
handler modules of ``--tools`` (repeatable) that have a handler for everything
it calls, or what the nearest module lacks (the catalogue's ``flows``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Final

import click
from rich.text import Text

import flowcore
from flowcore_handlers import Host, Registry, RegistryError, load_registry, tools_module_name
from flowcore_ops import Context

from ._common import CliError
from ._derive import View
from ._progress import out

__all__ = ["FLOWS_VIEW"]

_PATTERNS: Final = ("*.yaml", "*.yml", "*.json")


def _specs(paths: tuple[Path, ...]) -> list[tuple[flowcore.Flow, Path]]:
    """The flows of ``paths`` by id (the highest version wins); files that are no
    valid flow are passed over, as a registry folder passes them over."""
    files: list[Path] = []
    for path in paths:
        files += (
            sorted(p for pattern in _PATTERNS for p in path.glob(pattern))
            if path.is_dir()
            else [path]
        )
    best: dict[str, tuple[flowcore.Flow, Path]] = {}
    for path in files:
        try:
            flow = flowcore.parse_flow(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, flowcore.SpecError):
            continue
        held = best.get(flow.id)
        if held is None or flow.version >= held[0].version:
            best[flow.id] = (flow, path)
    return sorted(best.values(), key=lambda item: item[0].id)


def _context(ctx: Context, values: dict[str, Any]) -> Context:
    modules: dict[str, Registry] = {}
    for name in values.get("tools") or ():
        stored = tools_module_name(name)
        if stored is not None and stored not in modules:
            try:
                modules[stored] = load_registry(stored)
            except RegistryError as exc:
                raise CliError(str(exc)) from None
    paths = tuple(Path(p) for p in values.get("flows") or ())
    return dataclasses.replace(ctx, tools_modules=modules, flow_list=lambda: _specs(paths))


async def _render(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    for flow in output.flows:
        if flow.runnable:
            ran = f"runs with {', '.join(flow.modules)}" if flow.modules else "calls no handler"
        else:
            ran = "not runnable: " + ", ".join(f"no handler for {m}" for m in flow.missing)
        out.print(Text(f"{flow.flow_id} v{flow.version}  {ran}  ({flow.source})"))
        for word, declared in (("update", flow.updates), ("query", flow.queries)):
            for decl in declared:
                about = f": {decl.description}" if decl.description else ""
                out.print(Text(f"  {word} {decl.name}{about}"))
    return None


FLOWS_VIEW: Final = View(
    "The flows of --flows, each with the --tools modules that run it, or what is missing.",
    options=(
        click.Option(
            ["--flows"],
            multiple=True,
            type=click.Path(exists=True, path_type=Path),
            help="A spec file or a folder of them (repeatable).",
        ),
        click.Option(["--tools"], multiple=True, help="A handler module (repeatable)."),
    ),
    context=_context,
    render=_render,
)
