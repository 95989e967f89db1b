"""Keyed signals and ``signal_run`` on the local host, on real SQLite files:
the CLI routes a keyed signal without a run id to the runs waiting for it, a
run signals another run, and a delivery interrupted by a crash is delivered
once when the next worker takes it up (local.md, language.md §4.6, §4.16)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from flowcore import EffectSucceeded
from flowcore_local import HostError, LocalHost, NoSignalWait
from flowcore_local._store import Store

from ..local_helpers import settle
from ..test_local_cli import bad, ok

ORDER = """
flow: order
steps:
  - id: paid
    await_signal: {signal: payment, key: "order-${input.order}"}
output: "${steps.paid.output}"
"""

SENDER = """
flow: sender
steps:
  - id: tell
    signal_run:
      run: "${input.to}"
      signal: payment
      payload: {amount: "${input.amount}"}
      key: "order-${input.order}"
output: "${steps.tell.output}"
"""


def received(records: list[Any]) -> list[dict[str, Any]]:
    """The signal-received events a run's log holds."""
    return [
        r.data
        for r in records
        if r.type == "event.reported" and r.data["kind"] == "signal-received"
    ]


def test_cli_keyed_signals_reach_only_the_runs_waiting_with_that_key(
    tmp_path: Path, local_db: Path | str
) -> None:
    db = str(local_db)
    spec = tmp_path / "order.yaml"
    spec.write_text(ORDER)
    for order in ("A", "B"):
        inp = json.dumps({"order": order})
        ok("run", str(spec), "--input", inp, "--db", db, "--run-id", order.lower(), "--detach")
    out = ok("signal", "payment", "--key", "order-B", "--data", '{"amount": 2}', "--db", db)
    assert out.split() == ["b"]
    line = bad("signal", "payment", "--key", "order-B", "--db", db)  # b took it: none waits
    assert line == "flowcore: no running run waits for signal 'payment' with key 'order-B'"
    assert bad("signal", "payment", "--db", db).startswith("flowcore: missing NAME")
    empty = bad("signal", "a", "payment", "--key", "", "--db", db)
    assert empty == "flowcore: --key: a signal key must not be empty"
    # A keyed signal for a run by id is buffered like any signal: a's wait has another key.
    ok("signal", "a", "payment", "--key", "order-Z", "--data", "9", "--db", db)
    out = ok("signal", "payment", "--key", "order-A", "--data", '{"amount": 1}', "--db", db)
    assert out.split() == ["a"]
    for run, amount in (("a", 1), ("b", 2)):
        info = json.loads(ok("show", run, "--db", db, "--json"))
        assert info["status"] == "completed"
        assert info["output"] == {"amount": amount}


def test_api_keyed_signal_goes_to_every_run_waiting_with_that_key(
    tmp_path: Path, local_db: Path | str
) -> None:
    async def main() -> None:
        async with LocalHost(local_db) as host:
            for run, order in (("x1", "same"), ("x2", "same"), ("y", "other")):
                await host.start(ORDER, {"order": order}, run)
            assert await host.signal_key("payment", "order-same", "paid") == ["x1", "x2"]
            assert (await host.run("y")).status == "running"
            with pytest.raises(NoSignalWait):
                await host.signal_key("payment", "order-same", "again")
            for bad in ("k" * 4097, ""):
                with pytest.raises(HostError, match="1 to 4096 characters"):
                    await host.signal("y", "payment", 1, key=bad)
            for run in ("x1", "x2"):
                row = await host.run(run)
                assert (row.status, row.output) == ("completed", "paid")

    asyncio.run(main())


def test_a_run_signals_another_run_once(tmp_path: Path, local_db: Path | str) -> None:
    async def main() -> None:
        async with LocalHost(local_db) as host:
            await host.start(ORDER, {"order": 7}, "receiver")
            await host.start(SENDER, {"to": "receiver", "amount": 30, "order": 7}, "sender")
            row = await settle(host, "sender")
            assert (row.status, row.output) == ("completed", {"run_id": "receiver"})
            receiver = await host.run("receiver")
            assert (receiver.status, receiver.output) == ("completed", {"amount": 30})
            got = received(await host.records("receiver"))
            assert [(e["signal"], e["key"]) for e in got] == [("payment", "order-7")]
            # The receiver settled: signalling it again fails with run-settled.
            await host.start(SENDER, {"to": "receiver", "amount": 1, "order": 7}, "late")
            late = await settle(host, "late")
            assert late.status == "failed" and late.error["type"] == "run-settled"
            await host.start(SENDER, {"to": "nobody", "amount": 1, "order": 7}, "lost")
            lost = await settle(host, "lost")
            assert lost.status == "failed" and lost.error["type"] == "unknown-run"

    asyncio.run(main())


def test_a_crash_while_delivering_delivers_once(
    tmp_path: Path, local_db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker dies after the signal was applied to the receiver and before
    the sender's answer was written: that transaction never commits, so the
    next worker delivers it once, and answers it. (The death is a BaseException:
    an ordinary exception in one run's delivery is contained by the worker.)"""
    db = local_db
    real_apply = Store.apply

    class Died(BaseException):
        """The process ends here: nothing after it runs."""

    def crashing(self: Store, run_id: str, event: Any, now: int) -> Any:
        if run_id == "sender" and isinstance(event, EffectSucceeded):
            raise Died("the worker died here")
        return real_apply(self, run_id, event, now)

    async def first() -> None:
        async with LocalHost(db) as host:
            await host.start(ORDER, {"order": 1}, "receiver")
            await host.start(SENDER, {"to": "receiver", "amount": 5, "order": 1}, "sender")
            monkeypatch.setattr(Store, "apply", crashing)
            with pytest.raises(Died, match="the worker died here"):
                await settle(host, "sender")
            monkeypatch.setattr(Store, "apply", real_apply)

    async def second() -> None:
        async with LocalHost(db) as host:
            assert (await host.run("receiver")).status == "running"  # nothing was delivered
            assert received(await host.records("receiver")) == []
            row = await settle(host, "sender")
            assert (row.status, row.output) == ("completed", {"run_id": "receiver"})
            assert len(received(await host.records("receiver"))) == 1
            assert (await host.run("receiver")).output == {"amount": 5}

    asyncio.run(first())
    asyncio.run(second())


def test_an_error_while_delivering_fails_that_sender_alone(
    tmp_path: Path, local_db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ordinary exception while delivering one run's signal-run does not stop the
    worker: the delivery is rolled back (the receiver got nothing), the sender's step
    fails with ``host-error`` saying why, and another run's delivery goes on."""
    real_apply = Store.apply

    def failing(self: Store, run_id: str, event: Any, now: int) -> Any:
        if run_id == "sender" and isinstance(event, EffectSucceeded):
            raise RuntimeError("disk on fire")
        return real_apply(self, run_id, event, now)

    async def main() -> dict[str, Any]:
        async with LocalHost(local_db) as host:
            await host.start(ORDER, {"order": 1}, "receiver")
            await host.start(ORDER, {"order": 2}, "other-receiver")
            await host.start(SENDER, {"to": "receiver", "amount": 5, "order": 1}, "sender")
            await host.start(
                SENDER, {"to": "other-receiver", "amount": 7, "order": 2}, "other-sender"
            )
            monkeypatch.setattr(Store, "apply", failing)
            await settle(host, "sender")
            await settle(host, "other-sender")
            monkeypatch.setattr(Store, "apply", real_apply)
            return {
                r: await host.run(r)
                for r in ("sender", "receiver", "other-sender", "other-receiver")
            } | {"received": received(await host.records("receiver"))}

    got = asyncio.run(main())
    assert got["sender"].status == "failed"
    assert got["sender"].error["type"] == "host-error"
    assert "RuntimeError: disk on fire" in got["sender"].error["message"]
    assert got["received"] == [] and got["receiver"].status == "running"
    assert got["other-sender"].status == "completed"
    assert got["other-receiver"].output == {"amount": 7}
