"""What an agent run publishes to its flowcore run's progress stream.

``pydantic_agent`` hands ``agent.run`` an ``event_stream_handler`` (pydantic-ai's
own streaming of a run: each model request is streamed, and the agent's tool
calls are events too) that turns the run's events into progress items
(``flowcore_handlers.publish``), in the order they come:

- the model's text as it streams: each ``TextPart``'s first content and each
  ``TextPartDelta`` is one text chunk (a ``str`` item);
- each call of a function tool: ``{"kind": "tool-call", "tool", "args",
  "callId"}``, before the tool runs;
- each tool result: ``{"kind": "tool-result", "tool", "callId", "outcome",
  "output"}``.

Arguments and outputs are JSON data (``pydantic_core.to_jsonable_python``,
anything else as its text); one over ``MAX_SHOWN_CHARS`` as JSON is replaced by
its JSON text cut to that length. Thinking, output-tool calls and the other
events are not published. Publishing never fails the agent: an item flowcore
cannot keep is dropped. An ``event_stream_handler`` the agent has of its own
still gets every event.

It must never change what the run does: the run, its result, its usage and
its limits are ``agent.run``'s as without it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Final

import msgspec
import pydantic_core
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import RunContext

from flowcore_handlers import publish, safe_text

__all__ = ["MAX_SHOWN_CHARS", "item_of", "publishing_events"]

MAX_SHOWN_CHARS: Final = 8_000
"""A tool call's arguments or a tool's output, as JSON, is published whole up to
this many characters; a longer one as its JSON text cut to it."""


def _shown(value: Any) -> Any:
    data = pydantic_core.to_jsonable_python(value, fallback=safe_text)
    try:
        text = msgspec.json.encode(data).decode()
    except (TypeError, OverflowError, ValueError):
        return safe_text(data, MAX_SHOWN_CHARS)
    return data if len(text) <= MAX_SHOWN_CHARS else safe_text(text, MAX_SHOWN_CHARS)


def item_of(event: AgentStreamEvent) -> Any:
    """The progress item ``event`` becomes; None for an event that is not published."""
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            return part.content
    elif isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta) and delta.content_delta:
            return delta.content_delta
    elif isinstance(event, FunctionToolCallEvent):
        call = event.part
        return {
            "kind": "tool-call",
            "tool": call.tool_name,
            "args": _shown(call.args_as_dict() if call.args else {}),
            "callId": call.tool_call_id,
        }
    elif isinstance(event, FunctionToolResultEvent):
        done = event.part
        return {
            "kind": "tool-result",
            "tool": done.tool_name,
            "callId": done.tool_call_id,
            "outcome": done.outcome,
            "output": _shown(done.content),
        }
    return None


def _publish(event: AgentStreamEvent) -> None:
    try:
        item = item_of(event)
        if item is not None:
            publish(item)
    except Exception:  # e.g. ProgressError; args the model garbled (not JSON)
        pass  # progress is never worth failing the agent for


async def _published(events: AsyncIterable[AgentStreamEvent]) -> AsyncIterator[AgentStreamEvent]:
    async for event in events:
        _publish(event)
        yield event


def publishing_events(own: Any) -> Any:
    """The ``event_stream_handler`` that publishes a run's events, then hands them to
    ``own`` (the agent's own handler), when it has one."""

    async def handle(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        if own is None:
            async for event in events:
                _publish(event)
            return
        await own(ctx, _published(events))

    return handle
