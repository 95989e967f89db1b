"""Spec versions by hash for Temporal workers (``flowcore_temporal._registry``), on real files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import flowcore
from flowcore_temporal import _registry
from flowcore_temporal._registry import SpecNotDeployed, SpecRegistry

V1 = """flow: order
version: 1
tools: {charge: {}}
steps:
  - id: charge
    call_tool: {tool: charge, input: 1}
"""
V2 = V1.replace("version: 1", "version: 2").replace("input: 1", "input: 2")
V3 = V1.replace("version: 1", "version: 3").replace("input: 1", "input: 3")
OTHER = V1.replace("flow: order", "flow: refund")


def h(text: str) -> str:
    return flowcore.parse_flow(text).spec_hash


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "v1" / "order.yaml").write_text(V1)
    (tmp_path / "v2" / "order.yml").write_text(V2)
    (tmp_path / "v2" / "refund.json").write_text(
        '{"flow": "refund", "version": 1, "tools": {"charge": {}},'
        ' "steps": [{"id": "charge", "call_tool": {"tool": "charge", "input": 1}}]}'
    )
    (tmp_path / "README.md").write_text("not a spec: not even looked at")
    return tmp_path


def test_versions_side_by_side_are_found_by_hash(specs: Path) -> None:
    registry = SpecRegistry(specs)
    assert registry.get(h(V1)) == V1 and registry.get(h(V2)) == V2
    assert [v for _, v, _ in registry.hashes("order")] == [1, 2]
    assert len(registry) == 3 and registry.problems == ()
    assert registry.lookup(h(V2), "order") == V2
    flow = registry.flow(h(V1))
    assert flow is not None and flow.version == 1


def test_a_version_added_after_a_miss_is_found_on_the_next_lookup(specs: Path) -> None:
    clock = Clock()
    registry = SpecRegistry(specs, rescan_s=5.0, clock=clock)
    assert registry.get(h(V3)) is None  # a miss; the folder was scanned at start
    (specs / "v3").mkdir()
    (specs / "v3" / "order.yaml").write_text(V3)
    clock.now = 1.0
    assert registry.get(h(V3)) is None  # scanned less than rescan_s ago: not again
    clock.now = 6.0
    assert registry.get(h(V3)) == V3  # the rescan finds it
    assert registry.lookup(h(V3), "order") == V3


def test_a_broken_file_is_skipped_and_reported(specs: Path) -> None:
    (specs / "v2" / "broken.yaml").write_text("flow: order\nsteps: [{id: a, nope: {}}]\n")
    (specs / "v2" / "binary.json").write_bytes(b"\xff\xfe{")
    (specs / "v2" / "list.yaml").write_text("- just\n- a list\n")
    registry = SpecRegistry(specs)
    assert registry.get(h(V2)) == V2  # the good files are still there
    reported = {Path(p.path).name: p.message for p in registry.problems}
    assert set(reported) == {"broken.yaml", "binary.json", "list.yaml"}
    assert reported["binary.json"].startswith("not UTF-8")
    assert reported["broken.yaml"].startswith("not a valid flow spec")
    assert any(
        str(p).endswith("broken.yaml: " + reported["broken.yaml"]) for p in registry.problems
    )
    # Fixed, it counts at the next scan and is no longer reported.
    (specs / "v2" / "broken.yaml").write_text(V3)
    registry.scan()
    assert registry.get(h(V3)) == V3
    assert {Path(p.path).name for p in registry.problems} == {"binary.json", "list.yaml"}


def test_a_missing_spec_names_the_hash_the_flow_and_the_folders(specs: Path) -> None:
    registry = SpecRegistry(specs, rescan_s=0)
    with pytest.raises(SpecNotDeployed) as missing:
        registry.lookup(h(V3), "order")
    exc = missing.value
    assert (exc.spec_hash, exc.flow_id, exc.folders) == (h(V3), "order", (str(specs),))
    text = str(exc)
    assert h(V3)[:12] in text and "'order'" in text and str(specs) in text
    assert "version(s) 1, 2" in text
    with pytest.raises(
        SpecNotDeployed, match=r"is a spec of flow 'order' \(.*order.yaml\), not of flow 'refund'"
    ):
        registry.lookup(h(V1), "refund")


def test_texts_from_a_store(tmp_path: Path) -> None:
    registry = SpecRegistry.from_texts([V1, OTHER])
    assert registry.get(h(OTHER)) == OTHER and registry.get(h(V2)) is None
    registry.add(V2)
    assert registry.lookup(h(V2), "order") == V2
    with pytest.raises(SpecNotDeployed, match="has no folder, only the texts"):
        registry.lookup(h(V3), "order")
    with pytest.raises(flowcore.SpecError):
        registry.add("flow: x\nsteps: 3\n")


def test_a_folder_that_is_gone_is_a_problem_not_an_error(tmp_path: Path) -> None:
    registry = SpecRegistry(tmp_path / "nowhere", rescan_s=0)
    assert registry.get(h(V1)) is None
    assert [p.message for p in registry.problems] == ["is not a folder"]


@pytest.fixture
def installed() -> Iterator[None]:
    before = _registry.installed()
    yield
    _registry.install(before)


def test_the_module_level_lookup_uses_the_installed_registry(specs: Path, installed: None) -> None:
    _registry.install(None)
    with pytest.raises(SpecNotDeployed, match="has no spec registry"):
        _registry.lookup(h(V1), "order")
    _registry.install(SpecRegistry(specs))
    assert _registry.lookup(h(V1), "order") == V1
    with pytest.raises(SpecNotDeployed, match=h(V3)[:12]):
        _registry.lookup(h(V3), "order")


def test_the_worker_command_refuses_a_specs_path_that_is_not_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flowcore_cli.main import run

    assert run(["temporal", "worker", "--specs", str(tmp_path / "nope")]) == 2
    assert f"--specs {tmp_path / 'nope'}: not a folder" in capsys.readouterr().err
