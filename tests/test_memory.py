"""Memory namespaces, erasing and compaction that never splits a tool call from its results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from picoflow import Compaction, Flow, FlowEngine, Message, Step, go, tool
from picoflow.memory import compact, safe_cut
from picoflow.models import ScriptedModel, ToolCall
from picoflow.session import Namespace
from picoflow.testing import request_lines


def msg(role: str, seq: int, content: str = "", calls: int = 0) -> Message:
    tool_calls = tuple(ToolCall("t", {}, f"c{seq}_{i}") for i in range(calls))
    return Message(role, content or f"{role}{seq}", tool_calls, seq=seq)  # type: ignore[arg-type]


def test_safe_cut_moves_back_over_tool_results() -> None:
    messages = [
        msg("user", 0),
        msg("assistant", 1, calls=2),
        msg("tool", 2),
        msg("tool", 3),
        msg("assistant", 4),
    ]
    assert safe_cut(messages, keep_recent=2) == 1  # would start at a tool result: keep the call too
    assert safe_cut(messages, keep_recent=1) == 4
    assert safe_cut(messages, keep_recent=10) == 0


async def test_compaction_folds_old_messages_into_a_summary() -> None:
    seen: list[tuple[list[str], str | None]] = []

    def summarize(evicted: Sequence[Message], previous: str | None) -> str:
        seen.append(([m.content for m in evicted], previous))
        return f"{previous or ''}+{len(evicted)}"

    messages = [
        msg("user", 0),
        msg("assistant", 1, calls=1),
        msg("tool", 2),
        msg("assistant", 3),
        msg("user", 4),
    ]
    namespace = Namespace(messages=list(messages), start=0, summary="old")
    changed = await compact(namespace, Compaction(summarize=summarize, trigger=4, keep_recent=3))
    assert changed
    assert [m.seq for m in namespace.messages] == [1, 2, 3, 4]
    assert namespace.start == 1 and namespace.summary == "old+1"
    assert seen == [(["user0"], "old")]
    assert not await compact(namespace, Compaction(summarize=summarize, trigger=4, keep_recent=3))


class Chatty(Step):
    """Chat."""

    memory = "chat"
    compaction = Compaction(
        summarize=lambda evicted, previous: f"{len(evicted)} earlier messages", trigger=4, keep_recent=2
    )


class ChatFlow(Flow):
    name = "chat"
    steps = [Chatty]


async def test_compaction_runs_at_end_of_turn_and_feeds_the_prompt() -> None:
    model = ScriptedModel(["a1", "a2", "a3"])
    engine = FlowEngine([ChatFlow], model=model)
    first = await engine.run("chat", "u1")
    sid = first.session_id or ""
    await engine.run("chat", "u2", sid)
    await engine.run("chat", "u3", sid)
    session = await engine.store.load(sid)
    assert session is not None
    ns = session.memory["chat"]
    # After turn 2 (4 messages) nothing happened; after turn 3 (6 > 4) all but 2 were folded.
    assert [m.content for m in ns.messages] == ["u3", "a3"] and ns.summary == "4 earlier messages"
    assert ns.start == ns.messages[0].seq
    assert [m.content for m in await engine.store.transcript(sid)] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    model.extend(["a4"])
    await engine.run("chat", "u4", sid)
    assert request_lines(model.requests[-1]) == [
        "system: Chat.\n\n## Summary of the earlier conversation\n4 earlier messages",
        "user: u3",
        "assistant: a3",
        "user: u4",
    ]


class Lister(Step):
    """List."""

    @tool
    def pick(self, item: int) -> Any:
        """Pick an item."""
        return go(Picked).with_state(item=item)


class Picked(Step):
    """Picked."""

    def on_enter(self) -> None:
        self.erase_memory()

    @tool
    def back(self) -> Any:
        """Back to the list."""
        return go(Lister)


class EraseFlow(Flow):
    name = "erase"
    steps = [Lister, Picked]


async def test_erase_on_enter_starts_the_namespace_clean_but_keeps_the_transcript() -> None:
    model = ScriptedModel(
        [
            ToolCall("pick", {"item": 1}),
            "You picked 1.",
            ToolCall("back"),
            "Back.",
            ToolCall("pick", {"item": 2}),
            "You picked 2.",
        ]
    )
    engine = FlowEngine([EraseFlow], model=model)
    first = await engine.run("erase", "pick 1")
    sid = first.session_id or ""
    await engine.run("erase", "back", sid)
    await engine.run("erase", "pick 2", sid)
    assert request_lines(model.requests[-1]) == ["system: Picked.", "user [crossing]: Continue."]
    session = await engine.store.load(sid)
    assert session is not None
    assert [m.content for m in session.memory["Picked"].messages] == ["Continue.", "You picked 2."]
    assert session.sequence == ["Lister", "Picked", "Lister", "Picked"]
    assert len(await engine.store.transcript(sid)) == 15


class SharedA(Step):
    """A."""

    memory = "shared"

    @tool
    def hop(self) -> Any:
        """Hop."""
        return go(SharedB)


class SharedB(Step):
    """B."""

    memory = "shared"

    def on_enter(self) -> None:
        self.erase_memory()


class SharedFlow(Flow):
    name = "shared"
    steps = [SharedA, SharedB]


async def test_erasing_a_shared_namespace_mid_dispatch_never_orphans_tool_results() -> None:
    model = ScriptedModel([ToolCall("hop"), "In B."])
    engine = FlowEngine([SharedFlow], model=model)
    result = await engine.run("shared", "hop")
    assert result.ok
    assert request_lines(model.requests[1]) == ["system: B.", "user [crossing]: Continue."]
    session = await engine.store.load(result.session_id or "")
    assert session is not None
    assert [m.role for m in session.memory["shared"].messages] == ["user", "assistant"]
    assert session.memory["shared"].start == session.memory["shared"].messages[0].seq
