"""The MCP tests on Temporal use the Temporal dev server of ``tests/temporal`` (one a session)."""

from tests.temporal.conftest import temporal_address

__all__ = ["temporal_address"]
