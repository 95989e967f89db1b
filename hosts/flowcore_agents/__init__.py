"""flowcore's agents: ``run-agent`` effects served by pydantic-ai ``Agent``s.

A tools module maps agent ids to handlers; ``pydantic_agent`` makes one
from an ``Agent``::

    from pydantic_ai import Agent
    from flowcore_agents import Price, Prices, pydantic_agent

    PRICES = Prices({"gpt-4o": Price(input=250, output=1000)})  # cents per million tokens
    AGENTS = {"triager": pydantic_agent(Agent("openai:gpt-4o", output_type=Triage), prices=PRICES)}

Declared team members reach the host as ``run-agent`` effects with
``member`` set, so the same mapping serves them. The remaining budget
bounds each run (``limits_for``), the usage is charged to the run's ledger
(``usage_of``), the agent's tools get the idempotency key (``FlowcoreDeps``)
and failures become error types a flow can catch (``agent_error``). See
specs/agents.md.

Installed with the ``agents`` extra (``pip install 'flowcore[agents]'``);
the pure core never imports it.
"""

from ._handler import (
    AGENT_CONFIG,
    MODEL_BEHAVIOR,
    MODEL_ERROR,
    NO_PRICE,
    TIMEOUT,
    USAGE_LIMIT_EXCEEDED,
    FlowcoreDeps,
    agent_error,
    limits_for,
    pydantic_agent,
)
from ._prices import MAX_PRICE, PER_TOKENS, Price, PriceError, Prices, token_allowance, usage_of

__all__ = [
    "AGENT_CONFIG",
    "MAX_PRICE",
    "MODEL_BEHAVIOR",
    "MODEL_ERROR",
    "NO_PRICE",
    "PER_TOKENS",
    "TIMEOUT",
    "USAGE_LIMIT_EXCEEDED",
    "FlowcoreDeps",
    "Price",
    "PriceError",
    "Prices",
    "agent_error",
    "limits_for",
    "pydantic_agent",
    "token_allowance",
    "usage_of",
]
