"""The ``history`` and ``parse_output`` hooks of a plain ``Step``, its standing ``instructions``, and
``since_last_user``.

``history(memory)`` chooses what of the step's memory the model is shown (memory itself is unchanged);
``parse_output(text)`` turns a structured answer into the value ``on_response`` gets, and a
``ValueError`` from it is sent back to the model as a correction; ``instructions`` follow the system
prompt whatever ``prompt()`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from picoflow import Flow, FlowDefinitionError, FlowEngine, Go, Message, Step, go, since_last_user, tool
from picoflow.exceptions import AttemptsExhausted, HookFailure
from picoflow.messages import ToolCall
from picoflow.models import ScriptedModel
from picoflow.testing import request_lines, transcript_lines

# --- since_last_user, on its own --------------------------------------------------------------------

U1 = Message.user("Hi")
A1 = Message.assistant("Hello! How can I help?")
U2 = Message.user("What's the weather in Oslo?")
CALL = ToolCall("get_weather", {"city": "Oslo"}, "call_1")
A_CALL = Message.assistant("", [CALL])
T_RESULT = Message.tool(CALL, "Sunny")
A2 = Message.assistant("It is sunny in Oslo.")


def test_since_last_user_starts_at_the_latest_user_message() -> None:
    memory = [U1, A1, U2, A_CALL, T_RESULT, A2]
    assert since_last_user(memory) == [U2, A_CALL, T_RESULT, A2]
    assert since_last_user([U1, A1, U2]) == [U2]
    assert since_last_user([U1]) == [U1]


def test_since_last_user_without_a_user_message_keeps_everything() -> None:
    assert since_last_user([]) == []
    assert since_last_user([A1, A_CALL, T_RESULT]) == [A1, A_CALL, T_RESULT]


def test_since_last_user_skips_messages_the_runtime_wrote_in_the_users_place() -> None:
    crossing = Message.user("Continue.", kind="crossing")
    correction = Message.user("Your response was not accepted: be brief", kind="correction")
    nudge = Message.user("Your last response was empty.", kind="nudge")
    assert since_last_user([U1, A1, crossing]) == [U1, A1, crossing]
    assert since_last_user([U1, A1, correction, nudge]) == [U1, A1, correction, nudge]
    forwarded = Message.user("My bill is wrong", kind="forwarded")
    assert since_last_user([U1, A1, forwarded]) == [forwarded]


def test_since_last_user_before_keeps_the_plain_replies_just_before() -> None:
    direct = Message.assistant("What is your name?", kind="direct")
    assert since_last_user([U1, A1, U2], before=1) == [A1, U2]
    assert since_last_user([U1, direct, U2], before=1) == [direct, U2]
    assert since_last_user([A1, direct, U2], before=2) == [A1, direct, U2]
    assert since_last_user([A1, direct, U2], before=5) == [A1, direct, U2]
    # Never past another user message.
    assert since_last_user([U1, A1, U2], before=2) == [A1, U2]
    assert since_last_user([U1, U2], before=1) == [U2]
    assert since_last_user([U2], before=1) == [U2]


def test_since_last_user_never_shows_a_tool_call_without_its_results() -> None:
    # Just before the user's message is a tool result: neither it nor its call is taken.
    assert since_last_user([U1, A_CALL, T_RESULT, U2], before=1) == [U2]
    assert since_last_user([U1, A_CALL, T_RESULT, U2], before=3) == [U2]
    # An assistant message holding a call is not a plain reply either.
    assert since_last_user([U1, A_CALL, U2], before=1) == [U2]
    # A plain reply after the tool loop is taken, and the loop before it stays out.
    assert since_last_user([U1, A_CALL, T_RESULT, A2, U2], before=1) == [A2, U2]
    assert since_last_user([U1, A_CALL, T_RESULT, A2, U2], before=2) == [A2, U2]


# --- history in a conversation ---------------------------------------------------------------------


class Chatty(Step):
    """You chat briefly."""

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        return since_last_user(memory)


class ChattyFlow(Flow):
    name = "chatty"
    steps = [Chatty]


async def test_history_shows_the_model_only_the_latest_user_message_and_keeps_memory_whole() -> None:
    model = ScriptedModel(["Hello!", "Fine, thanks.", "Bye!"])
    engine = FlowEngine([ChattyFlow], model=model)
    first = await engine.run("chatty", "Hi")
    await engine.run("chatty", "How are you?", first.session_id)
    await engine.run("chatty", "Goodbye", first.session_id)
    assert [request_lines(request) for request in model.requests] == [
        ["system: You chat briefly.", "user: Hi"],
        ["system: You chat briefly.", "user: How are you?"],
        ["system: You chat briefly.", "user: Goodbye"],
    ]
    session = await engine.store.load(first.session_id or "")
    assert session is not None and len(session.memory["Chatty"].messages) == 6
    assert await transcript_lines(engine, first.session_id or "") == [
        "Chatty | user: Hi",
        "Chatty | assistant: Hello!",
        "Chatty | user: How are you?",
        "Chatty | assistant: Fine, thanks.",
        "Chatty | user: Goodbye",
        "Chatty | assistant: Bye!",
    ]
    assert "history" in ChattyFlow.spec().steps["Chatty"].overrides


async def test_without_a_history_override_the_model_sees_all_of_memory() -> None:
    class Plain(Step):
        """You chat."""

    class PlainFlow(Flow):
        name = "plain"
        steps = [Plain]

    model = ScriptedModel(["Hello!", "Fine."])
    engine = FlowEngine([PlainFlow], model=model)
    first = await engine.run("plain", "Hi")
    await engine.run("plain", "How are you?", first.session_id)
    assert request_lines(model.requests[1]) == [
        "system: You chat.",
        "user: Hi",
        "assistant: Hello!",
        "user: How are you?",
    ]
    assert "history" not in PlainFlow.spec().steps["Plain"].overrides


class Weather(Step):
    """You report the weather."""

    async def history(self, memory: Sequence[Message]) -> Sequence[Message]:  # type: ignore[override]
        return since_last_user(memory, before=1)

    @tool
    def get_weather(self, city: str) -> str:
        """The weather of one city."""
        return f"Sunny in {city}"


class WeatherFlow(Flow):
    name = "weather"
    steps = [Weather]


async def test_an_async_history_keeping_the_question_keeps_the_tool_loop_of_this_turn_whole() -> None:
    model = ScriptedModel(
        [
            "Hello! Which city?",
            ToolCall("get_weather", {"city": "Oslo"}),
            "It is sunny in Oslo.",
            ToolCall("get_weather", {"city": "Rome"}),
            "Sunny in Rome too.",
        ]
    )
    engine = FlowEngine([WeatherFlow], model=model)
    first = await engine.run("weather", "Hi")
    await engine.run("weather", "Oslo", first.session_id)
    third = await engine.run("weather", "And Rome?", first.session_id)
    assert third.message == "Sunny in Rome too."
    system = "system: You report the weather."
    assert [request_lines(request) for request in model.requests] == [
        [system, "user: Hi"],
        [system, "assistant: Hello! Which city?", "user: Oslo"],
        [
            system,
            "assistant: Hello! Which city?",
            "user: Oslo",
            'assistant: -> get_weather({"city": "Oslo"}) #call_1',
            "tool get_weather #call_1: Sunny in Oslo",
        ],
        # The previous turn's tool loop is left out whole; its closing reply is kept.
        [system, "assistant: It is sunny in Oslo.", "user: And Rome?"],
        [
            system,
            "assistant: It is sunny in Oslo.",
            "user: And Rome?",
            'assistant: -> get_weather({"city": "Rome"}) #call_2',
            "tool get_weather #call_2: Sunny in Rome",
        ],
    ]


class Front(Step):
    """You route the customer."""

    memory = "desk"

    @tool
    def transfer(self, note: str) -> Go:
        """Hand the customer over to billing with a note."""
        return go(Billing).with_message(note)


class Billing(Step):
    """You fix bills."""

    memory = "desk"

    def history(self, memory: Sequence[Message]) -> Sequence[Message]:
        return since_last_user(memory, before=1)


class DeskFlow(Flow):
    name = "desk"
    steps = [Front, Billing]


async def test_a_forwarded_message_right_after_tool_results_is_shown_without_them() -> None:
    model = ScriptedModel([ToolCall("transfer", {"note": "My bill is wrong"}), "Let me check your bill."])
    engine = FlowEngine([DeskFlow], model=model)
    result = await engine.run("desk", "My bill is wrong")
    assert result.ok and result.message == "Let me check your bill."
    assert await transcript_lines(engine, result.session_id or "") == [
        "Front | user: My bill is wrong",
        'Front | assistant: -> transfer({"note": "My bill is wrong"}) #call_1',
        "Front | tool transfer #call_1: Accepted.",
        "Billing | user [forwarded]: My bill is wrong",
        "Billing | assistant: Let me check your bill.",
    ]
    # Shared memory ends tool call, tool result, forwarded message: the call and result stay out.
    assert request_lines(model.requests[1]) == [
        "system: You fix bills.",
        "user [forwarded]: My bill is wrong",
    ]


async def test_a_history_hook_that_raises_fails_the_turn_as_a_hook_failure() -> None:
    class Broken(Step):
        """You chat."""

        def history(self, memory: Sequence[Message]) -> Sequence[Message]:
            raise KeyError("oops")

    class BrokenFlow(Flow):
        name = "broken"
        steps = [Broken]

    model = ScriptedModel([])
    engine = FlowEngine([BrokenFlow], model=model)
    result = await engine.run("broken", "Hi")
    assert not result.ok and result.error is not None and result.error.is_a(HookFailure)
    assert model.requests == [] and result.session_id == result.error.reference
    stored = await engine.store.load(result.session_id or "")
    assert stored is not None and stored.turns == 0 and stored.sequence == []


# --- parse_output ---------------------------------------------------------------------------------------


class Total(BaseModel):
    """The invoice total."""

    amount: int


class Invoice(Step):
    """Read the total of the invoice the user pastes."""

    output = Total

    @classmethod
    def parse_output(cls, text: str) -> Total:
        total: Total = super().parse_output(text)
        if total.amount <= 0:
            raise ValueError("the amount must be more than zero, as written on the invoice")
        return total

    def on_response(self, response: Total) -> str:
        return f"Total: {response.amount}."


class InvoiceFlow(Flow):
    name = "invoice"
    steps = [Invoice]


CORRECTION = "Your answer must be one JSON object matching the required schema."


async def test_a_value_error_from_parse_output_becomes_a_correction() -> None:
    model = ScriptedModel(['{"amount": -5}', '{"amount": 42}'])
    engine = FlowEngine([InvoiceFlow], model=model)
    result = await engine.run("invoice", "Total due: 42")
    assert result.ok and result.message == "Total: 42."
    assert result.usage.model_calls == 2
    assert request_lines(model.requests[1]) == [
        "system: Read the total of the invoice the user pastes.",
        "user: Total due: 42",
        'assistant [correction]: {"amount": -5}',
        f"user [correction]: {CORRECTION} the amount must be more than zero, as written on the invoice",
    ]
    assert await transcript_lines(engine, result.session_id or "") == [
        "Invoice | user: Total due: 42",
        "Invoice | assistant: Total: 42.",
    ]


async def test_a_validation_error_of_the_default_parse_output_names_the_rule_not_the_value() -> None:
    model = ScriptedModel(['{"amount": "forty-two"}', '{"amount": 42}'])
    engine = FlowEngine([InvoiceFlow], model=model)
    result = await engine.run("invoice", "Total due: forty-two")
    assert result.ok and result.message == "Total: 42."
    correction = model.requests[1].messages[-1]
    assert correction.kind == "correction" and correction.content.startswith(f"{CORRECTION} ")
    assert "amount" in correction.content and "forty-two" not in correction.content


async def test_parse_output_refusing_every_answer_exhausts_the_attempts() -> None:
    model = ScriptedModel(['{"amount": 0}', '{"amount": -1}', "forty-two"])
    engine = FlowEngine([InvoiceFlow], model=model)
    result = await engine.run("invoice", "Total due: 42")
    assert not result.ok and result.error is not None and result.error.is_a(AttemptsExhausted)
    assert result.usage.model_calls == 3
    assert await engine.store.transcript(result.session_id or "") == []  # kept as before the turn
    assert request_lines(model.requests[2])[-4:] == [
        'assistant [correction]: {"amount": 0}',
        f"user [correction]: {CORRECTION} the amount must be more than zero, as written on the invoice",
        'assistant [correction]: {"amount": -1}',
        f"user [correction]: {CORRECTION} the amount must be more than zero, as written on the invoice",
    ]


async def test_parse_output_may_return_any_value_and_on_response_gets_it() -> None:
    class Cents(Step):
        """Read the amount."""

        output = Total

        @classmethod
        def parse_output(cls, text: str) -> Any:
            return {"cents": Total.model_validate_json(text).amount * 100}

    class CentsFlow(Flow):
        name = "cents"
        steps = [Cents]

    model = ScriptedModel(['```json\n{"amount": 3}\n```'])
    engine = FlowEngine([CentsFlow], model=model)
    result = await engine.run("cents", "three dollars")
    # Without on_response the parsed value is the reply, as JSON.
    assert result.ok and result.message == '{"cents":300}' and result.content_type == "application/json"


async def test_parse_output_is_not_used_without_output_nor_for_tool_calls() -> None:
    parsed: list[str] = []

    class Free(Step):
        """You chat."""

        @classmethod
        def parse_output(cls, text: str) -> Any:
            parsed.append(text)
            raise ValueError("never")

    class Tooled(Step):
        """You look the amount up."""

        output = Total

        @classmethod
        def parse_output(cls, text: str) -> Any:
            parsed.append(text)
            return super().parse_output(text)

        @tool
        def look_up(self) -> str:
            """The amount on file."""
            return "7"

    class FreeFlow(Flow):
        name = "free"
        steps = [Free]

    class TooledFlow(Flow):
        name = "tooled"
        steps = [Tooled]

    free = FlowEngine([FreeFlow], model=ScriptedModel(["not JSON at all"]))
    assert (await free.run("free", "Hi")).message == "not JSON at all"
    assert parsed == []

    tooled = FlowEngine([TooledFlow], model=ScriptedModel([ToolCall("look_up", {}), '{"amount": 7}']))
    result = await tooled.run("tooled", "How much?")
    assert result.ok and result.message == '{"amount":7}'
    assert parsed == ['{"amount": 7}']


# --- instructions --------------------------------------------------------------------------------------


class Ruled(Step):
    """Answer the user."""

    instructions = "Answer in one sentence."


class OwnPrompt(Ruled):
    """Not the prompt: prompt() is."""

    def prompt(self) -> str:
        return "You are a travel agent.\n"


class MoreRules(OwnPrompt):
    instructions = "Never name a price."


class Handover(Step):
    """Hand over."""

    @tool
    def hand_over(self) -> Go:
        """Hand over to the next step."""
        return go(MoreRules).with_prompt("Special prompt.")


class RuledFlow(Flow):
    name = "ruled"
    steps = [Ruled, OwnPrompt, MoreRules, Handover]


async def system_of(step: type[Step], *script: Any) -> list[str]:
    model = ScriptedModel(list(script) or ["Hello."])
    flow = type(f"{step.__name__}Flow", (RuledFlow,), {"name": "ruled-" + step.name.lower(), "start": step})
    result = await FlowEngine([flow], model=model).run(flow.name, "Hi")
    assert result.ok, result.error
    return [request.system for request in model.requests]


async def test_instructions_follow_the_docstring_prompt() -> None:
    assert await system_of(Ruled) == ["Answer the user.\n\nAnswer in one sentence."]
    assert RuledFlow.spec().steps["Ruled"].instructions == "Answer in one sentence."
    assert RuledFlow.spec().steps["Handover"].instructions == ""


async def test_a_prompt_of_its_own_does_not_drop_the_instructions_of_a_base_class() -> None:
    assert await system_of(OwnPrompt) == ["You are a travel agent.\n\nAnswer in one sentence."]
    # A subclass's own instructions come after its bases', each once.
    assert await system_of(MoreRules) == [
        "You are a travel agent.\n\nAnswer in one sentence.\n\nNever name a price."
    ]


async def test_instructions_follow_a_with_prompt_override_too() -> None:
    systems = await system_of(Handover, ToolCall("hand_over"), "Done.")
    assert systems == [
        "Hand over.",
        "Special prompt.\n\nAnswer in one sentence.\n\nNever name a price.",
    ]


async def test_an_empty_prompt_leaves_the_instructions_alone() -> None:
    class Bare(Ruled):
        def prompt(self) -> str:
            return "  "

    class BareFlow(Flow):
        name = "bare"
        steps = [Bare]

    model = ScriptedModel(["Hello."])
    assert (await FlowEngine([BareFlow], model=model).run("bare", "Hi")).ok
    assert model.requests[0].system == "Answer in one sentence."


def test_instructions_that_are_not_text_are_refused_when_the_flow_is_built() -> None:
    class Odd(Step):
        """Odd."""

        instructions = ["Be brief."]  # type: ignore[assignment]

    class OddFlow(Flow):
        name = "odd"
        steps = [Odd]

    with pytest.raises(FlowDefinitionError, match="`instructions` must be a string, not list"):
        OddFlow.spec()
