"""What crosses between the workflow, its activities and the client comes back as it left."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picoflow.approvals import Approval, Approvers
from picoflow.context import Caller
from picoflow.events import PatternFired, SessionMigrated
from picoflow.exceptions import ModelMisbehaved, SessionConflict, StoreUnavailable, SubStepFailed, ToolFailure
from picoflow.messages import Message, ModelRequest, ModelResponse, OutputSchema, ToolCall, ToolDefinition
from picoflow.outcomes import Direct, Go, Stay, direct_to, go, repair, stay
from picoflow.outcomes import direct as direct_outcome
from picoflow.results import TurnError, TurnResult
from picoflow.session import MigrationChange, SessionMigration
from picoflow.temporal import _codec as codec
from picoflow.usage import Usage

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
calls = st.builds(ToolCall, texts, st.dictionaries(texts, json_values, max_size=3) | texts, texts)


@given(texts, st.lists(calls, max_size=3), st.integers(0, 10**6))
def test_a_model_response_comes_back_whole(text: str, tool_calls: list[ToolCall], tokens: int) -> None:
    response = ModelResponse(
        text,
        tool_calls,
        Usage(input_tokens=tokens, model_calls=1),
        "stop",
        "m",
        [{"k": 1}],
        answered_by="x:y",
    )
    assert codec.decode_response(codec.encode_response(response)) == response


@given(texts, st.lists(st.tuples(texts, st.binary(max_size=16)), max_size=3))
def test_a_model_request_comes_back_whole_with_its_files(system: str, files: list[tuple[str, bytes]]) -> None:
    request = ModelRequest(
        system,
        [Message.user("hi"), Message.assistant("", [ToolCall("t", {"a": [1, {"b": None}]}, "c1")])],
        [ToolDefinition("t", "does t", {"type": "object"}, strict=True)],
        OutputSchema("answer", {"type": "object"}, "the answer"),
        {"temperature": 0.2},
        "Desk",
        "sid",
        dict(files),
    )
    call = codec.ModelCallIn(flow="f", step="Desk", request=request)
    assert codec.ModelCallIn.model_validate_json(call.model_dump_json()).request == request


def test_every_outcome_comes_back_with_its_target_as_a_step_name() -> None:
    class Archive:
        name = "Archive"

    outcomes = [
        go(Archive).with_state(a=1, b=[1, 2]).with_message("m").with_tool_feedback("fb"),
        stay("more please").with_prompt("p"),
        direct_outcome({"x": 1}).remember_as("a note"),
        direct_to("Archive", "done").with_content_type("text/markdown"),
    ]
    back = [codec.decode_outcome(codec.encode_outcome(o)) for o in outcomes]
    assert back[0] == Go(target="Archive", state={"a": 1, "b": [1, 2]}, message="m", feedback="fb")
    assert back[1] == outcomes[1] and isinstance(back[1], Stay)
    assert back[2] == outcomes[2] and isinstance(back[2], Direct)
    assert back[3] == outcomes[3]


def test_a_repair_and_its_event_come_back_whole() -> None:
    fired = repair("clarify", detail="which order", options=("#40004", "#40006")).with_state(tries=1)
    assert codec.decode_outcome(codec.encode_outcome(fired)) == fired
    event = PatternFired("Desk", "cancel", "confirmed")
    assert codec.decode_event(codec.encode_event(event)) == event
    assert codec.decode_event(codec.encode_event(PatternFired("Desk", "repeat"))) == PatternFired(
        "Desk", "repeat"
    )


def test_a_migration_event_comes_back_whole() -> None:
    changes = (
        MigrationChange("renamed", "Review", "from Compare"),
        MigrationChange("approval_withdrawn", "Book", "book", "apr_1"),
    )
    event = SessionMigrated(SessionMigration("v1", "v2", 4, 1_000.0, changes))
    assert codec.decode_event(codec.encode_event(event)) == event


def test_errors_come_back_of_their_class() -> None:
    conflict = codec.decode_error(codec.encode_error(SessionConflict("moved on", step="Desk")))
    assert type(conflict) is SessionConflict and str(conflict) == "moved on" and conflict.step == "Desk"
    outage = codec.decode_error(codec.encode_error(StoreUnavailable("down", retry_after=3.0)))
    assert type(outage) is StoreUnavailable and outage.retry_after == 3.0
    inner = ModelMisbehaved("garbled")
    sub = codec.decode_error(codec.encode_error(SubStepFailed("Quote failed: garbled", cause=inner)))
    assert type(sub) is ModelMisbehaved and str(sub) == "Quote failed: garbled"
    assert (
        type(codec.decode_error(codec.EncodedError(error_class="Nonsense", message="x"))).__name__
        == "RunError"
    )
    assert codec.error_class("ToolFailure") is ToolFailure


def test_turn_results_come_back_whole() -> None:
    ok = TurnResult("hi", "sid", False, "text/plain", "Desk", Usage(model_calls=2), None, ("w",), "refunds")
    assert codec.decode_result(codec.encode_result(ok)) == ok
    error = TurnError(SessionConflict, "Someone else changed it.", None, "sid", None)
    failed = TurnResult("Someone else changed it.", "sid", False, error=error, flow="refunds")
    assert codec.decode_result(codec.encode_result(failed)) == failed


def test_a_pending_result_comes_back_with_its_approvals() -> None:
    approval = Approval(
        "apr_0123456789abcdef01234567",
        "pay",
        {"order": "A1", "lines": [{"sku": "x", "n": 2}]},
        "Pay A1",
        Approvers(principal=False, roles=("staff", "finance")),
        1_000_600.5,
        step="Desk",
        call_id="c1",
        args_sha256="a" * 64,
        tool_sha256="b" * 64,
        flow_version="v1",
        created_at=1_000_000.5,
    )
    decided = dataclasses.replace(approval, status="denied", decided_by="sup-9", decided_at=1.5, reason="no")
    pending = TurnResult(
        "Waiting for approval: Pay A1", "sid", False, step="Desk", flow="refunds", pending=(approval, decided)
    )
    assert codec.decode_result(codec.encode_result(pending)) == pending


def test_a_decision_is_checked_when_read_and_named_by_what_it_decides() -> None:
    fields = codec.caller_fields(Caller(principal="cust-1", visibilities=frozenset({"b", "a"})))
    decision = codec.DecisionInput(
        session_id="s1", approval_id="apr_" + "0" * 24, decision="approve", reason=None, at=5.0, **fields
    )
    again = codec.DecisionInput.model_validate_json(decision.model_dump_json())
    assert again == decision and again.caller().visibilities == frozenset({"a", "b"})
    # A client's retry (a new time, listening or not) is the same decision; anything else is not.
    assert decision.model_copy(update={"at": 9.0, "events": True}).digest() == decision.digest()
    for change in (
        {"decision": "deny"},
        {"reason": "checked"},
        {"principal": "sup-9"},
        {"visibilities": ["staff"]},
        {"revision": 3},
        {"approval_id": "apr_" + "1" * 24},
    ):
        assert decision.model_copy(update=change).digest() != decision.digest(), change
    good = decision.model_dump()
    for bad in (
        {"decision": "maybe"},
        {"approval_id": "apr_x"},
        {"session_id": "a/b"},
        {"at": float("nan")},
        {"revision": -1},
        {"extra": 1},
    ):
        with pytest.raises(ValueError):
            codec.DecisionInput.model_validate({**good, **bad})


async def test_a_save_retried_after_its_answer_was_lost_recognises_its_own_write() -> None:
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from picoflow import FlowEngine
    from picoflow.models import ScriptedModel
    from picoflow.session import Session, session_to_json
    from picoflow.temporal._activities import TurnActivities

    engine = FlowEngine(model=ScriptedModel([]))
    activities = TurnActivities(engine)
    first, retry = ActivityEnvironment(), ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2)
    session = Session(id="s1", flow="f", current_step="A", turns=1, next_seq=1)
    appended = [("A", Message.user("hi").stamped(step="A", seq=0))]
    payload = codec.SaveIn(
        session=session_to_json(session).decode(), expected_revision=None, appended=appended
    )
    assert await first.run(activities.save, payload.model_dump_json()) == 1
    # The retry: the same write, stored.
    assert await retry.run(activities.save, payload.model_dump_json()) == 1
    # A first attempt has no earlier write of its own: its conflict is another's, even when alike.
    with pytest.raises(ApplicationError) as raised:
        await first.run(activities.save, payload.model_dump_json())
    assert "SessionConflict" in str(raised.value.details[0])
    other = Session(id="s1", flow="f", current_step="A", turns=1, next_seq=1, updated_at=0.0)
    another = codec.SaveIn(session=session_to_json(other).decode(), expected_revision=None)
    with pytest.raises(ApplicationError) as raised:  # another turn's write is a conflict, as always
        await retry.run(activities.save, another.model_dump_json())
    assert raised.value.type == "picoflow" and raised.value.non_retryable
    assert "SessionConflict" in str(raised.value.details[0])
    [message] = await engine.store.transcript("s1")
    assert message.content == "hi"


async def test_a_retried_claim_is_told_from_another_decisions_claim() -> None:
    """Claims append nothing and keep the time: only the audit trail tells two apart."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from picoflow import FlowEngine
    from picoflow.models import ScriptedModel
    from picoflow.session import Session, session_from_json, session_to_json
    from picoflow.temporal._activities import TurnActivities

    engine = FlowEngine(model=ScriptedModel([]))
    activities = TurnActivities(engine)
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2)
    approval = Approval("apr_" + "0" * 24, "refund", {"order": "A1"}, "Refund A1", Approvers(), 10.0)
    session = Session(id="s2", flow="f", current_step="A", approvals=(approval,))
    await engine.store.save(session, expected_revision=None)

    def claim(by: str) -> str:
        mine = session_from_json(session_to_json(session))
        mine.approvals = (dataclasses.replace(approval, status="approved", decided_by=by, decided_at=5.0),)
        return codec.SaveIn(session=session_to_json(mine).decode(), expected_revision=1).model_dump_json()

    assert await retry.run(activities.save, claim("cust-1")) == 2
    assert await retry.run(activities.save, claim("cust-1")) == 2  # its own claim, stored
    with pytest.raises(ApplicationError) as raised:  # another decision's claim came first
        await retry.run(activities.save, claim("sup-9"))
    assert "SessionConflict" in str(raised.value.details[0])
