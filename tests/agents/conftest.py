"""The agents tests run offline: pydantic-ai's real model clients are switched off.

``TestModel`` and ``FunctionModel`` still answer; any model that would reach
a provider raises instead. The Temporal tests share ``tests/temporal``'s dev
server (one per session).
"""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai", reason="the agents tests need pydantic-ai (.[agents])")

import pydantic_ai.models

from tests.temporal.conftest import temporal_address

pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

__all__ = ["temporal_address"]
