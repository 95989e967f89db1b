"""Run metadata in the core: declarations, start values, set_metadata, replay, filters."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowcore
from flowcore import EffectSucceeded, MetadataError, MetadataFilterError, SpecError
from flowcore.testing import simulate

ORDERS = """
flow: orders
metadata: {customer: string, amount: number, urgent: boolean, tier: integer}
tools: {quote: {class: readonly}}
steps:
  - id: quote
    call_tool: {tool: quote, input: {order: "${input.order}"}}
  - id: mark
    set_metadata:
      amount: "${steps.quote.output.total}"
      urgent: "${steps.quote.output.total > `100`}"
      tier: null
output: "${steps.mark.output}"
"""


def _problems(spec: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        flowcore.parse_flow(spec)
    return [(p.path, p.message) for p in info.value.problems]


def test_the_declaration_is_read_in_order() -> None:
    flow = flowcore.parse_flow(ORDERS)
    assert flow.metadata == {
        "customer": "string",
        "amount": "number",
        "urgent": "boolean",
        "tier": "integer",
    }
    assert list(flow.metadata) == ["customer", "amount", "urgent", "tier"]


def test_a_flow_without_metadata_keeps_its_hash() -> None:
    """Declaring nothing changes nothing: the spec hash is the spec's own, as before."""
    plain = "flow: f\nsteps: [{id: a, sleep: {for_ms: 1}}]\n"
    flow = flowcore.parse_flow(plain)
    assert flow.metadata == {}
    assert (
        flow.spec_hash
        == flowcore.parse_flow(
            {"flow": "f", "steps": [{"id": "a", "sleep": {"for_ms": 1}}]}
        ).spec_hash
    )


def test_bad_declarations_are_spec_errors_with_their_paths() -> None:
    fields = ", ".join(f"f{i}: string" for i in range(17))
    assert _problems(
        f"flow: f\nmetadata: {{{fields}}}\nsteps: [{{id: a, sleep: {{for_ms: 1}}}}]\n"
    ) == [("metadata", "a flow declares at most 16 metadata fields, got 17")]
    found = _problems(
        "flow: f\nmetadata: {who: text, 2x: string, ok: integer}\n"
        "steps: [{id: a, sleep: {for_ms: 1}}]\n"
    )
    assert [path for path, _ in found] == ["metadata.who", "metadata.2x"]
    assert "'text' is not one of: string, integer, number, boolean" in found[0][1]
    assert "not valid" in found[1][1]
    assert _problems("flow: f\nmetadata: [a]\nsteps: [{id: a, sleep: {for_ms: 1}}]\n")[0][0] == (
        "metadata"
    )


def test_set_metadata_must_name_declared_fields_and_literals_must_fit() -> None:
    found = _problems(
        """
flow: f
metadata: {tier: integer, name: string}
steps:
  - id: a
    set_metadata: {tier: high, nme: x, name: "${input.n}"}
  - id: b
    set_metadata: {}
"""
    )
    assert found[0] == (
        "steps[0].set_metadata.tier",
        "metadata field 'tier' (integer) must be an integer, got the string 'high'",
    )
    assert found[1][0] == "steps[0].set_metadata.nme"
    assert "'nme' is not declared" in found[1][1] and "tier, name" in found[1][1]
    assert found[2] == ("steps[1].set_metadata", "set_metadata needs at least one field")
    assert len(found) == 3


def test_start_metadata_is_checked_against_the_declaration() -> None:
    flow = flowcore.parse_flow(ORDERS)
    with pytest.raises(MetadataError) as info:
        flowcore.start(flow, {"order": 1}, metadata={"nope": 1, "tier": "2", "urgent": 1})
    assert info.value.problems == (
        "metadata field 'nope' is not declared (the flow declares: customer, amount, urgent, tier)",
        "metadata field 'tier' (integer) must be an integer, got the string '2'",
        "metadata field 'urgent' (boolean) must be true or false, got the number 1",
    )
    assert isinstance(info.value, flowcore.InputError)  # hosts already refuse those
    with pytest.raises(MetadataError, match="at most 256 characters"):
        flowcore.start(flow, None, metadata={"customer": "x" * 257})
    with pytest.raises(MetadataError, match="finite"):
        flowcore.start(flow, None, metadata={"amount": float("nan")})
    with pytest.raises(MetadataError, match="a mapping"):
        flowcore.start(flow, None, metadata=["customer"])  # type: ignore[arg-type]


def test_start_values_then_set_metadata_without_effects_or_budget() -> None:
    flow = flowcore.parse_flow(ORDERS)
    d = flowcore.start(flow, {"order": "A"}, "r", metadata={"customer": "acme", "tier": 2})
    assert d.state.metadata == {"customer": "acme", "tier": 2}
    before = flowcore.waiting_for(d.state).used_steps
    d = flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/quote#1", output={"total": 140}, at_ms=1)
    )
    # Nothing emitted for set_metadata: only the settlement; no budget step spent on it.
    assert [flowcore.effect_to_wire(e)["kind"] for e in d.effects] == ["settled"]
    assert flowcore.waiting_for(d.state).used_steps == before
    assert d.state.metadata == {"customer": "acme", "amount": 140, "urgent": True}
    assert flowcore.waiting_for(d.state).metadata == d.state.metadata  # the state query
    assert d.state.settled is not None
    assert d.state.settled.output == {"amount": 140, "urgent": True, "tier": None}


def test_a_wrong_type_fails_the_step_and_changes_nothing() -> None:
    flow = flowcore.parse_flow(ORDERS)
    d = flowcore.start(flow, {"order": "A"}, "r", metadata={"tier": 1})
    d = flowcore.advance(
        d.state, EffectSucceeded(idempotency_key="r/quote#1", output={"total": "lots"}, at_ms=1)
    )
    settled = d.state.settled
    assert settled is not None and settled.status == "failed"
    assert settled.error is not None and settled.error.type == "expression-error"
    assert settled.error.message == (
        "step 'mark': set_metadata.amount (number) must be a number, got the string 'lots'"
    )
    assert d.state.metadata == {"tier": 1}


def test_an_unchanged_value_keeps_the_same_metadata_object() -> None:
    """Hosts index metadata only when the state holds another object (no write per event)."""
    spec = """
flow: f
metadata: {stage: string}
steps:
  - {id: a, set_metadata: {stage: one}}
  - {id: w, await_signal: {signal: go}}
  - {id: b, set_metadata: {stage: one}}
  - {id: w2, await_signal: {signal: go}}
"""
    flow = flowcore.parse_flow(spec)
    d = flowcore.start(flow, None, "r")
    first = d.state.metadata
    assert first == {"stage": "one"}
    d = flowcore.advance(d.state, flowcore.SignalReceived(signal="go", at_ms=1))
    assert d.state.metadata is first


def test_snapshots_and_replay_keep_the_metadata() -> None:
    flow = flowcore.parse_flow(ORDERS)
    t = simulate(
        flow,
        {"order": "A"},
        tools={"quote": lambda call: {"total": 99.5}},
        metadata={"customer": "acme"},
    )
    assert t.status == "completed"
    assert t.metadata == {"customer": "acme", "amount": 99.5, "urgent": False}
    assert t.log[0].data["metadata"] == {"customer": "acme"}  # run.started records it
    report = flowcore.replay(list(t.log), flow)
    assert report.ok and report.state is not None
    assert report.state.metadata == t.metadata
    again = flowcore.decode_state(flowcore.encode_state(t.state), flow)
    assert again.metadata == t.metadata


def test_a_log_without_start_metadata_records_none() -> None:
    """run.started holds metadata only when some was given: other logs stay as they were."""
    flow = flowcore.parse_flow(ORDERS)
    t = simulate(flow, {"order": "A"}, tools={"quote": lambda call: {"total": 1}})
    assert "metadata" not in t.log[0].data


def test_replay_against_a_spec_that_refuses_the_recorded_metadata_diverges() -> None:
    flow = flowcore.parse_flow(ORDERS)
    t = simulate(
        flow, {"order": "A"}, tools={"quote": lambda c: {"total": 1}}, metadata={"tier": 3}
    )
    newer = flowcore.parse_flow(ORDERS.replace("tier: integer", "tier: string"))
    report = flowcore.replay(list(t.log), newer, raise_on_divergence=False)
    assert report.divergence is not None and report.divergence.index == 0
    assert report.divergence.expected == {"metadata": {"tier": 3}}
    assert "the flow does not accept the recorded metadata" in str(report.divergence)


# --- filters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "op", "value"),
    [
        ("customer=acme", "customer", "=", "acme"),
        (" amount > 100 ", "amount", ">", "100"),
        ("amount>=1.5e2", "amount", ">=", "1.5e2"),
        ("urgent!=true", "urgent", "!=", "true"),
        ("note=a=b", "note", "=", "a=b"),
        ("note=", "note", "=", ""),
    ],
)
def test_filters_parse(text: str, field: str, op: str, value: str) -> None:
    f = flowcore.parse_metadata_filter(text)
    assert (f.field, f.op, f.text) == (field, op, value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("customer", "is not field=value"),
        ("9x=1", "is not field=value"),
        ("amount>lots", "> compares numbers, and 'lots' is not one"),
        ("amount<", "< compares numbers"),
        ("amount<=nan", "is not one"),
        ("=x", "is not field=value"),
    ],
)
def test_bad_filters_are_typed_errors(text: str, message: str) -> None:
    with pytest.raises(MetadataFilterError, match=message):
        flowcore.parse_metadata_filter(text)


def test_filters_match_by_the_declared_type() -> None:
    f = flowcore.parse_metadata_filter
    assert f("amount>100").matches("number", 140.5)
    assert not f("amount>100").matches("number", 100)
    assert f("amount<=100").matches("integer", 100)
    assert f("tier=2").matches("integer", 2) and f("tier=2.0").matches("number", 2)
    assert not f("tier=2").matches("string", 2)  # a string field compares as text
    assert f("code=007").matches("string", "007") and not f("code=007").matches("integer", 8)
    assert f("urgent=true").matches("boolean", True)
    assert not f("tier=1").matches("integer", True)
    assert f("customer!=acme").matches("string", "zeta")
    assert not f("customer!=acme").matches("string", None)  # no field, no match
    assert not f("customer>1").matches("string", "9")


def test_filters_from_a_mapping_or_texts() -> None:
    got = flowcore.metadata_filters({"customer": "acme", "urgent": False, "tier": 2})
    assert [str(g) for g in got] == ["customer=acme", "urgent=false", "tier=2"]
    assert flowcore.metadata_filters(None) == []
    assert [str(g) for g in flowcore.metadata_filters("amount>1")] == ["amount>1"]
    with pytest.raises(MetadataFilterError, match="string, number or boolean"):
        flowcore.metadata_filters({"customer": ["a"]})


def test_values_from_text_read_each_declared_type() -> None:
    from flowcore.language.metadata import values_from_text

    declared: Any = flowcore.parse_flow(ORDERS).metadata
    values, problems = values_from_text(
        declared, ["customer=acme", "amount=12.5", "urgent=false", "tier=3"]
    )
    assert values == {"customer": "acme", "amount": 12.5, "urgent": False, "tier": 3}
    assert problems == []
    values, problems = values_from_text(declared, ["tier=3.5", "urgent=yes", "nope=1", "x"])
    assert values == {}
    assert problems == [
        "metadata field 'tier' (integer) must be an integer, got the string '3.5'",
        "metadata field 'urgent' (boolean) must be true or false, got the string 'yes'",
        "metadata field 'nope' is not declared (the flow declares: customer, amount, urgent, tier)",
        "metadata 'x' is not field=value",
    ]


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["string", "integer", "number", "boolean"]),
    value=st.one_of(
        st.text(max_size=5),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
    ),
    op=st.sampled_from(["=", "!="]),
)
def test_equality_filters_on_a_value_written_as_text_match_it(
    kind: str, value: Any, op: str
) -> None:
    """What a value prints as (``meta_text``, ``--meta``) finds it again, on every type."""
    from flowcore.language.metadata import value_problem

    if value_problem(kind, value) is not None:  # type: ignore[arg-type]
        return
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if "\n" in text or text != text.strip():
        return  # a filter's value is stripped
    f = flowcore.MetadataFilter("x", op, text)  # type: ignore[arg-type]
    assert f.matches(kind, value) == (op == "=")  # type: ignore[arg-type]


def test_the_diagram_shows_a_set_metadata_step() -> None:
    from flowcore.diagram import build_graph, to_mermaid

    text = to_mermaid(build_graph(flowcore.parse_flow(ORDERS)))
    assert "set_metadata amount, urgent, tier" in text
