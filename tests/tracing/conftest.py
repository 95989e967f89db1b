"""The Temporal dev server fixture, shared with tests/temporal."""

from __future__ import annotations

from tests.temporal.conftest import temporal_address

__all__ = ["temporal_address"]
