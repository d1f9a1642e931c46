"""Tool calls written as text: found in every form small models use, and only those."""

from __future__ import annotations

import pytest

from picoflow.messages import Message, ModelRequest, ModelResponse, OutputSchema, ToolDefinition
from picoflow.models.text_calls import RECOVERED, HeldText, calls_in_text, recover_tool_calls

ADD = ToolDefinition("add", "Add two numbers.", {"type": "object", "properties": {}})
OFFERED = {"add", "weather"}


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "add", "arguments": {"a": 17, "b": 25}}',
        '  {"name": "add", "arguments": "{\\"a\\": 17, \\"b\\": 25}"}\n',
        '```json\n{"name": "add", "arguments": {"a": 17, "b": 25}}\n```',
        '<tool_call>\n{"name": "add", "arguments": {"a": 17, "b": 25}}\n</tool_call>',
        'I will add them.\n<tool_call>{"name": "add", "arguments": {"a": 17, "b": 25}}',
        '{"tool": "add", "args": {"a": 17, "b": 25}}',
        '{"type": "function", "function": {"name": "add", "arguments": {"a": 17, "b": 25}}}',
        '{"tool_calls": [{"name": "add", "arguments": {"a": 17, "b": 25}}]}',
    ],
)
def test_a_call_is_found_in_every_form(text: str) -> None:
    assert calls_in_text(text, OFFERED) == [("add", {"a": 17, "b": 25})]


def test_several_calls_tagged_or_listed_are_all_found() -> None:
    tagged = (
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    listed = (
        '[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "weather", "arguments": {"city": "Oslo"}}]'
    )
    expected = [("add", {"a": 1, "b": 2}), ("weather", {"city": "Oslo"})]
    assert calls_in_text(tagged, OFFERED) == expected
    assert calls_in_text(listed, OFFERED) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The sum is 42.",
        '{"name": "Ada Lovelace", "born": 1815}',  # data with a name, not a call
        '{"answer": 42}',
        "[1, 2, 3]",
        "Use {braces} freely.",
        '{"name": "Ada", "born": ',
    ],
)
def test_answers_are_not_calls(text: str) -> None:
    assert calls_in_text(text, OFFERED) == []


def test_a_call_cut_short_is_still_a_call_with_unreadable_arguments() -> None:
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 17, "b":'
    assert calls_in_text(text, OFFERED) == [("add", text)]


def test_an_unknown_tool_is_still_a_call_so_the_model_is_corrected() -> None:
    assert calls_in_text('{"name": "multiply", "arguments": {"a": 2}}', OFFERED) == [("multiply", {"a": 2})]
    # Without arguments it could be anything; an offered name alone is enough.
    assert calls_in_text('{"name": "multiply"}', OFFERED) == []
    assert calls_in_text('{"name": "add"}', OFFERED) == [("add", {})]


def test_with_a_structured_answer_expected_an_unknown_name_is_left_as_the_answer() -> None:
    text = '{"name": "Moby-Dick", "arguments": ["whales"]}'
    assert calls_in_text(text, OFFERED, structured=True) == []
    assert calls_in_text('{"name": "add", "arguments": {}}', OFFERED, structured=True) == [("add", {})]


def _request(**fields: object) -> ModelRequest:
    return ModelRequest("Be brief.", [Message.user("What is 17 + 25?")], **fields)  # type: ignore[arg-type]


def test_recovery_turns_the_text_into_calls_and_warns() -> None:
    response = ModelResponse('{"name": "add", "arguments": {"a": 17, "b": 25}}', finish_reason="stop")
    assert recover_tool_calls(response, _request(tools=[ADD]), model="openai-compatible:qwen")
    (call,) = response.tool_calls
    assert (call.name, call.args) == ("add", {"a": 17, "b": 25})
    assert call.id.startswith("call_")
    assert response.text == ""
    assert response.finish_reason == "tool_calls"
    (warning,) = response.warnings
    assert warning.code == RECOVERED
    assert (
        warning.message == "openai-compatible:qwen wrote its tool call (add) as text; it was read as a call"
    )


def test_recovery_leaves_alone_what_it_should() -> None:
    text = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    no_tools = ModelResponse(text)
    assert not recover_tool_calls(no_tools, _request(), model="m")
    assert no_tools.text == text and not no_tools.warnings
    answer = ModelResponse("42")
    assert not recover_tool_calls(answer, _request(tools=[ADD]), model="m")
    assert answer.text == "42"
    output = OutputSchema("sum", {"type": "object"})
    structured = ModelResponse('{"sum": 42}')
    assert not recover_tool_calls(structured, _request(tools=[ADD], output=output), model="m")
    assert structured.text == '{"sum": 42}'


def _stream(pieces: list[str]) -> tuple[str, HeldText]:
    held = HeldText()
    return "".join(held.feed(piece) for piece in pieces), held


def test_streamed_prose_passes_and_a_call_is_held_back() -> None:
    shown, held = _stream(["The sum", " is 42", "."])
    assert shown == "The sum is 42." and held.release() == ""
    shown, held = _stream(["I'll add.", "\n<tool", '_call>{"name": "add",', ' "arguments": {}}'])
    assert shown == "I'll add.\n"
    assert held.release() == '<tool_call>{"name": "add", "arguments": {}}'
    shown, held = _stream(["``", '`json\n{"name"'])
    assert shown == ""
    shown, held = _stream(["Totals: [", '{"name": "add"}]'])
    assert shown == "Totals: "


def test_streamed_text_that_only_looked_like_a_call_is_released_at_the_end() -> None:
    shown, held = _stream(["Answer: ", "{", "42}", " done"])
    assert shown == "Answer: "
    assert held.release() == "{42} done"
    shown, held = _stream(["See [1", "] and `code`", " here"])
    assert shown == "See [1] and `code` here"
    shown, held = _stream(["trailing `"])
    assert shown == "trailing "
    assert held.release() == "`"
