"""The inspector's timeline through the engine: whole timelines of a scripted conversation (a
dropped reading, a step change, a tool error, a rejection by the acceptance gate, an approval),
a failed first turn that looped until the model-call limit, what recording keeps out (secrets,
redacted fields, long texts, bytes past the budget), retention, and that recording off attaches
no observer at all."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import TypeAdapter
from tests.server.handoff_support import CUSTOMER, support_engine

from inspect_flow import (
    ADA,
    AGE,
    ASK_ORDER,
    NAME,
    PROMISE,
    REFUNDED,
    WELCOME,
    InspectFlow,
    LoopFlow,
    looping_model,
    play,
)
from picoflow import Flow, FlowEngine, RunContext, Step, tool
from picoflow._run.observers import NO_OBSERVER, TurnObserver
from picoflow.attachments import Attachment
from picoflow.context import Caller
from picoflow.exceptions import UsageLimitExceeded
from picoflow.messages import ToolCall
from picoflow.models import ScriptedModel
from picoflow.sessions import MemoryStore, SQLiteStore
from picoflow.testing import HeldModel
from picoflow.timeline import (
    ApprovalDecidedEntry,
    ApprovalRequestedEntry,
    Entered,
    Erased,
    FieldDropped,
    FieldSet,
    HandoffEntry,
    Left,
    ModelEntry,
    Omitted,
    Rejected,
    SessionTimeline,
    StateEntry,
    TimelineEntry,
    TimelineSettings,
    TimelineUpdate,
    ToolEntry,
    TurnRecorded,
    TurnTimeline,
    timeline_schema,
)

TimelineEntryAdapter: TypeAdapter[Any] = TypeAdapter(TimelineEntry)
GUEST_PROMPT_START = "Learn who the guest is.\n\nRead only the user's latest message."


def lines(turn: TurnTimeline) -> list[str]:
    """Every entry of a turn as one line holding all it says but its times, ids and prompts."""
    shown: list[str] = []
    for entry in turn.entries:
        if isinstance(entry, Entered):
            shown.append(f"entered {entry.step} from {entry.from_}")
        elif isinstance(entry, Left):
            shown.append(f"left {entry.step} to {entry.to}")
        elif isinstance(entry, ModelEntry):
            sent = " | ".join(
                f"{m.role}{f' [{m.kind}]' if m.kind else ''}: {m.content}"
                + "".join(f" →{c.name}({json.dumps(c.args)})" for c in m.tool_calls)
                for m in entry.messages
            )
            answer = entry.text or " ".join(f"{c.name}({json.dumps(c.args)})" for c in entry.tool_calls)
            system = "same" if entry.system is None else "new"
            shown.append(
                f"model {entry.step} #{entry.attempt} system {system}, after {entry.history}: {sent} "
                f"=> {answer}"
            )
        elif isinstance(entry, Rejected):
            shown.append(f"rejected by {entry.check}: {entry.reason}")
        elif isinstance(entry, FieldSet | FieldDropped):
            evidence = (entry.evidence or {}).get("text")
            shown.append(f"{entry.kind} {entry.field}={json.dumps(entry.value)} {entry.rule} “{evidence}”")
        elif isinstance(entry, ToolEntry):
            shown.append(f"tool {entry.name}({json.dumps(entry.args)}) ok={entry.ok}: {entry.result}")
        elif isinstance(entry, ApprovalRequestedEntry):
            shown.append(f"approval asked {entry.tool}({json.dumps(entry.args)})")
        elif isinstance(entry, ApprovalDecidedEntry):
            shown.append(f"approval {entry.decision} by {entry.by} {entry.tool}({json.dumps(entry.args)})")
        elif isinstance(entry, Erased):
            shown.append(f"erased {entry.namespace}")
        elif isinstance(entry, StateEntry):
            changes = ", ".join(
                f"{c.key}: {json.dumps(c.before) if not c.added else '-'} → "
                f"{json.dumps(c.after) if not c.removed else '-'}"
                for c in entry.changes
            )
            shown.append(f"state {entry.step}: {changes}")
        elif isinstance(entry, Omitted):
            shown.append(f"omitted {entry.entries}")
        else:
            shown.append(f"{entry.kind}")
    return shown


def heading(turn: TurnTimeline) -> tuple[Any, ...]:
    usage = turn.usage
    error = None if turn.error is None else (turn.error.kind, turn.error.message, turn.error.step)
    return (turn.turn, turn.trigger, turn.message, turn.outcome, turn.reply, turn.step, error,
            (usage.model_calls, usage.tool_calls))  # fmt: skip


async def recorded_conversation(store: Any = None) -> tuple[FlowEngine, str]:
    model = ScriptedModel([])
    engine = FlowEngine([InspectFlow], model=model, store=store, timeline=TimelineSettings())
    return engine, await play(engine, model)


async def test_a_conversation_is_recorded_turn_by_turn() -> None:
    engine, session_id = await recorded_conversation()
    timeline = await engine.timeline(session_id, principal="ada")
    assert timeline is not None and timeline.flow == "inspect" and timeline.session_id == session_id
    turns = timeline.turns
    assert [heading(turn) for turn in turns] == [
        (1, "message", "Hi", "replied", NAME, "Interview", None, (1, 0)),
        (2, "message", "Ada", "replied", AGE, "Interview", None, (1, 0)),
        (3, "message", "30", "replied", WELCOME, "Desk", None, (1, 0)),
        (4, "message", "Refund order 7", "replied", ASK_ORDER, "Desk", None, (3, 1)),
        (5, "message", "Order 8, twenty dollars", "paused", turns[4].reply, "Desk", None, (1, 0)),
        (6, "decision", f"approve {turns[4].entries[-1].approval}", "replied", REFUNDED, "Desk",  # type: ignore[union-attr]
         None, (1, 1)),
    ]  # fmt: skip
    assert turns[4].reply.startswith("Waiting for approval: refund(order_id=8, amount=20.0)")
    assert [lines(turn) for turn in turns] == [
        [
            "entered Interview from None",
            'model Interview #1 system new, after 0: user: Hi => {"found": []}',
            "erased Interview",
            'state Interview: form: - → {"known": {}, "declined": [], "asking": "name", "introduced": true}',
        ],
        [
            "model Interview #1 system new, after 0: assistant [direct]: What is your name? | user: Ada "
            '=> {"found": [{"field": "name", "quote": "Ada", "value": "Ada"}, '
            '{"field": "age", "quote": "I\'m 30", "value": 30}]}',
            'field_set name="Ada" None “Ada”',
            "field_dropped age=30 quoted “None”",
            "erased Interview",
            'state Interview: form.asking: "name" → "age", form.known.name: - → "Ada"',
        ],
        [
            "model Interview #1 system new, after 0: assistant [direct]: How old are you? | user: 30 "
            '=> {"found": [{"field": "age", "quote": "30", "value": 30}]}',
            "field_set age=30 None “30”",
            "erased Interview",
            "left Interview to Desk",
            "entered Desk from Interview",
            'state Desk: guest: - → {"name": "Ada", "age": 30}',
            'state Interview: form.asking: "age" → null, form.known.age: - → 30',
        ],
        [
            f"model Desk #1 system new, after 0: assistant [direct]: {WELCOME} | user: Refund order 7 "
            '=> lookup({"order_id": 7})',
            'tool lookup({"order_id": 7}) ok=False: order 7 belongs to another customer',
            'model Desk #1 system same, after 2: assistant:  →lookup({"order_id": 7}) | '
            f"tool: order 7 belongs to another customer => {PROMISE}",
            "rejected by check_response: never promise an outcome",
            f"model Desk #2 system same, after 4: assistant [correction]: {PROMISE} | "
            f"user [correction]: Your response was not accepted: never promise an outcome => {ASK_ORDER}",
        ],
        [
            f"model Desk #1 system new, after 0: assistant [direct]: {WELCOME} | user: Refund order 7 | "
            'assistant:  →lookup({"order_id": 7}) | tool: order 7 belongs to another customer | '
            f"assistant: {ASK_ORDER} | user: Order 8, twenty dollars "
            '=> refund({"order_id": 8, "amount": 20.0})',
            'approval asked refund({"order_id": 8, "amount": 20.0})',
        ],
        [
            'approval approved by ada refund({"order_id": 8, "amount": 20.0})',
            'tool refund({"order_id": 8, "amount": 20.0}) ok=True: refunded $20.00 on order 8',
            f"model Desk #1 system new, after 0: assistant [direct]: {WELCOME} | user: Refund order 7 | "
            'assistant:  →lookup({"order_id": 7}) | tool: order 7 belongs to another customer | '
            f"assistant: {ASK_ORDER} | user: Order 8, twenty dollars | "
            'assistant:  →refund({"order_id": 8, "amount": 20.0}) | tool: refunded $20.00 on order 8 '
            f"=> {REFUNDED}",
            "state Desk: refunded: - → [8, 20.0]",
        ],
    ]
    # A model request as a whole: its prompt, the tools by name, the output schema, the tokens.
    first = turns[0].entries[1]
    assert isinstance(first, ModelEntry)
    assert first.system is not None and first.system.startswith(GUEST_PROMPT_START)
    assert (first.model, first.tools, first.output, first.error) == (
        "scripted:test",
        [],
        "GuestReading",
        None,
    )
    assert first.parsed == {"items": []}  # the accepted structured answer, as the output model read it
    refused = turns[3].entries[2]
    assert isinstance(refused, ModelEntry) and refused.parsed is None and refused.text == PROMISE
    assert first.usage is not None and first.usage.model_calls == 1 and first.usage.input_tokens > 0
    assert first.latency_ms is not None and first.latency_ms >= 0
    desk = turns[3].entries[0]
    assert isinstance(desk, ModelEntry)
    assert (desk.system, desk.tools, desk.output) == ("Help with orders. Never promise anything.",
                                                      ["lookup", "refund"], None)  # fmt: skip
    dropped = turns[1].entries[2]
    assert isinstance(dropped, FieldDropped) and dropped.why and dropped.action == "dropped"
    assert all(turn.size > 0 for turn in turns)
    # Every entry says when it happened, in the order the entries come.
    for turn in turns:
        assert all(entry.at_ms is not None for entry in turn.entries)
        times = [entry.at_ms or 0.0 for entry in turn.entries]
        assert times == sorted(times)


async def test_a_first_turn_that_fails_is_kept_with_every_model_call() -> None:
    engine = FlowEngine([LoopFlow], model=looping_model(), timeline=TimelineSettings())
    result = await engine.run("loop", "find it", caller=ADA)
    assert result.error is not None and result.error.is_a(UsageLimitExceeded)
    # The session is kept as it was before the turn, under the id the error was filed with.
    assert result.session_id is not None and result.session_id == result.error.reference
    session = await engine.get_session(result.session_id, principal="ada")
    assert session is not None and session.turns == 0 and session.current_step == "Searcher"
    assert [e.code for e in await engine.session_errors(session.id, principal="ada") or []] == ["usage_limit"]

    timeline = await engine.timeline(session.id, principal="ada")
    assert timeline is not None
    [turn] = timeline.turns
    assert heading(turn) == (1, "message", "find it", "failed", "", "Searcher",
                             ("usage_limit", "turn exceeded its model_calls limit of 4", "Searcher"),
                             (4, 4))  # fmt: skip
    looked = 'tool look({"query": "again"}) ok=True: nothing yet'
    call = 'assistant:  →look({"query": "again"}) | tool: nothing yet => look({"query": "again"})'
    assert lines(turn) == [
        "entered Searcher from None",
        'model Searcher #1 system new, after 0: user: find it => look({"query": "again"})',
        looked,
        f"model Searcher #1 system same, after 1: {call}",
        looked,
        f"model Searcher #1 system same, after 3: {call}",
        looked,
        f"model Searcher #1 system same, after 5: {call}",
        looked,
    ]
    # The retry goes on in the same session; its turn has the same number.
    again = await engine.run("loop", "try again", result.session_id, caller=ADA)
    assert again.error is not None and again.session_id == result.session_id
    retried = await engine.timeline(session.id, principal="ada", turn=1)
    assert retried is not None and [t.message for t in retried.turns] == ["find it", "try again"]


async def test_a_past_session_is_inspected_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"
    engine, session_id = await recorded_conversation(SQLiteStore(path))
    before = await engine.timeline(session_id, principal="ada")
    await engine.aclose()

    later = FlowEngine([InspectFlow], store=SQLiteStore(path))  # not recording: reading still works
    after = await later.timeline(session_id, principal="ada")
    await later.aclose()
    assert after is not None and before is not None
    assert after.model_dump() == before.model_dump()
    assert [turn.turn for turn in after.turns] == [1, 2, 3, 4, 5, 6]


async def test_another_principal_or_an_unknown_session_reads_nothing() -> None:
    engine, session_id = await recorded_conversation()
    assert await engine.timeline(session_id, principal="mallory") is None
    assert await engine.timeline("no-such-session", principal="ada") is None
    only = await engine.timeline(session_id, principal="ada", turn=4)
    assert only is not None and [turn.turn for turn in only.turns] == [4]


CRM_KEY = "crm-secret-7f3a9b"
PROVIDER_KEY = "sk-provider-key-0123456789"


class Vault(Step):
    """Keep the customer's card."""

    @tool
    def store_card(self, card: str, ctx: RunContext[Any]) -> str:
        """Keep a card number."""
        self.state["card"] = card
        self.state["crm"] = ctx.config["crm_key"]
        return f"stored with {ctx.config['crm_key']} under {PROVIDER_KEY}"


class VaultFlow(Flow):
    name = "vault"
    steps = [Vault]


async def test_secrets_and_redacted_fields_never_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    model = ScriptedModel([ToolCall("store_card", {"card": "4111 1111 1111 1111"}), f"Done ({CRM_KEY})."])
    settings = TimelineSettings(redact=lambda field, value: field == "card")
    engine = FlowEngine([VaultFlow], model=model, timeline=settings)
    caller = Caller(principal="ada", config={"crm_key": CRM_KEY, "locale": "en"})
    result = await engine.run("vault", f"my key is {CRM_KEY}, card 4111 1111 1111 1111", caller=caller)
    assert result.ok and result.session_id is not None
    stored = await engine.store.timelines(result.session_id)  # type: ignore[attr-defined]
    text = "".join(stored)
    assert CRM_KEY not in text and PROVIDER_KEY not in text
    assert "4111 1111 1111 1111" in text  # the user's own words are kept: redaction hides fields
    timeline = await engine.timeline(result.session_id, principal="ada")
    assert timeline is not None
    [turn] = timeline.turns
    assert turn.message == "my key is [secret], card 4111 1111 1111 1111"
    assert turn.reply == "Done ([secret])."
    tool_entry = next(e for e in turn.entries if isinstance(e, ToolEntry))
    assert tool_entry.args == {"card": "[redacted]"}
    assert tool_entry.result == "stored with [secret] under [secret]"
    state = next(e for e in turn.entries if isinstance(e, StateEntry))
    assert [(c.key, c.after) for c in state.changes] == [("card", "[redacted]"), ("crm", "[secret]")]


async def test_a_turn_is_bounded_and_long_texts_are_cut_with_a_mark() -> None:
    long_answer = "x" * 500

    class Talker(Step):
        """Talk."""

        @tool
        def read(self) -> str:
            """Read a long document."""
            return "y" * 5_000 + "é" * 50

    class TalkFlow(Flow):
        name = "talk"
        steps = [Talker]

    model = ScriptedModel([ToolCall("read", {})] * 14 + [long_answer])
    settings = TimelineSettings(max_text_chars=100, max_bytes=8_192)
    engine = FlowEngine([TalkFlow], model=model, timeline=settings)
    result = await engine.run("talk", "read it all")
    assert result.ok
    timeline = await engine.timeline(result.session_id or "")
    assert timeline is not None
    [turn] = timeline.turns
    assert turn.reply == "x" * 100 + "… [400 more characters]"
    first_tool = next(e for e in turn.entries if isinstance(e, ToolEntry))
    assert first_tool.result == "y" * 100 + "… [4950 more characters]"
    omitted = [e for e in turn.entries if isinstance(e, Omitted)]
    assert len(omitted) == 1 and omitted[0].entries > 0
    assert isinstance(turn.entries[-1], Omitted)  # the entries past the budget, counted
    assert turn.size <= 8_192
    [stored] = await engine.store.timelines(result.session_id or "")  # type: ignore[attr-defined]
    assert len(stored.encode()) <= 8_192  # the whole document, in bytes
    assert len(json.dumps(turn.model_dump(mode="json"))) < 12_000


async def test_retention_keeps_the_last_turns() -> None:
    model = ScriptedModel([])
    engine = FlowEngine([InspectFlow], model=model, timeline=TimelineSettings(keep_turns=2))
    await play(engine, model)
    [session] = await engine.list_sessions(principal="ada")
    timeline = await engine.timeline(session.id, principal="ada")
    assert timeline is not None and [turn.turn for turn in timeline.turns] == [5, 6]


async def test_recording_off_attaches_no_observer(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[TurnObserver] = []
    engine = FlowEngine([LoopFlow], model=looping_model(), tracing=False)
    take = engine.executor.take

    def spy(turns: Any, request: Any, observer: TurnObserver) -> Any:
        seen.append(observer)
        return take(turns, request, observer)

    monkeypatch.setattr(engine.executor, "take", spy)
    result = await engine.run("loop", "find it")
    assert seen == [NO_OBSERVER]
    timeline = await engine.timeline(result.session_id or "")
    assert timeline is not None and timeline.turns == []
    assert isinstance(engine.store, MemoryStore)


async def test_the_export_validates_against_the_published_schema() -> None:
    engine, session_id = await recorded_conversation()
    timeline = await engine.timeline(session_id, principal="ada")
    assert timeline is not None
    exported = timeline.model_dump(mode="json", by_alias=True, exclude_none=True)
    jsonschema.validate(exported, timeline_schema())
    assert SessionTimeline.model_validate(exported) == timeline
    broken = {**exported, "turns": [{**exported["turns"][0], "outcome": "exploded"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, timeline_schema())


class Helper(Step):
    """Answer in one word."""


class Boss(Step):
    """Delegate."""

    @tool
    async def ask_helper(self, question: str) -> str:
        """Ask the helper."""
        return str(await self.run_step(Helper, question))


class DelegateFlow(Flow):
    name = "delegate"
    steps = [Boss, Helper]


async def test_a_sub_step_run_is_recorded_under_the_call_that_ran_it() -> None:
    model = ScriptedModel([ToolCall("ask_helper", {"question": "colour?"}), "Blue.", "The helper says blue."])
    engine = FlowEngine([DelegateFlow], model=model, timeline=TimelineSettings())
    result = await engine.run("delegate", "Ask the helper")
    assert result.ok
    timeline = await engine.timeline(result.session_id or "")
    assert timeline is not None
    [turn] = timeline.turns
    call = next(e for e in turn.entries if isinstance(e, ToolEntry))
    assert [(e.kind, e.parent, getattr(e, "step", None)) for e in turn.entries] == [
        ("entered", None, "Boss"),
        ("model", None, "Boss"),
        ("tool", None, "Boss"),
        ("entered", call.id, "Helper"),
        ("model", call.id, "Helper"),
        ("model", None, "Boss"),
    ]
    helper = turn.entries[4]
    assert (
        isinstance(helper, ModelEntry) and helper.text == "Blue." and helper.system == "Answer in one word."
    )
    assert call.result == "Blue." and call.ok


async def test_files_appear_as_name_type_and_size() -> None:
    model = ScriptedModel(["Read it."])
    engine = FlowEngine([DelegateFlow], model=model, timeline=TimelineSettings())
    note = Attachment.from_bytes(b"the secret plan" * 10, "text/plain", "plan.txt")
    result = await engine.run("delegate", "Read this", attachments=[note])
    assert result.ok
    stored = "".join(await engine.store.timelines(result.session_id or ""))  # type: ignore[attr-defined]
    assert "the secret plan" not in stored and note.sha256 not in stored
    timeline = await engine.timeline(result.session_id or "")
    assert timeline is not None
    [model_entry] = [e for e in timeline.turns[0].entries if isinstance(e, ModelEntry)]
    [user] = model_entry.messages
    assert [f.model_dump() for f in user.files] == [
        {"name": "plan.txt", "media_type": "text/plain", "size": 150}
    ]


class Signup(Step):
    """Sign the user up."""

    @tool
    def register(self, login: str, password: str) -> str:
        """Register an account."""
        self.state["account"] = {"login": login, "password": password}
        return f"registered {login}"


class SignupFlow(Flow):
    name = "signup"
    steps = [Signup]


async def test_fields_named_as_secrets_are_hidden_without_a_hook() -> None:
    call = ToolCall("register", {"login": "ada", "password": "correct horse"})
    engine = FlowEngine([SignupFlow], model=ScriptedModel([call, "Done."]), timeline=TimelineSettings())
    result = await engine.run("signup", "sign me up as ada")
    assert result.ok
    timeline = await engine.timeline(result.session_id or "")
    assert timeline is not None
    [turn] = timeline.turns
    assert "correct horse" not in json.dumps(turn.model_dump(mode="json"))
    tool_entry = next(e for e in turn.entries if isinstance(e, ToolEntry))
    assert tool_entry.args == {"login": "ada", "password": "[redacted]"}
    [state] = [e for e in turn.entries if isinstance(e, StateEntry)]
    assert [(c.key, c.after) for c in state.changes] == [
        ("account", {"login": "ada", "password": "[redacted]"})
    ]
    usage = next(e for e in turn.entries if isinstance(e, ModelEntry)).usage
    assert usage is not None and usage.input_tokens > 0  # counts of tokens are no secret


async def test_recording_changes_nothing_the_turn_does() -> None:
    async def played(timeline: TimelineSettings | None) -> tuple[Any, ...]:
        model = ScriptedModel([])
        engine = FlowEngine([InspectFlow], model=model, timeline=timeline)
        session_id = await play(engine, model)
        session = await engine.get_session(session_id, principal="ada")
        transcript = await engine.transcript(session_id, principal="ada")
        assert session is not None and transcript is not None
        said = [(m.role, m.kind, m.content, m.step) for m in transcript]
        requests = [(r.system, [(m.role, m.content) for m in r.messages]) for r in model.requests]
        return said, session.states, session.sequence, session.usage, requests

    assert await played(TimelineSettings()) == await played(None)


async def test_a_handoff_is_recorded_with_its_reason() -> None:
    engine = support_engine(MemoryStore(), timeline=TimelineSettings())
    first = await engine.run("support", "about order 40001", caller=CUSTOMER)
    second = await engine.run("support", "I want to talk to a person", first.session_id, caller=CUSTOMER)
    assert second.awaiting_human
    timeline = await engine.timeline(first.session_id or "", principal=CUSTOMER.principal)
    assert timeline is not None
    handoffs = [e for e in timeline.turns[1].entries if isinstance(e, HandoffEntry)]
    assert [(e.step, e.reason) for e in handoffs] == [("Desk", "the customer asked for a person")]
    assert timeline.turns[1].step == "Handoff" and timeline.turns[1].outcome == "replied"


async def test_a_watched_turn_hands_each_entry_over_as_it_is_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    model = ScriptedModel([ToolCall("store_card", {"card": "4111 1111 1111 1111"}), f"Done ({CRM_KEY})."])
    settings = TimelineSettings(redact=lambda field, value: field == "card")
    engine = FlowEngine([VaultFlow], model=model, timeline=settings)
    caller = Caller(principal="ada", config={"crm_key": CRM_KEY})
    updates: list[TimelineUpdate] = []
    result = await engine.run("vault", f"my key is {CRM_KEY}", caller=caller, on_timeline=updates.append)
    assert result.ok and result.session_id is not None
    assert {(update.session_id, update.turn) for update in updates} == {(result.session_id, 1)}

    # Each entry is handed over when recorded and again as it grows, at the same index: the
    # model request when sent, answered and accepted; the tool call when it ran and returned.
    handed = [(update.index, json.loads(update.entry)) for update in updates]
    # Answered: a request with its answer's text, a call with what it returned.
    growing = [
        (index, entry["kind"], "text" in entry or entry.get("ok") is not None) for index, entry in handed
    ]
    assert growing[:6] == [
        (0, "entered", False),
        (1, "model", False),
        (1, "model", True),
        (1, "model", True),
        (2, "tool", False),
        (2, "tool", True),
    ]
    latest: dict[int, Any] = {}
    for index, entry in handed:
        latest[index] = entry
    assert sorted(latest) == list(range(len(latest)))

    # Cleaned as the stored entries are, and the same entries once the turn is stored.
    text = "".join(update.entry for update in updates)
    assert CRM_KEY not in text and PROVIDER_KEY not in text and "4111" not in text
    timeline = await engine.timeline(result.session_id, principal="ada")
    assert timeline is not None
    [turn] = timeline.turns
    shown = [TimelineEntryAdapter.validate_python(latest[index]) for index in sorted(latest)]
    assert shown == turn.entries
    assert isinstance(shown[-1], StateEntry)


async def test_no_entry_is_handed_over_without_recording() -> None:
    model = ScriptedModel(["Hello."])
    engine = FlowEngine([VaultFlow], model=model)
    updates: list[TimelineUpdate] = []
    result = await engine.run("vault", "hi", on_timeline=updates.append)
    assert result.ok and updates == []


async def test_a_followed_session_shows_each_turn_live_whoever_runs_it_then_the_stored_turn() -> None:
    scripted = ScriptedModel(["Hello.", ToolCall("store_card", {"card": "4111 1111 1111 1111"}), "Stored."])
    held = HeldModel(scripted, at=3)  # the second turn's answer after its tool call
    settings = TimelineSettings(redact=lambda field, value: field == "card")
    engine = FlowEngine([VaultFlow], model=held, timeline=settings)
    first = await engine.run("vault", "hi", caller=Caller(principal="ada"))
    assert first.ok and first.session_id is not None
    session_id = first.session_id

    assert await engine.follow_timeline(session_id, principal="bob") is None  # another's
    assert await engine.follow_timeline("00000000-0000-4000-8000-000000000000", principal="ada") is None
    follower = await engine.follow_timeline(session_id, principal="ada")
    assert follower is not None and follower.turn == 1
    watcher = await engine.follow_timeline(session_id, principal="ada")
    assert watcher is not None

    # Someone else runs the next turn (no on_timeline of theirs): its entries reach the followers
    # while it runs, held at its second model request.
    caller = Caller(principal="ada", config={"crm_key": CRM_KEY})
    running = asyncio.create_task(engine.run("vault", "store my card", session_id, caller=caller))
    await held.held.wait()
    so_far: list[tuple[int, str, bool]] = []
    while (update := await follower.next(within=0)) is not None:
        assert isinstance(update, TimelineUpdate) and (update.session_id, update.turn) == (session_id, 2)
        entry = json.loads(update.entry)
        so_far.append((update.index, entry["kind"], "text" in entry or entry.get("ok") is not None))
    assert so_far == [
        (0, "model", False),
        (0, "model", True),
        (0, "model", True),
        (1, "tool", False),
        (1, "tool", True),
        (2, "model", False),  # the held request, sent and not answered
    ]
    watcher.close()
    watcher.close()  # again: nothing

    held.release()
    result = await running
    assert result.ok and result.message == "Stored."
    rest = []
    while not isinstance(update := await follower.next(), TurnRecorded):
        rest.append(update)
    assert update == TurnRecorded(session_id, 2, "replied")
    assert [json.loads(u.entry)["kind"] for u in rest] == ["model", "model", "state"]
    assert "4111" not in "".join(u.entry for u in rest) and CRM_KEY not in "".join(u.entry for u in rest)

    timeline = await engine.timeline(session_id, principal="ada", turn=2)
    assert timeline is not None
    [turn] = timeline.turns
    assert [entry.kind for entry in turn.entries] == ["model", "tool", "model", "state"]

    # Closed: the next turn reaches no one, and costs no live encoding.
    follower.close()
    third = await engine.run("vault", "thanks", session_id, caller=Caller(principal="ada"))
    assert not third.ok  # the script is played out: a failed turn, stored all the same
    assert await follower.next(within=0) is None


async def test_following_needs_an_engine_that_records() -> None:
    engine = FlowEngine([VaultFlow], model=ScriptedModel(["Hello."]))
    result = await engine.run("vault", "hi")
    assert result.session_id is not None
    with pytest.raises(RuntimeError, match="records no timelines"):
        await engine.follow_timeline(result.session_id)
