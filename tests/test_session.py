"""The session document's values: copies and ids."""

from __future__ import annotations

import dataclasses
import uuid

from picoflow.approvals import Approval, Approvers, PausedResponse
from picoflow.handoffs import HandoffTicket
from picoflow.messages import Message, ToolCall
from picoflow.session import (
    LogRecord,
    MigrationChange,
    Namespace,
    Session,
    SessionMigration,
    new_session_id,
    session_from_json,
    session_to_json,
)
from picoflow.usage import Usage


def full_session() -> Session:
    """A session whose every field differs from its default."""
    return Session(
        id="s-1",
        flow="f",
        current_step="b",
        revision=3,
        status="completed",
        states={"a": {"n": [1, {"k": "v"}]}, "b": {}},
        memory={"a": Namespace([Message.user("hi")], 2, "earlier")},
        sequence=["a", "b"],
        usage=Usage(input_tokens=5, model_calls=1),
        warnings=[LogRecord("w", "careful", at=1.5)],
        principal="p",
        prompts={"b": "override"},
        models={"a": "scripted:test"},
        turns=4,
        next_seq=9,
        created_at=1.0,
        updated_at=2.0,
        version=7,
        metadata={"tags": ["x"]},
        files_sent=2,
        approvals=(
            Approval(
                "apr_1",
                "refund",
                {"order_id": 1, "amount": 2.5},
                "Refund $2.50",
                Approvers(roles=("staff",)),
                9.0,
                step="b",
                call_id="c1",
                status="approved",
                decided_by="sup",
                decided_at=3.0,
                reason="checked",
            ),
        ),
        paused=PausedResponse("b", (ToolCall("refund", {"order_id": 1}, "c1"),), ("apr_1",), ("staff",), 4.0),
        handoff=HandoffTicket("a", "b", "damaged item", "flow f, step a", 5.0, taken_by="sam", taken_at=6.0),
        interrupted=["a"],
        flow_version="v2",
        migrations=(
            SessionMigration(
                "v1",
                "v2",
                3,
                7.0,
                (MigrationChange("renamed", "b", "from c"), MigrationChange("fell_back", "b")),
            ),
        ),
    )


def test_a_copy_equals_its_session_field_by_field() -> None:
    session = full_session()
    defaults = Session(id="s-1", flow="f", current_step="b")
    changed = {
        f.name for f in dataclasses.fields(Session) if getattr(session, f.name) != getattr(defaults, f.name)
    }
    assert changed == {f.name for f in dataclasses.fields(Session)} - {"id", "flow", "current_step"}
    assert session.copy() == session


def test_a_session_with_approvals_comes_back_from_json_the_same() -> None:
    session = full_session()
    assert session_from_json(session_to_json(session)) == session


def test_changing_a_copy_never_changes_the_session() -> None:
    session = full_session()
    copy = session.copy()
    copy.states["a"]["n"][1]["k"] = "changed"
    copy.states["b"]["new"] = 1
    copy.memory["a"].messages.append(Message.user("more"))
    copy.sequence.append("c")
    copy.usage.input_tokens += 1
    copy.warnings.clear()
    copy.prompts.clear()
    copy.models.clear()
    copy.metadata["tags"].append("y")
    copy.interrupted.append("b")
    assert session == full_session()


def test_new_session_ids_are_random_version_4_uuids() -> None:
    ids = {new_session_id() for _ in range(1000)}
    assert len(ids) == 1000
    for text in list(ids)[:50]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122
