"""Progress streams are not yet on Temporal: the host refuses to read one with a
``HostRefusal`` saying so, which the catalogue's operations give as
``host-refuses`` (with a server, tests/temporal/test_temporal_operations.py).
No Temporal server is needed here: the refusal comes before any call to one."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("temporalio")

from flowcore_handlers import HostRefusal
from flowcore_temporal import TemporalHost


def test_reading_a_progress_stream_on_temporal_is_refused_not_yet() -> None:
    host = object.__new__(TemporalHost)  # no client: nothing may reach a server

    async def main() -> list[str]:
        said = []
        with pytest.raises(HostRefusal) as once:
            await host.progress_records("r", 0)
        said.append(str(once.value))
        with pytest.raises(HostRefusal) as followed:
            [r async for r in host.progress("r", 0, follow=True)]
        said.append(str(followed.value))
        return said

    assert (
        asyncio.run(main())
        == [
            "Temporal host cannot read a run's progress stream:"
            " progress streams are not yet on Temporal"
        ]
        * 2
    )
