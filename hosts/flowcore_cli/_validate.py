"""``flowcore validate SPEC...``: every problem of every spec, with its location."""

from __future__ import annotations

import json
from typing import Any

import click

import flowcore
from flowcore import SpecError, spec_warnings

from ._common import CliError, problem_line, read_bytes

__all__ = ["validate"]


def _check(path: str) -> dict[str, Any]:
    result: dict[str, Any] = {"file": path, "ok": True, "problems": [], "warnings": []}
    try:
        data = read_bytes(path, "spec file")
    except CliError as exc:
        result["ok"] = False
        message = exc.message.removeprefix(f"{path}: ")
        result["problems"] = [
            {"file": path, "line": None, "column": None, "path": "", "message": message}
        ]
        return result
    try:
        flow = flowcore.parse_flow(data, source_name=path)
    except SpecError as exc:
        result["ok"] = False
        result["problems"] = [
            {
                "file": p.source,
                "line": p.line,
                "column": p.column,
                "path": p.path,
                "message": p.message,
            }
            for p in exc.problems
        ]
        result["text"] = [problem_line(p) for p in exc.problems]
        return result
    result.update(
        flow=flow.id, version=flow.version, specHash=flow.spec_hash, steps=len(flow.by_id)
    )
    result["parsed"] = flow
    return result


def _warn(results: list[dict[str, Any]]) -> None:
    """A warning for each declared budget limit below the flow's worst case
    (``flowcore.budget_bound``; the valid specs given are its subflows), and
    for each of the flow's own (``spec_warnings``: a scheduled call the run
    may cancel before it is due)."""
    flows = [r["parsed"] for r in results if "parsed" in r]
    subflows: dict[str, flowcore.Flow] = {}
    for flow in flows:
        subflows.setdefault(flow.id, flow)
    for r in results:
        flow = r.pop("parsed", None)
        if flow is None:
            continue
        bound = flowcore.budget_bound(flow, subflows=subflows)
        r["warnings"] = [
            {"limit": s.limit, "declared": s.declared, "worst": s.worst, "message": s.message}
            for s in bound.below(flow.budget)
        ]
        r["warnings"].extend(
            {"step": w.step, "path": w.path, "message": w.message} for w in spec_warnings(flow)
        )


@click.command()
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
def validate(specs: tuple[str, ...], as_json: bool) -> int:
    """Check flow specs; print every problem as FILE:LINE:COLUMN: MESSAGE.

    Problems go to stdout (like a compiler's diagnostics), one per line.
    Exit 0 when every spec is valid, 2 when any has a problem (or cannot be
    read). A declared budget limit below the flow's worst case (``flowcore
    budget``), and a schedule step whose call the run may cancel before it is
    due (no outlive_run, nothing waits after it), are warning lines; they do
    not change the exit code.
    """
    results = [_check(path) for path in specs]
    _warn(results)
    ok = all(r["ok"] for r in results)
    if as_json:
        for r in results:
            r.pop("text", None)
        click.echo(json.dumps({"ok": ok, "files": results}, indent=2, ensure_ascii=False))
        return 0 if ok else 2
    for r in results:
        if r["ok"]:
            steps = r["steps"]
            click.echo(
                f"{r['file']}: ok (flow {r['flow']} v{r['version']}, "
                f"{steps} step{'s' if steps != 1 else ''})"
            )
            for warning in r["warnings"]:
                at = f" (at {warning['path']})" if warning.get("path") else ""
                click.echo(f"{r['file']}: warning: {warning['message']}{at}")
        elif "text" in r:
            for line in r["text"]:
                click.echo(line)
        else:
            click.echo(f"{r['file']}: {r['problems'][0]['message']}")
    if not ok:
        bad = sum(1 for r in results if not r["ok"])
        total = sum(len(r["problems"]) for r in results)
        click.echo(
            f"{total} problem{'s' if total != 1 else ''} in {bad} of {len(results)} "
            f"spec{'s' if len(results) != 1 else ''}"
        )
    return 0 if ok else 2
