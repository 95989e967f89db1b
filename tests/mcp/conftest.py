"""The MCP tests on Temporal need the Temporal dev server of ``tests/temporal`` (one per session)."""

from tests.temporal.conftest import temporal_address

__all__ = ["temporal_address"]
