"""What ``flowcore upgrade`` and ``flowcore temporal upgrade`` print: a run
moved to another version of its flow (or checked, or already there), or the
refusal of one whose log diverges from the new spec."""

from __future__ import annotations

import json

import click
from rich.text import Text

import flowcore

from ._common import CliError
from ._history import short_json
from ._progress import out

__all__ = ["upgrade_done", "upgrade_refused"]


def _say(line: str) -> None:
    """One line on stdout: values from runs are shown as they are, never read as markup."""
    out.print(Text(line))


def _spec_name(version: int, spec_hash: str) -> str:
    return f"version {version} (spec {spec_hash[:12]})"


def upgrade_done(
    run_id: str, from_version: int, made: flowcore.Upgrade, dry_run: bool, as_json: bool
) -> int:
    """The run moved (or could, or is there already): a line, or JSON; exit 0."""
    moved = made.changed and not dry_run
    if as_json:
        click.echo(
            json.dumps(
                {
                    "runId": run_id,
                    "flowId": made.flow_id,
                    "moved": moved,
                    "changed": made.changed,
                    "dryRun": dry_run,
                    "from": {"version": from_version, "specHash": made.from_spec_hash},
                    "to": {"version": made.version, "specHash": made.spec_hash},
                    "at": made.at,
                    "pending": [flowcore.effect_to_wire(e) for e in made.pending],
                },
                ensure_ascii=False,
            )
        )
        return 0
    old, new = (
        _spec_name(from_version, made.from_spec_hash),
        _spec_name(made.version, made.spec_hash),
    )
    waits = ", ".join(f"{type(e).__struct_config__.tag} {e.idempotency_key}" for e in made.pending)
    if not made.changed:
        _say(f"run {run_id} is on {new} of flow {made.flow_id!r} already: nothing to do")
    elif dry_run:
        _say(
            f"run {run_id} can move from {old} to {new} of flow {made.flow_id!r}"
            " (dry run: nothing changed)"
        )
    else:
        _say(
            f"moved run {run_id} from {old} to {new} of flow {made.flow_id!r}; it goes on from"
            f" log index {made.at}" + (f", waiting for {waits}" if waits else "")
        )
    return 0


def upgrade_refused(
    run_id: str, flow: flowcore.Flow, exc: flowcore.UpgradeRefused, as_json: bool
) -> int:
    """A run whose log diverges from the new spec: one block on stdout, exit 1.
    Any other refusal (another flow, a settled run) is one line, exit 2."""
    if exc.reason != "diverged":
        raise CliError(str(exc))
    divergence = exc.divergence
    text = str(divergence) if divergence is not None else str(exc)
    why = text.partition(f" at index {exc.index}:")[0] if divergence is not None else text
    if as_json:
        click.echo(
            json.dumps(
                {
                    "runId": run_id,
                    "flowId": flow.id,
                    "moved": False,
                    "refused": True,
                    "reason": exc.reason,
                    "to": {"version": flow.version, "specHash": flow.spec_hash},
                    "index": exc.index,
                    "expected": exc.expected,
                    "actual": exc.actual,
                    "message": why,
                },
                ensure_ascii=False,
                default=str,
            )
        )
        return 1
    _say(
        f"run {run_id} cannot move to {_spec_name(flow.version, flow.spec_hash)} of flow"
        f" {flow.id!r}: {why}"
    )
    _say(f"  index     {exc.index}")
    _say(f"  recorded  {short_json(exc.expected, 300)}")
    _say(f"  new spec  {short_json(exc.actual, 300)}")
    _say("  the run stays on its version; nothing changed")
    return 1
