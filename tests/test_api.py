"""The public surface is pinned: adding or removing a name is a decision."""

from __future__ import annotations

import flowcore

EXPECTED = {
    "DEFAULT_STEP_BUDGET",
    "MAX_DEPTH",
    "MAX_EVENT_BYTES",
    "MAX_NAME_CHARS",
    "UnknownRecordType",
    "UNENCODABLE_OUTPUT",
    "result_event",
    "DataError",
    "check_data",
    "check_event",
    # JSON text a person or client hands over (the command, serve, decide --stdio)
    "JsonTextError",
    "decode_json_text",
    # a start budget as the log and the wire write it, both ways
    "budget_from_wire",
    "budget_to_wire",
    # the bytes a spec's hash is of (decide --stdio's self-contained state)
    "canonical_spec",
    # a flow's worst-case spend, from the spec alone (flowcore budget)
    "budget_bound",
    "BudgetBound",
    "Spend",
    "StepBound",
    # what each step handed a budget gets of it (flowcore budget's shares)
    "budget_shares",
    "StepShare",
    "Shortfall",
    "Unbounded",
    "AskHuman",
    "AwaitSignal",
    "Budget",
    "BudgetRemaining",
    "CallTool",
    "CancelRequested",
    "CarriedCall",
    "CarriedSignal",
    "ContinueAsNew",
    "continue_run",
    "Decision",
    "Effect",
    "EffectFailed",
    "EffectOutcomeUnknown",
    "EffectSucceeded",
    "ErrorInfo",
    "Event",
    "EventRejected",
    "RunIdError",
    "RESERVED_RUN_ID_CHARS",
    "check_run_id",
    "Flow",
    "FlowcoreError",
    "Fork",
    "ForkError",
    "ForkedFrom",
    "HumanAnswered",
    "InputError",
    "Plan",
    "plan",
    "OpenWork",
    "Question",
    "Scheduled",
    "ScheduledAddRequested",
    "ScheduledAnswer",
    "ScheduledCall",
    "ScheduledCancelRequested",
    "ScheduledReplayRequested",
    "ScheduledRunNowRequested",
    "scheduled_calls",
    "source_key",
    "SignalWait",
    "Timer",
    "Waits",
    "waiting_for",
    "query",
    "update_of",
    "updates_of",
    "validate_update",
    "update_reply_from_wire",
    "update_reply_to_wire",
    "WorkPlace",
    "work_place",
    "UsageFigures",
    "usage_figures",
    "KeyInfo",
    "KeyRole",
    "parse_key",
    "LogCorrupt",
    "LogRead",
    "MetadataError",
    "MetadataFilter",
    "MetadataFilterError",
    "metadata_filters",
    "parse_metadata_filter",
    "Record",
    "Recorder",
    "TornTail",
    "TrajectoryEntry",
    "decode_log",
    "encode_record",
    "encode_records",
    "iter_records",
    "Problem",
    "ReplayDivergence",
    "ReplayError",
    "ReplayReport",
    "ReportEntry",
    "RunAgent",
    "RunSubflow",
    "RunTeam",
    "SEMANTICS",
    "Settled",
    "SignalReceived",
    "SignalRun",
    "SnapshotMismatch",
    "SpecError",
    "Sleep",
    "State",
    "SubflowSettled",
    "TimerFired",
    "Usage",
    "QueryDecl",
    "QueryError",
    "UpdateDecl",
    "UpdateRefused",
    "UpdateReply",
    "UpdateRequested",
    "UpdateView",
    "WireError",
    "advance",
    "decode_effect",
    "decode_event",
    "decode_state",
    "effect_from_wire",
    "effect_to_wire",
    "encode_effect",
    "encode_event",
    "encode_state",
    "event_from_wire",
    "event_to_wire",
    "fork",
    "fork_point",
    "parse_flow",
    "replay",
    "start",
    # moving a running run to another version of its flow once its log replays
    "upgrade",
    "Upgrade",
    "UpgradeRefused",
    # what the hosts and the command read without a private module
    "flow_references",
    "FlowReferences",
    "spec_warnings",
    "SpecWarning",
    "parse_duration",
    "DurationError",
    "MAX_DURATION_MS",
    "MAX_BUDGET_AMOUNT",
    "metadata_from_text",
}


def test_public_names_are_pinned() -> None:
    assert set(flowcore.__all__) == EXPECTED
    assert len(flowcore.__all__) == len(set(flowcore.__all__))


def test_every_public_name_exists() -> None:
    for name in flowcore.__all__:
        assert hasattr(flowcore, name), name


def test_errors_share_one_base() -> None:
    for cls in (
        flowcore.SpecError,
        flowcore.EventRejected,
        flowcore.ReplayDivergence,
        flowcore.WireError,
        flowcore.SnapshotMismatch,
        flowcore.InputError,
        flowcore.RunIdError,
    ):
        assert issubclass(cls, flowcore.FlowcoreError)


def test_incremental_persistence_is_opt_in() -> None:
    # The helpers for hosts that store runs as rows live in flowcore.persist,
    # not at the top level.
    import flowcore.persist

    for name in ("encode_hot", "state_changes", "restore_state", "advance", "StateChanges"):
        assert hasattr(flowcore.persist, name), name
        assert name not in flowcore.__all__ or name == "advance", name


def test_what_the_hosts_read_is_the_cores_own() -> None:
    # The public names are the core's values, not copies that could drift.
    from flowcore.language import lint as _lint
    from flowcore.language import metadata as _metadata
    from flowcore.language import spec as _spec
    from flowcore.language import times as _time

    assert flowcore.MAX_BUDGET_AMOUNT == _spec.MAX_AMOUNT == 10**15
    assert flowcore.MAX_DURATION_MS == _spec.MAX_MS == _time.MAX_DURATION_MS
    assert flowcore.parse_duration is _time.parse_duration
    assert flowcore.DurationError is _time.DurationError
    assert flowcore.metadata_from_text is _metadata.values_from_text
    assert flowcore.spec_warnings is _lint.spec_warnings
    assert flowcore.parse_duration("2h30m") == 9_000_000
    assert flowcore.metadata_from_text({"n": "integer"}, ["n=3", "m=1"]) == (
        {"n": 3},
        ["metadata field 'm' is not declared (the flow declares: n)"],
    )
