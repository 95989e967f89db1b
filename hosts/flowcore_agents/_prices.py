"""Model prices, and the one mapping from pydantic-ai's usage to flowcore's.

Everything here is exact integer arithmetic: a price is in minor units per
million tokens, and a cost is rounded up to the next minor unit, so that a
run is never charged less than it spent. ``usage_of`` is the only place that
turns a ``RunUsage`` into a ``flowcore.Usage``, the usage that travels on the
wire and that the run's ledger charges: steps, cost, tokens (the total, and
its split into input, output and cache reads), turns and tool calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import flowcore

if TYPE_CHECKING:
    from pydantic_ai.usage import RunUsage

__all__ = [
    "MAX_PRICE",
    "PER_TOKENS",
    "Price",
    "PriceError",
    "Prices",
    "token_allowance",
    "usage_of",
]

PER_TOKENS = 1_000_000
"""Prices are per this many tokens."""

MAX_PRICE = 10**12
"""The largest price accepted (minor units per million tokens): far above any model's."""


class PriceError(ValueError):
    """A price table that cannot be used: the message names the model and the field."""


def _amount(value: object, where: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_PRICE:
        raise PriceError(f"{where} must be an integer from 0 to {MAX_PRICE:,}, not {value!r}")
    return value


@dataclass(frozen=True)
class Price:
    """What one model costs, in minor units (e.g. cents) per million tokens.

    ``input`` is charged for the input tokens that were neither read from nor
    written to the provider's prompt cache, ``cache_read`` and
    ``cache_write`` for those that were (each defaults to ``input``),
    ``output`` for every output token (reasoning and audio included).
    """

    input: int
    output: int
    cache_read: int | None = None
    cache_write: int | None = None

    def __post_init__(self) -> None:
        _amount(self.input, "Price.input")
        _amount(self.output, "Price.output")
        if self.cache_read is not None:
            _amount(self.cache_read, "Price.cache_read")
        if self.cache_write is not None:
            _amount(self.cache_write, "Price.cache_write")

    @property
    def highest(self) -> int:
        """The dearest kind of token: what bounds the cost of any token."""
        return max(
            self.input,
            self.output,
            self.input if self.cache_read is None else self.cache_read,
            self.input if self.cache_write is None else self.cache_write,
        )

    def cost_micro(self, usage: RunUsage) -> int:
        """The exact cost of ``usage`` in millionths of a minor unit."""
        cached = usage.cache_read_tokens + usage.cache_write_tokens
        plain = max(0, usage.input_tokens - cached)
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        return (
            plain * self.input
            + usage.cache_read_tokens * read
            + usage.cache_write_tokens * write
            + usage.output_tokens * self.output
        )


@dataclass(frozen=True)
class Prices:
    """A price table: model name → ``Price``, and an optional ``default`` for the rest.

    The name is the one ``pydantic_agent`` looks models up by: its
    ``model_name`` argument, else the agent's model's ``model_name``
    (``Agent("openai:gpt-4o")`` → ``"gpt-4o"``), else the string the agent
    kept (``defer_model_check=True``).
    """

    models: Mapping[str, Price] = field(default_factory=dict)
    default: Price | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.models, Mapping):
            raise PriceError(f"Prices.models must be a mapping, not {type(self.models).__name__}")
        for name, price in self.models.items():
            if not isinstance(name, str) or not name:
                raise PriceError(
                    f"Prices.models: a model name must be a non-empty string: {name!r}"
                )
            if not isinstance(price, Price):
                raise PriceError(
                    f"Prices.models[{name!r}] must be a Price, not {type(price).__name__}"
                )
        if self.default is not None and not isinstance(self.default, Price):
            raise PriceError(f"Prices.default must be a Price, not {type(self.default).__name__}")
        object.__setattr__(self, "models", dict(self.models))

    def of(self, model_name: str | None) -> Price | None:
        """The price of ``model_name``: its own, else the default, else None."""
        if model_name is not None and model_name in self.models:
            return self.models[model_name]
        return self.default


def token_allowance(cost_minor_units: int, price: Price) -> int | None:
    """How many tokens, of any kind, can be bought with ``cost_minor_units`` at most.

    Every token costs at most ``price.highest``, so this many tokens never cost
    more than the allowance once rounded up. None when every token is free.
    """
    if price.highest == 0:
        return None
    return cost_minor_units * PER_TOKENS // price.highest


def usage_of(run_usage: RunUsage, model_name: str | None, prices: Prices | None) -> flowcore.Usage:
    """What an agent run adds to the run's ledger.

    ``steps``: one per model request beyond the first (the ``run-agent``
    effect's own step pays for the first), so an agent run costs the ledger
    as many steps as it made model requests. ``cost_minor_units``: the tokens
    at ``prices``' price for ``model_name``, rounded up to a whole minor unit;
    0 without ``prices``. Raises ``PriceError`` when ``prices`` has no price
    for the model (an unpriced model is never charged nothing by mistake).
    ``tokens``: input + output tokens, split into ``input_tokens`` (cache
    reads included), ``output_tokens`` and ``cache_read_tokens``; ``turns``:
    the model requests; ``tool_calls``: the calls the agent made to its own
    tools.
    """
    steps = max(0, run_usage.requests - 1)
    cost = 0
    if prices is not None:
        price = prices.of(model_name)
        if price is None:
            raise PriceError(f"no price for model {model_name!r} in the price table")
        cost = -(-price.cost_micro(run_usage) // PER_TOKENS)
    return flowcore.Usage(
        steps=steps,
        cost_minor_units=cost,
        tokens=run_usage.total_tokens,
        tool_calls=run_usage.tool_calls,
        turns=run_usage.requests,
        input_tokens=run_usage.input_tokens,
        output_tokens=run_usage.output_tokens,
        cache_read_tokens=run_usage.cache_read_tokens,
    )
