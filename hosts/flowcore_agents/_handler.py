"""``pydantic_agent``: a ``run-agent`` handler that runs a pydantic-ai ``Agent``.

The handler turns the effect into one ``agent.run``: the prompt is the user
prompt, the effect's instructions are the run's extra instructions, the
remaining budget becomes ``UsageLimits`` (and a timeout), and a
``FlowcoreDeps`` (or what the user's ``deps`` factory builds from it) is the
run's dependencies, so the agent's own tools can deduplicate their side
effects by the idempotency key. The run's output becomes JSON data, its
usage the ``Result``'s usage (``usage_of``), and pydantic-ai's failures
``HandlerError``s with types a flow can catch (``agent_error``). Run by a host
that keeps progress streams, the run's model requests are streamed and what
the agent says and does is published to the flowcore run's progress stream
as it happens (``_stream``); nothing else about the run changes.

It never touches the host: it is an ordinary handler in a tools module's
``AGENTS`` mapping, so the same module serves the local and Temporal hosts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
    RunTimedOut,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UserError,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage, UsageLimits

import flowcore
from flowcore import BudgetRemaining, RunAgent
from flowcore_handlers import UNENCODABLE_OUTPUT, HandlerError, Result, publishes, safe_text

from ._prices import PriceError, Prices, token_allowance, usage_of
from ._stream import publishing_events

__all__ = [
    "AGENT_CONFIG",
    "MODEL_BEHAVIOR",
    "MODEL_ERROR",
    "NO_PRICE",
    "TIMEOUT",
    "USAGE_LIMIT_EXCEEDED",
    "FlowcoreDeps",
    "agent_error",
    "limits_for",
    "pydantic_agent",
]

USAGE_LIMIT_EXCEEDED = "usage-limit-exceeded"
MODEL_ERROR = "model-error"
MODEL_BEHAVIOR = "model-behavior"
TIMEOUT = "timeout"
NO_PRICE = "no-price"
AGENT_CONFIG = "agent-config"

# HTTP statuses worth another attempt: timeouts, conflicts, rate limits, server errors.
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_RETRYABLE_CATEGORIES = (
    ModelRateLimitError,
    ModelUnavailableError,
    ModelServerError,
    ModelConnectionError,
    ModelRequestTimeout,
)


@dataclass(frozen=True)
class FlowcoreDeps:
    """What a flowcore ``run-agent`` effect tells an agent's tools.

    ``idempotency_key`` is unique within the run and the same on every replay
    and every re-run of this effect: a tool with side effects uses it (with
    its own suffix, e.g. ``f"{deps.idempotency_key}/refund"``) to do them once.
    ``run_id``, ``step``, ``path`` and ``attempt`` are read from the key
    (``flowcore.parse_key``); ``run_id`` is the text before the key's first
    ``/``, the root run's id, which is also the run whose budget the agent
    spends (a child run's path starts with the parent's subflow step).
    They are None for a key flowcore does not spell (a host's own effect).
    """

    effect: RunAgent
    idempotency_key: str
    agent_id: str
    member: str | None
    budget_remaining: BudgetRemaining
    run_id: str | None
    step: str | None
    path: str | None
    attempt: int | None

    @classmethod
    def of(cls, effect: RunAgent) -> FlowcoreDeps:
        try:
            key = flowcore.parse_key(effect.idempotency_key)
        except ValueError:
            key = None
        return cls(
            effect=effect,
            idempotency_key=effect.idempotency_key,
            agent_id=effect.agent_id,
            member=effect.member,
            budget_remaining=effect.budget_remaining,
            run_id=None if key is None else key.run_id,
            step=None if key is None else key.step,
            path=None if key is None else key.path,
            attempt=None if key is None else key.attempt,
        )


def _least(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def limits_for(
    budget: BudgetRemaining,
    price_tokens: int | None,
    base: UsageLimits | None = None,
) -> UsageLimits:
    """The ``UsageLimits`` of one agent run under ``budget``, never looser than ``base``.

    ``request_limit`` = ``budget.steps + 1``: the effect's own step pays for
    the first request and each further one reports a step (``usage_of``), so
    the run can report exactly what is left and no more, and at most the
    ``turns`` left (each request is a turn). ``total_tokens_limit`` = the
    ``tokens`` left and ``price_tokens`` (``token_allowance`` of the remaining
    cost, when the cost is limited), whichever is less; ``tool_calls_limit`` =
    the ``tool_calls`` left. Every other field is ``base``'s (pydantic-ai's
    defaults when None), and a limit of ``base`` that is tighter wins.
    """
    base = base if base is not None else UsageLimits()
    requests = _least(budget.steps + 1, budget.turns)
    tokens = _least(price_tokens, budget.tokens)
    return dataclasses.replace(
        base,
        request_limit=_least(base.request_limit, requests),
        total_tokens_limit=_least(base.total_tokens_limit, tokens),
        tool_calls_limit=_least(base.tool_calls_limit, budget.tool_calls),
    )


def agent_error(exc: BaseException) -> HandlerError | None:
    """The ``HandlerError`` a pydantic-ai failure becomes; None for any other exception.

    - ``UsageLimitExceeded`` → ``usage-limit-exceeded`` (not retryable: the
      same budget would stop it again);
    - ``RunTimedOut`` → ``timeout`` (the run's wall clock ran out);
    - ``ModelAPIError`` and ``ModelHTTPError`` → ``model-error``, retryable
      for rate limits, unavailable or overloaded providers, server errors,
      connection failures and timeouts (HTTP 408, 409, 425, 429, 5xx), not
      for a quota that is spent or a request the provider rejected; its
      ``details`` say what the provider said:
      ``model``, and when known ``status`` (HTTP), ``code`` (the provider's
      error code) and ``retry_after_ms``, so a flow reads
      ``${error.details.status}`` in a catch;
    - ``UnexpectedModelBehavior`` (output that failed validation after the
      agent's retries, a content filter, output cut off) → ``model-behavior``,
      not retryable (a flow that wants another try says so in ``retry.errors``);
    - ``UserError`` (the agent is misconfigured, e.g. has no model) →
      ``agent-config``.
    """
    message = safe_text(exc)
    if isinstance(exc, UsageLimitExceeded):
        return HandlerError(USAGE_LIMIT_EXCEEDED, message)
    if isinstance(exc, RunTimedOut):
        return HandlerError(TIMEOUT, message)
    if isinstance(exc, ModelAPIError):
        if isinstance(exc, (ModelQuotaExceededError, ModelRequestRejectedError)):
            retryable = False
        elif isinstance(exc, _RETRYABLE_CATEGORIES):
            retryable = True
        elif isinstance(exc, ModelHTTPError):
            retryable = exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
        else:
            retryable = False
        return HandlerError(
            MODEL_ERROR, message, retryable=retryable, details=_model_error_details(exc)
        )
    if isinstance(exc, UnexpectedModelBehavior):
        if exc.__cause__ is not None:  # e.g. the validation error behind "Exceeded maximum retries"
            message = safe_text(f"{exc}: {exc.__cause__}")
        return HandlerError(MODEL_BEHAVIOR, message)
    if isinstance(exc, UserError):
        return HandlerError(AGENT_CONFIG, message)
    return None


def _model_error_details(exc: ModelAPIError) -> dict[str, Any]:
    """What a ``model-error``'s details hold: the model, and what the provider
    said when it said it (HTTP status, its error code, how long to wait)."""
    details: dict[str, Any] = {"model": safe_text(exc.model_name, 200)}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        details["status"] = status
    code = getattr(exc, "provider_error_code", None)
    if isinstance(code, str):
        details["code"] = safe_text(code, 200)
    after = getattr(exc, "retry_after", None)
    if isinstance(after, int | float) and not isinstance(after, bool) and 0 <= after < 10**9:
        details["retry_after_ms"] = int(after * 1000)
    return details


def _model_name(agent: AbstractAgent[Any, Any]) -> str | None:
    model = getattr(agent, "model", None)
    if isinstance(model, Model):
        return model.model_name
    if isinstance(model, str):
        return model
    return None


def _streams(agent: AbstractAgent[Any, Any]) -> bool:
    """Whether the agent's model can stream its requests: all can but pydantic-ai's
    ``FunctionModel`` given no ``stream_function`` (a test's scripted model)."""
    model = getattr(agent, "model", None)
    while isinstance(model, WrapperModel):
        model = model.wrapped
    return not (isinstance(model, FunctionModel) and model.stream_function is None)


def pydantic_agent(
    agent: AbstractAgent[Any, Any],
    *,
    prices: Prices | None = None,
    deps: Callable[[FlowcoreDeps], Any] | None = None,
    model_name: str | None = None,
    usage_limits: UsageLimits | None = None,
    model_settings: ModelSettings | None = None,
    progress: bool = True,
) -> Callable[[RunAgent], Any]:
    """A handler for a tools module's ``AGENTS`` that runs ``agent`` for each effect.

    ``prices``: the price table the run's cost is charged from (the model is
    looked up by ``model_name``, default the agent's model's name); without
    it the cost is 0, and an effect whose budget limits the cost fails with
    ``no-price`` before anything is spent. ``deps``: builds the agent's
    dependencies from the ``FlowcoreDeps`` (default: the ``FlowcoreDeps``
    itself). ``usage_limits``: limits of your own, tightened by the budget
    (``limits_for``). ``model_settings``: passed to every run. ``progress``:
    publish the model's text as it streams and each tool call and result to
    the run's progress stream (``_stream``), when the host keeps one
    (``flowcore_handlers.publishes``) and the model can stream; False: never
    (each request is then made without streaming).

    The handler returns ``Result(output, usage)``: the agent's output as JSON
    data (``pydantic_core.to_jsonable_python``: models, dataclasses, dates)
    and ``usage_of`` its usage. Failures become ``HandlerError``s
    (``agent_error``); an exception of the agent's own tools passes through
    unchanged (a ``HandlerError`` a tool raises fails the effect with its type).
    """
    if prices is not None and not isinstance(prices, Prices):
        raise TypeError(f"prices must be a Prices, not {type(prices).__name__}")
    if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
        raise TypeError(f"usage_limits must be a UsageLimits, not {type(usage_limits).__name__}")
    fixed_name = model_name

    async def run_agent(effect: RunAgent) -> Result:
        name = fixed_name if fixed_name is not None else _model_name(agent)
        budget = effect.budget_remaining
        price = None if prices is None else prices.of(name)
        if prices is not None and price is None:
            raise HandlerError(NO_PRICE, f"the price table has no price for model {name!r}")
        tokens = None
        if budget.cost_minor_units is not None:
            if price is None:
                raise HandlerError(
                    NO_PRICE,
                    f"{effect.idempotency_key} has a cost budget but agent {effect.agent_id!r}"
                    " has no price table: its cost could be neither bounded nor charged",
                )
            tokens = token_allowance(budget.cost_minor_units, price)
        limits = limits_for(budget, tokens, usage_limits)
        fc = FlowcoreDeps.of(effect)
        timeout = None if budget.wall_clock_ms is None else budget.wall_clock_ms / 1000
        spent = RunUsage()  # pydantic-ai adds to it as it goes: known even when the run fails
        # None: the agent's own handler, if any (pydantic-ai's default), as before.
        events = None
        if progress and publishes() and _streams(agent):
            events = publishing_events(getattr(agent, "event_stream_handler", None))
        try:
            result = await agent.run(
                effect.prompt,
                instructions=effect.instructions,
                deps=fc if deps is None else deps(fc),
                usage_limits=limits,
                usage=spent,
                model_settings=model_settings,
                timeout=timeout,
                event_stream_handler=events,
                metadata={
                    "flowcore_key": effect.idempotency_key,
                    "flowcore_agent": effect.agent_id,
                    "flowcore_member": effect.member,
                },
            )
        except Exception as exc:
            error = agent_error(exc)
            if error is None:
                raise
            # What the run spent before it stopped is charged too: a run cut off by
            # its limits must still count against the budget it was cut off by.
            try:
                error.usage = usage_of(spent, name, prices)
            except PriceError:
                pass
            raise error from exc
        try:
            output = pydantic_core.to_jsonable_python(result.output)
        except pydantic_core.PydanticSerializationError as exc:
            raise HandlerError(
                UNENCODABLE_OUTPUT,
                f"the output of agent {effect.agent_id!r} is not JSON data: {safe_text(exc, 1000)}",
            ) from exc
        try:
            usage = usage_of(result.usage, name, prices)
        except PriceError as exc:  # checked above; kept for a table changed meanwhile
            raise HandlerError(NO_PRICE, safe_text(exc)) from exc
        return Result(output, usage)

    run_agent.__qualname__ = run_agent.__name__ = f"pydantic_agent[{getattr(agent, 'name', None)}]"
    return run_agent
