"""Property-based tests of the runner: whatever the model sends, the invariants hold.

Profiles: ``ci`` (default, derandomized, bounded) and ``long`` for a longer hunt by hand:
``HYPOTHESIS_PROFILE=long pytest tests/test_runner_properties.py``.
"""

from __future__ import annotations

import asyncio
import os
import string
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from picoflow import Flow, FlowEngine, LogicStep, Step, ToolError, UsageLimits, direct, go, stay, tool, tools
from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall
from picoflow.models import FunctionModel
from picoflow.session import session_to_json
from picoflow.sessions import MemoryStore

settings.register_profile(
    "ci",
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("long", max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

MARK = "ZQX"  # invalid submitted values carry this mark; no text sent to the model may contain it
LIMITS = UsageLimits(model_calls=6, tool_calls=5, transitions=8)


class Item(BaseModel):
    name: str = Field(max_length=20)
    qty: int = Field(ge=1, le=9)


class Alpha(Step):
    """Alpha."""

    @tool
    def count(self, n: int = Field(ge=0, le=100)) -> Any:
        """Count."""
        self.state["count"] = self.state.get("count", 0) + n
        return stay(f"counted {n}")

    @tool
    def add_items(self, items: list[Item], note: str | None = Field(None, max_length=30)) -> str:
        """Add items."""
        self.state["items"] = len(items)
        return f"{len(items)} items"

    @tool
    def refuse(self, reason: str = Field(max_length=10)) -> str:
        """Always refused."""
        raise ToolError("refused by policy")

    @tool
    def to_beta(self) -> Any:
        """Go to beta."""
        return go(Beta).with_state(arrived=True)

    @tool
    def to_router(self) -> Any:
        """Go to the router."""
        return go(Router)

    @tool
    def crash(self) -> str:
        """Crash."""
        raise RuntimeError("boom")


class Beta(Step):
    """Beta."""

    @tool
    def back(self) -> Any:
        """Back to alpha."""
        return go(Alpha)

    @tool
    def table(self) -> Any:
        """Answer directly."""
        return direct("| a |\n|---|\n| 1 |")

    @tool
    def left(self, x: int) -> str:
        """Left."""
        return "left"

    @tool
    def right(self, y: int) -> str:
        """Right."""
        return "right"

    @tools(["left", "right"])
    def both(self, calls: list[Any]) -> Any:
        return stay("both done")


class Router(LogicStep):
    def run_logic(self) -> Any:
        return go(Beta if self.state_of(Alpha).get("count", 0) % 2 else Alpha)


class Fuzz(Flow):
    name = "fuzz"
    steps = [Alpha, Beta, Router]


NAMES = ["count", "add_items", "refuse", "to_beta", "to_router", "back", "table", "left", "right", "crash"]
tool_names = (
    st.sampled_from(NAMES)
    | st.sampled_from(["cuont", "to_gamma", "", "terminate_session"])
    | st.text(string.ascii_letters + "_", min_size=1, max_size=12)
)
marked = st.text(string.ascii_letters, min_size=4, max_size=12).map(lambda s: f"{MARK}{s}")
json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
# Invalid values that carry the mark: wrong types, over-long strings, extra fields.
invalid_args = st.one_of(
    st.fixed_dictionaries({"n": marked}),
    st.fixed_dictionaries({"reason": marked.map(lambda s: s * 3)}),
    st.fixed_dictionaries(
        {
            "items": st.lists(
                st.fixed_dictionaries({"name": marked.map(lambda s: s * 3), "qty": st.just(1)}),
                min_size=1,
                max_size=2,
            )
        }
    ),
    st.fixed_dictionaries({"x": marked}),
    st.fixed_dictionaries({"items": st.just([{"name": "a", "qty": 0}]), "note": marked.map(lambda s: s * 4)}),
)
arguments = st.one_of(
    invalid_args,
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    st.fixed_dictionaries({"n": st.integers(-5, 120)}),
    st.fixed_dictionaries(
        {
            "items": st.lists(
                st.fixed_dictionaries({"name": st.text(max_size=25), "qty": st.integers(0, 12)}), max_size=3
            )
        }
    ),
    st.just({}),
    st.text(max_size=30).map(lambda s: "{" + s),  # malformed JSON text
    st.just({"deep": [[[[[[{"a": "b" * 5000}]]]]]]}),
)
calls = st.lists(st.builds(ToolCall, tool_names, arguments), min_size=1, max_size=4)
responses = st.one_of(
    st.text(max_size=40).map(lambda text: ModelResponse(text=text)),
    calls.map(lambda c: ModelResponse(tool_calls=list(c))),
)


def check_request(request: ModelRequest, problems: list[str]) -> None:
    """Every tool call shown to the model has exactly one result; no marked value is echoed back."""
    pending: dict[str, int] = {}
    for message in request.messages:
        if message.role != "assistant" and MARK in message.content:
            problems.append(f"echoed a submitted value in a {message.role} message: {message.content[:80]}")
        if message.role == "tool":
            if message.tool_call_id not in pending:
                problems.append(f"tool result {message.tool_call_id} without a pending call")
            else:
                pending[message.tool_call_id or ""] -= 1
                if pending[message.tool_call_id or ""] == 0:
                    del pending[message.tool_call_id or ""]
            continue
        if pending:
            problems.append(f"calls {sorted(pending)} got no result before the next {message.role} message")
            pending.clear()
        for call in message.tool_calls:
            pending[call.id] = pending.get(call.id, 0) + 1
    if pending:
        problems.append(f"calls {sorted(pending)} got no result")
    if MARK in request.system:
        problems.append("echoed a submitted value in the system prompt")


def check_transcript(messages: Sequence[Message], problems: list[str]) -> None:
    by_id: dict[str, int] = {}
    expected: set[str] = set()
    for message in messages:
        for call in message.tool_calls:
            expected.add(call.id)
        if message.role == "tool":
            by_id[message.tool_call_id or ""] = by_id.get(message.tool_call_id or "", 0) + 1
    if set(by_id) != expected or any(count != 1 for count in by_id.values()):
        problems.append(f"tool results per call id: {by_id}, calls: {sorted(expected)}")


async def play(turns: list[tuple[str, list[ModelResponse]]]) -> list[str]:
    problems: list[str] = []
    queue: list[ModelResponse] = []

    def answer(request: ModelRequest) -> ModelResponse:
        check_request(request, problems)
        return queue.pop(0) if queue else ModelResponse(text="done")

    store = MemoryStore()
    engine = FlowEngine([Fuzz], model=FunctionModel(answer), store=store, limits=LIMITS)
    session_id: str | None = None
    revision = 0
    for message, script in turns:
        queue[:] = script
        before = await store.load(session_id) if session_id else None
        try:
            result = await engine.run("fuzz", message, session_id)
        except BaseException as exc:  # the property: nothing escapes
            problems.append(f"run raised {type(exc).__name__}: {exc}")
            return problems
        if result.usage.model_calls > (LIMITS.model_calls or 0) or result.usage.tool_calls > (
            LIMITS.tool_calls or 0
        ):
            problems.append(f"budget exceeded: {result.usage}")
        if result.ok:
            session_id = result.session_id
            stored = await store.load(session_id or "")
            assert stored is not None
            if stored.revision != revision + 1:
                problems.append(f"revision went from {revision} to {stored.revision}")
            revision = stored.revision
            check_transcript(await store.transcript(session_id or ""), problems)
        else:
            if result.error is None or not result.message:
                problems.append("a failed turn without an error")
            if before is not None:
                after = await store.load(before.id)
                if after is None or session_to_json(after) != session_to_json(before):
                    problems.append("a failed turn changed the stored session")
            elif result.session_id is not None:
                # A failed first turn keeps its session as it was before the turn: empty.
                kept = await store.load(result.session_id)
                if kept is None or kept.turns or kept.sequence or await store.transcript(kept.id):
                    problems.append("a failed first turn kept more than an empty session")
                session_id, revision = kept.id if kept else None, kept.revision if kept else 0
    return problems


messages = st.text(min_size=1, max_size=30).filter(lambda s: s.strip() != "")


@given(st.lists(st.tuples(messages, st.lists(responses, max_size=6)), min_size=1, max_size=3))
def test_runner_invariants_hold_for_any_model_behaviour(turns: list[tuple[str, list[ModelResponse]]]) -> None:
    assert asyncio.run(play(turns)) == []


def test_the_oracle_catches_a_missing_tool_result() -> None:
    """The checker itself must be able to fail."""
    problems: list[str] = []
    call = ToolCall("count", {"n": 1}, "c1")
    request = ModelRequest(
        system="", messages=[Message.user("hi"), Message.assistant("", [call]), Message.user("x")]
    )
    check_request(request, problems)
    assert problems == ["calls ['c1'] got no result before the next user message"]
    problems.clear()
    leak = ModelRequest(system="", messages=[Message.tool(call, f"bad value {MARK}abc")])
    check_request(leak, problems)
    assert len(problems) == 2
