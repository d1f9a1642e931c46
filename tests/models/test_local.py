"""The embedded model: answer protocol, lenient parsing, a real conversation (loading: test_local_loading)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import BaseModel, Field

from picoflow import Flow, FlowEngine, Step, go, tool
from picoflow.messages import Message, ModelRequest, ModelResponse, OutputSchema, ToolCall, ToolDefinition
from picoflow.models.base import Model, ResponseDone, TextDelta, ToolCallDelta
from picoflow.models.local import LocalModel, choose_threads
from picoflow.models.local import _model as local_module
from picoflow.models.local._protocol import (
    ReplyStream,
    answer_schema,
    chat_messages,
    grammar_pattern,
    parse_answer,
)
from picoflow.outcomes import Outcome

SEARCH = ToolDefinition(
    "search_books",
    "Search the catalog.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
BOOK = ToolDefinition(
    "book",
    "Reserve a copy.",
    {
        "type": "object",
        "properties": {"copy": {"$ref": "#/$defs/Copy"}},
        "required": ["copy"],
        "$defs": {"Copy": {"type": "object", "properties": {"isbn": {"type": "string"}}}},
    },
)
PICK = OutputSchema(
    "pick", {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
)


# --- the answer schema -------------------------------------------------------------------------


def test_answer_schema_is_the_union_of_calls_and_reply() -> None:
    schema = answer_schema([SEARCH, BOOK], None)
    assert schema is not None
    search_call, book_call, parallel, reply = schema["anyOf"]
    assert search_call == {"$ref": "#/$defs/call_0"}
    assert book_call == {"$ref": "#/$defs/call_1"}
    defs = schema["$defs"]
    assert defs["call_0"] == {
        "type": "object",
        "properties": {"tool": {"const": "search_books"}, "arguments": dict(SEARCH.parameters)},
        "required": ["tool", "arguments"],
        "additionalProperties": False,
    }
    # A tool's own $defs move to the root, renamed so tools cannot collide, and its refs follow.
    assert defs["call_1"]["properties"]["arguments"]["properties"]["copy"] == {"$ref": "#/$defs/tool_1__Copy"}
    assert "$defs" not in defs["call_1"]["properties"]["arguments"]
    assert defs["tool_1__Copy"] == {"type": "object", "properties": {"isbn": {"type": "string"}}}
    tool_calls = parallel["properties"]["tool_calls"]
    assert tool_calls["items"] == {"anyOf": [search_call, book_call]}
    assert (tool_calls["minItems"], parallel["required"]) == (1, ["tool_calls"])
    assert reply == {
        "type": "object",
        "properties": {"reply": {"type": "string"}},
        "required": ["reply"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"^LUM-[A-Z]{2}-\d{3}$", r"^LUM-[A-Z]{2}-[0-9]{3}$"),
        (r"[\d-]+", r"[0-9-]+"),
        (r"\w+\s\d", "[A-Za-z0-9_]+[ \\t\\n\\r][0-9]"),
        (r"\\d\.", r"\\d\."),
    ],
)
def test_pattern_shorthands_are_spelled_out_for_the_grammar(pattern: str, expected: str) -> None:
    assert grammar_pattern(pattern) == expected
    tool = ToolDefinition(
        "spec", "d", {"type": "object", "properties": {"sku": {"type": "string", "pattern": pattern}}}
    )
    schema = answer_schema([tool], None)
    assert schema is not None
    assert json.dumps(schema).count(json.dumps(expected)) >= 1
    assert re.fullmatch(expected, "LUM-VS-100") is not None or "LUM" not in pattern


def test_answer_schema_variants() -> None:
    assert answer_schema([], None) is None
    no_parallel = answer_schema([SEARCH], None, parallel=False)
    assert no_parallel is not None
    assert len(no_parallel["anyOf"]) == 2
    structured = answer_schema([], PICK)
    assert structured == {
        "anyOf": [
            {
                "type": "object",
                "properties": {"reply": dict(PICK.schema)},
                "required": ["reply"],
                "additionalProperties": False,
            }
        ]
    }
    # The caller's schema is never mutated by the hoisting.
    assert "$defs" in BOOK.parameters


# --- prompts and history -----------------------------------------------------------------------


def test_history_is_rendered_in_the_answer_format() -> None:
    first, second = ToolCall("search_books", {"query": "whales"}, "c1"), ToolCall("book", "{oops", "c2")
    request = ModelRequest(
        "You are a librarian.",
        [
            Message.user("whales?"),
            Message.assistant("", [first, second]),
            Message.tool(first, "Moby-Dick"),
            Message.tool(second, "arguments are not valid JSON", is_error=True),
            Message.assistant("Found Moby-Dick."),
            Message("system", "Be brief.", kind="summary"),
            Message.user("thanks"),
        ],
        tools=[SEARCH, BOOK],
    )
    messages = chat_messages(request)
    system = messages[0]
    assert system["role"] == "system"
    assert system["content"].startswith(
        "You are a librarian.\n\nBe brief.\n\n# Tools\n- search_books: Search the catalog."
    )
    assert '{"tool": "<tool name>", "arguments": {<arguments>}}' in system["content"]
    assert '{"tool_calls": [' in system["content"]
    assert '{"reply": "<your message>"}' in system["content"]
    assert messages[1:] == [
        {"role": "user", "content": "whales?"},
        {
            "role": "assistant",
            "content": '{"tool_calls": [{"tool": "search_books", "arguments": {"query": "whales"}}, '
            '{"tool": "book", "arguments": "{oops"}]}',
        },
        {
            "role": "user",
            "content": "Result of search_books: Moby-Dick\n\nError from book: arguments are not valid JSON",
        },
        {"role": "assistant", "content": '{"reply": "Found Moby-Dick."}'},
        {"role": "user", "content": "thanks"},
    ]


def test_plain_chat_stays_plain() -> None:
    request = ModelRequest("Be nice.", [Message.user("hi"), Message.assistant("hello"), Message.user("bye")])
    assert chat_messages(request) == [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
    ]
    structured = chat_messages(ModelRequest("", [Message.user("name one")], output=PICK))[0]["content"]
    assert structured.startswith("# Answer format")
    assert 'final answer schema: {"type": "object"' in structured


# --- lenient parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"reply": "Hello!"}', ("Hello!", [])),
        (
            '{"tool": "search_books", "arguments": {"query": "whales"}}',
            ("", [("search_books", {"query": "whales"})]),
        ),
        (
            '{"tool_calls": [{"tool": "a", "arguments": {}}, {"tool": "b", "arguments": {"x": 1}}]}',
            ("", [("a", {}), ("b", {"x": 1})]),
        ),
        (
            'Sure!\n```json\n{"name": "search_books", "arguments": {"query": "orcas"}}\n```',
            ("", [("search_books", {"query": "orcas"})]),
        ),
        (
            '<tool_call>\n{"name": "search_books", "arguments": "{\\"query\\": \\"x\\"}"}\n</tool_call>',
            ("", [("search_books", {"query": "x"})]),
        ),
        ('{"function": {"name": "f", "arguments": {"k": true}}}', ("", [("f", {"k": True})])),
        ('[{"tool": "a", "args": {"q": 1}}]', ("", [("a", {"q": 1})])),
        ('{"tool": "a", "arguments": [1, 2]}', ("", [("a", "[1, 2]")])),
        ('{"tool": "a", "arguments": "not json"}', ("", [("a", "not json")])),
        ('{"tool": "a"}', ("", [("a", {})])),
        ("I cannot help with that.", ("I cannot help with that.", [])),
        ('{"reply": "Cut off mid-sent', ("Cut off mid-sent", [])),
        ('{"mood": "happy"}', ('{"mood": "happy"}', [])),
    ],
)
def test_parse_answer(text: str, expected: tuple[str, list[tuple[str, Any]]]) -> None:
    assert parse_answer(text, tool_names={"search_books", "a", "b", "f"}) == expected


def test_parse_structured_answers() -> None:
    assert parse_answer('{"reply": {"name": "Ahab"}}', structured=True) == ('{"name": "Ahab"}', [])
    # A bare object that names no known tool is the structured answer itself, not a call.
    assert parse_answer('{"name": "Ahab"}', tool_names={"search_books"}, structured=True) == (
        '{"name": "Ahab"}',
        [],
    )
    assert parse_answer(
        '{"name": "search_books", "arguments": {}}', tool_names={"search_books"}, structured=True
    ) == (
        "",
        [("search_books", {})],
    )


def test_reply_stream_decodes_the_reply_while_it_grows() -> None:
    text = 'Caf\u00e9 \U0001f40b says "hi"\n\\o/'
    encoded = json.dumps({"reply": text})
    stream = ReplyStream()
    pieces = [stream.feed(char) for char in encoded]
    assert "".join(pieces) == text
    assert all("\\" not in piece or piece == "\\" for piece in pieces)
    other = ReplyStream()
    assert [other.feed(c) for c in '{"tool": "a", "arguments": {"reply": "x"}}'] == [""] * 42


# --- the model over a fake engine --------------------------------------------------------------


class FakeEngine:
    def __init__(self, content: str, chunks: list[str] | None = None) -> None:
        self.content = content
        self.chunks = chunks or [content]
        self.payloads: list[dict[str, Any]] = []

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.payloads.append(payload)
        return {
            "choices": [{"message": {"role": "assistant", "content": self.content}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": 40,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 32},
            },
            "timings": {"prompt_per_second": 50.0, "predicted_per_second": 12.0},
        }

    def chat_stream(self, payload: dict[str, Any], on_chunk: Any) -> None:
        self.payloads.append(payload)
        for piece in self.chunks:
            on_chunk({"choices": [{"delta": {"content": piece}, "finish_reason": None}]})
        on_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]})
        on_chunk({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}})


def with_engine(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> LocalModel:
    monkeypatch.setattr(local_module, "load_engine", lambda *args, **kwargs: engine)
    return LocalModel(params={"temperature": 0.0, "max_tokens": 64, "seed": 3})


async def test_tool_call_through_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine('{"tool": "search_books", "arguments": {"query": "whales"}}')
    model = with_engine(monkeypatch, engine)
    response = await model.request(ModelRequest("sys", [Message.user("whales")], tools=[SEARCH]))
    (call,) = response.tool_calls
    assert (call.name, call.args) == ("search_books", {"query": "whales"})
    assert re.fullmatch(r"call_[0-9a-f]{12}", call.id)
    assert response.finish_reason == "tool_calls"
    assert (
        response.usage.input_tokens,
        response.usage.cached_input_tokens,
        response.usage.output_tokens,
    ) == (40, 32, 9)
    assert response.usage.model_calls == 1
    assert model.last_timings["predicted_per_second"] == 12.0
    payload = engine.payloads[0]
    assert (payload["temperature"], payload["max_tokens"], payload["seed"]) == (0.0, 64, 3)
    assert payload["response_format"]["json_schema"]["schema"] == answer_schema([SEARCH], None)


async def test_plain_request_is_unconstrained(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine("Bonjour")
    model = with_engine(monkeypatch, engine)
    response = await model.request(ModelRequest("", [Message.user("hello in French")]))
    assert response == ModelResponse("Bonjour", [], response.usage, "stop", model.name)
    assert "response_format" not in engine.payloads[0]


async def test_streaming_shows_only_the_reply_text(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine("", chunks=['{"re', 'ply": "Moby', "-Dick is", ' great."}'])
    model = with_engine(monkeypatch, engine)
    events = [e async for e in model.request_stream(ModelRequest("", [Message.user("x")], tools=[SEARCH]))]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Moby-Dick is great."
    done = events[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.text == "Moby-Dick is great."
    assert done.response.usage.output_tokens == 9


async def test_streamed_tool_calls_arrive_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine("", chunks=['{"tool": "search_', 'books", "arguments": {"query": "orcas"}}'])
    model = with_engine(monkeypatch, engine)
    events = [e async for e in model.request_stream(ModelRequest("", [Message.user("x")], tools=[SEARCH]))]
    assert not [e for e in events if isinstance(e, TextDelta)]
    (delta,) = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (delta.index, delta.name, delta.args_delta) == (0, "search_books", '{"query": "orcas"}')


def test_threads_follow_the_machine_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PICOFLOW_LOCAL_THREADS", raising=False)
    assert choose_threads(load=0.3, cpus=8) == 2
    assert choose_threads(load=6.4, cpus=8) == 2
    assert choose_threads(load=6.5, cpus=8) == 1
    assert choose_threads(load=0.4, cpus=2) == 2
    assert choose_threads(load=0.5, cpus=2) == 1
    assert choose_threads(load=0.0, cpus=1) == 1
    monkeypatch.setenv("PICOFLOW_LOCAL_THREADS", "4")
    assert choose_threads(load=9.0, cpus=2) == 4


# --- a real conversation on the embedded model -------------------------------------------------

CATALOG = [
    {"title": "Moby-Dick", "author": "Herman Melville", "topic": "whales"},
    {"title": "Leviathan", "author": "Philip Hoare", "topic": "whales"},
    {"title": "Dune", "author": "Frank Herbert", "topic": "desert"},
]
searches: list[dict[str, Any]] = []


class Search(Step):
    def prompt(self) -> str:
        return "You are a librarian. Look up the catalog with search_books before answering."

    @tool
    async def search_books(self, query: str, max_results: int = Field(5, ge=1, le=10)) -> Outcome:
        """Search the library catalog for books about a topic."""
        searches.append({"query": query, "max_results": max_results})
        words = query.lower().replace("whales", "whale").split()
        hits = [book for book in CATALOG if any(word in json.dumps(book).lower() for word in words)]
        return go(Answer).with_state(books=hits[:max_results])


class Answer(Step):
    def prompt(self) -> str:
        found = json.dumps(self.state.get("books", []))
        return f"Tell the user, in one short sentence, which books the catalog search found: {found}"


class Books(Flow):
    name = "books"
    steps = [Search, Answer]


class Recording(Model):
    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[ModelRequest, ModelResponse]] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.request(request)
        self.calls.append((request, response))
        return response


class SearchArguments(BaseModel, extra="forbid"):
    query: str = Field(min_length=1)
    max_results: int = Field(5, ge=1, le=10)


@pytest.mark.local_model
async def test_two_step_conversation_on_the_embedded_model() -> None:
    from xllamacpp import json_schema_to_grammar

    nested = answer_schema([BOOK, SEARCH], PICK)
    assert json_schema_to_grammar(nested)

    searches.clear()
    model = Recording(LocalModel(params={"temperature": 0.0, "seed": 11, "max_tokens": 200}))
    engine = FlowEngine([Books], model=model)
    result = await engine.run("books", "find books about whales")

    assert result.ok, result.error
    assert result.step == "Answer"
    assert searches, "the search tool was never called"
    first_request, first_response = model.calls[0]
    assert [t.name for t in first_request.tools] == ["search_books"]
    (call,) = first_response.tool_calls
    assert call.name == "search_books"
    assert isinstance(call.args, dict)
    arguments = SearchArguments.model_validate(call.args)
    assert "whale" in arguments.query.lower()
    last_request, last_response = model.calls[-1]
    assert last_request.step == "Answer"
    assert last_response.text.strip()
    assert result.message == last_response.text
    assert result.usage.model_calls == len(model.calls) >= 2


def test_prompt_reading_uses_two_threads_even_when_generation_uses_one() -> None:
    from picoflow.models.local import batch_threads

    assert batch_threads(1, cpus=2) == 2
    assert batch_threads(1, cpus=1) == 1
    assert batch_threads(4, cpus=8) == 4
