"""A worker's spec versions by hash (``--specs DIR``, ``new_worker(specs=...)``), for real."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the Temporal host tests need temporalio (.[dev])")

import flowcore
from flowcore_temporal import _registry

from .support import DEMO_TOOLS, die_with_parent, unique
from .test_temporal_cli import command

ORDER = """flow: order
version: {version}
tools: {{charge: {{}}}}
steps:
  - {{id: charge, call_tool: {{tool: charge, input: {version}}}}}
"""


def specs_folder(root: Path) -> Path:
    for version in (1, 2):
        (root / f"v{version}").mkdir(parents=True)
        (root / f"v{version}" / "order.yaml").write_text(ORDER.format(version=version))
    (root / "v2" / "broken.yaml").write_text("flow: order\nsteps: [{id: a, nope: 1}]\n")
    return root


@pytest.fixture
def installed() -> Iterator[None]:
    before = _registry.installed()
    yield
    _registry.install(before)


def test_the_worker_command_loads_every_version_and_reports_what_it_skips(
    temporal_address: str, tmp_path: Path
) -> None:
    folder = specs_folder(tmp_path / "specs")
    queue = unique("specs")
    proc = subprocess.Popen(
        command(
            "worker",
            "--tools",
            str(DEMO_TOOLS),
            "--specs",
            str(folder),
            "--address",
            temporal_address,
            "--task-queue",
            queue,
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ),
        preexec_fn=die_with_parent,
    )
    try:
        assert proc.stderr is not None
        skipped = proc.stderr.readline()
        assert skipped.startswith(f"flowcore: skipped {folder / 'v2' / 'broken.yaml'}: ")
        assert "not a valid flow spec" in skipped
        polling = proc.stderr.readline()  # once it polls
        assert "worker polling" in polling and f"2 spec(s) from {folder}" in polling
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_new_worker_installs_the_registry_for_workflow_code(
    temporal_address: str, tmp_path: Path, installed: None
) -> None:
    import flowcore_temporal as ft

    folder = specs_folder(tmp_path / "specs")
    v1 = ORDER.format(version=1)
    v3 = ORDER.format(version=3)

    async def main() -> None:
        client = await ft.connect(temporal_address)
        ft.new_worker(client, task_queue=unique("specs"), specs=folder)
        registry = _registry.installed()
        assert registry is not None and registry.folders == (folder,)
        assert _registry.lookup(flowcore.parse_flow(v1).spec_hash, "order") == v1
        given = ft.SpecRegistry.from_texts([v3])
        ft.new_worker(client, task_queue=unique("specs"), specs=given)
        assert _registry.installed() is given
        assert _registry.lookup(flowcore.parse_flow(v3).spec_hash, "order") == v3

    asyncio.run(main())
