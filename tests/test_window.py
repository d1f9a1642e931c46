"""Requests fitted to the model's context window and the step's memory budget, turn after turn."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from picoflow import Compaction, Flow, FlowDefinitionError, FlowEngine, Step, tool
from picoflow._run.tokens import request_ceiling, request_tokens, text_tokens
from picoflow.exceptions import ContextWindowExceeded
from picoflow.memory import model_summarizer
from picoflow.messages import Message, ModelRequest
from picoflow.models import FunctionModel, ScriptedModel, ToolCall
from picoflow.session import Session
from picoflow.testing import transcript_lines

WINDOW = 1200
RESERVE = 200
NOTES = "detail " * 20


class Research(Step):
    """Answer the user's question; look every topic up first."""

    memory = "research"

    @tool
    def lookup(self, topic: str) -> str:
        """Look a topic up."""
        return f"Notes on {topic}: {NOTES}"


class ResearchFlow(Flow):
    name = "research"
    steps = [Research]


def researcher(request: ModelRequest) -> ToolCall | str:
    """Looks the question's topic up, then answers from the notes."""
    last = request.messages[-1]
    if last.role == "user":
        number = re.findall(r"\d+", last.content)[-1]
        return ToolCall("lookup", {"topic": f"t{number}"}, f"call-{number}")
    assert last.role == "tool"
    return f"Answer about {last.content.split(':')[0].removeprefix('Notes on ')}."


def assert_well_formed(request: ModelRequest, question: str) -> None:
    """Every tool result follows its call, nothing starts with a result, the question is there."""
    calls: set[str] = set()
    for message in request.messages:
        calls.update(call.id for call in message.tool_calls)
        if message.role == "tool":
            assert message.tool_call_id in calls, request.messages
    assert request.messages[0].role != "tool"
    assert Message.user(question).content in [m.content for m in request.messages if m.role == "user"]


def turn_lines(number: int) -> list[str]:
    return [
        f"Research | user: question {number}",
        f'Research | assistant: -> lookup({{"topic": "t{number}"}}) #call-{number}',
        f"Research | tool lookup #call-{number}: Notes on t{number}: {NOTES}",
        f"Research | assistant: Answer about t{number}.",
    ]


async def play(engine: FlowEngine, turns: int, warnings: list[str] | None = None) -> str:
    """Ask ``turns`` questions in one session; each turn's warnings go to ``warnings``."""
    session_id: str | None = None
    for number in range(1, turns + 1):
        result = await engine.run("research", f"question {number}", session_id)
        assert result.ok, result.error
        assert result.message == f"Answer about t{number}."
        session_id = result.session_id
        if warnings is not None:
            warnings.extend(result.warnings)
    assert session_id is not None
    return session_id


async def stored(engine: FlowEngine, session_id: str) -> Session:
    session = await engine.store.load(session_id)
    assert session is not None
    return session


async def test_a_tiny_window_keeps_a_tool_calling_session_going_by_dropping_whole_groups() -> None:
    model = FunctionModel(researcher, context_window=WINDOW, output_reserve=RESERVE)
    engine = FlowEngine([ResearchFlow], model=model)
    warnings: list[str] = []
    session_id = await play(engine, 100, warnings)

    assert len(model.requests) == 200
    sizes = [request_tokens(request) for request in model.requests]
    assert max(sizes) + RESERVE <= WINDOW
    for index, request in enumerate(model.requests):
        assert_well_formed(request, f"question {index // 2 + 1}")
    # Memory is cut to three quarters of the room and grows back: a few turns between cuts.
    assert 20 <= len(warnings) <= 50
    assert warnings[0] == (
        "dropped the 12 oldest messages of memory research to fit the 1,200-token context window of "
        "function:test"
    )
    assert min(sizes[20:]) >= 0.6 * max(sizes[20:])
    # The session keeps the latest record of it, not one per trim: its document stays small.
    session = await stored(engine, session_id)
    [record] = session.warnings
    assert (record.code, record.step, record.message) == ("context_trimmed", "Research", warnings[-1])
    # The live memory is whole turns ending with the last one, and the transcript has every message.
    memory = session.memory["research"]
    assert memory.summary is None
    assert memory.start == memory.messages[0].seq
    assert await transcript_lines(engine, session_id) == [
        line for number in range(1, 101) for line in turn_lines(number)
    ]
    first = int(memory.messages[0].content.split()[-1])
    assert [m.content for m in memory.messages if m.role == "user"] == [
        f"question {number}" for number in range(first, 101)
    ]
    assert len(memory.messages) == 4 * (101 - first)


def summarizing_model(request: ModelRequest) -> str:
    """Keeps the earlier summary's topics and adds those of the evicted messages, in order."""
    topics = re.findall(r'"topic": "(t\d+)"', request.messages[0].content)
    earlier = re.search(r"Earlier summary: Looked up (.*)", request.messages[0].content)
    return "Looked up " + ", ".join([*(earlier[1].split(", ") if earlier else []), *topics])


async def test_a_compaction_summarizer_folds_what_leaves_the_window() -> None:
    summarizer = FunctionModel(summarizing_model, name="function:summarizer")

    class Summarized(Research):
        memory = "research"
        # Only the window triggers it here: the message-count trigger is out of reach.
        compaction = Compaction(summarize=model_summarizer(summarizer), trigger=10_000, keep_recent=4)

    class SummaryFlow(Flow):
        name = "research"
        steps = [Summarized]

    model = FunctionModel(researcher, context_window=WINDOW, output_reserve=RESERVE)
    engine = FlowEngine([SummaryFlow], model=model)
    warnings: list[str] = []
    session_id = await play(engine, 100, warnings)

    assert max(request_tokens(request) for request in model.requests) + RESERVE <= WINDOW
    session = await stored(engine, session_id)
    memory = session.memory["research"]
    assert memory.summary is not None
    # Nothing is lost: every topic is in the summary or still in memory, once, in order.
    live = [call.args["topic"] for m in memory.messages for call in m.tool_calls]  # type: ignore[index]
    assert memory.summary.removeprefix("Looked up ").split(", ") + live == [f"t{n}" for n in range(1, 101)]
    assert model.requests[-1].system.endswith(f"## Summary of the earlier conversation\n{memory.summary}")
    assert 5 <= len(summarizer.requests) <= 50
    assert {text.split(" the ")[0] for text in warnings} == {"summarised"}
    assert len(warnings) == len(summarizer.requests)
    assert len(await engine.store.transcript(session_id)) == 400


async def test_a_failing_summarizer_falls_back_to_dropping() -> None:
    def broken(evicted: Sequence[Message], previous: str | None) -> str:
        raise RuntimeError("summarizer down")

    class Fragile(Research):
        memory = "research"
        compaction = Compaction(summarize=broken, trigger=10_000, keep_recent=4)

    class FragileFlow(Flow):
        name = "research"
        steps = [Fragile]

    engine = FlowEngine(
        [FragileFlow], model=FunctionModel(researcher, context_window=WINDOW, output_reserve=RESERVE)
    )
    warnings: list[str] = []
    session = await stored(engine, await play(engine, 20, warnings))
    assert session.memory["research"].summary is None
    assert warnings[0] == (
        "dropped the 12 oldest messages of memory research to fit the 1,200-token context window of "
        "function:test (the summarizer raised RuntimeError)"
    )


async def test_a_memory_budget_bounds_memory_without_a_window() -> None:
    class Budgeted(Research):
        memory = "research"
        memory_budget = 400

    class BudgetFlow(Flow):
        name = "research"
        steps = [Budgeted]

    model = FunctionModel(researcher)
    engine = FlowEngine([BudgetFlow], model=model)
    warnings: list[str] = []
    session = await stored(engine, await play(engine, 30, warnings))
    assert warnings[0] == (
        "dropped the 8 oldest messages of memory research to fit the step's memory budget of 400 tokens"
    )
    # Each turn adds about 85 tokens: cut back to 300 once past 400, memory never holds more than 5 turns.
    assert all(sum(m.role == "user" for m in request.messages) <= 5 for request in model.requests)
    assert len(session.memory["research"].messages) <= 16


async def test_a_message_too_long_for_the_window_fails_cleanly_and_the_session_goes_on() -> None:
    model = FunctionModel(researcher, context_window=WINDOW, output_reserve=RESERVE)
    engine = FlowEngine([ResearchFlow], model=model)
    session_id = await play(engine, 3)
    before = await stored(engine, session_id)

    result = await engine.run("research", "question 4 " + "and more " * 400, session_id)
    assert result.error is not None and result.error.is_a(ContextWindowExceeded)
    assert (result.error.retryable, result.message) == (
        False,
        "That message is too long for the assistant to read. Please send a shorter one.",
    )
    assert len(model.requests) == 6  # the model was not called
    after = await stored(engine, session_id)
    assert (after.revision, after.memory) == (before.revision, before.memory)
    [record] = await engine.store.errors(session_id)
    assert record.code == "context_window_exceeded"
    assert record.message.startswith("step Research: its smallest request needs about 1,")
    assert record.message.endswith(
        "but function:test takes 1,000 (the 1,200-token context window of function:test less 200 kept "
        "for the answer)"
    )
    again = await engine.run("research", "question 4", session_id)
    assert again.ok and again.message == "Answer about t4."


async def test_a_summary_too_large_for_the_window_is_dropped_before_giving_up() -> None:
    class Verbose(Research):
        memory = "research"
        compaction = Compaction(
            summarize=lambda evicted, previous: "Summary. " * 400, trigger=10_000, keep_recent=4
        )

    class VerboseFlow(Flow):
        name = "research"
        steps = [Verbose]

    model = FunctionModel(researcher, context_window=WINDOW, output_reserve=RESERVE)
    engine = FlowEngine([VerboseFlow], model=model)
    warnings: list[str] = []
    session = await stored(engine, await play(engine, 12, warnings))
    assert max(request_tokens(request) for request in model.requests) + RESERVE <= WINDOW
    assert session.memory["research"].summary is None
    # The summary alone overflows the window: the recent exchanges go first, then the summary.
    assert [text.split(" of memory")[0] for text in warnings][:3] == [
        "summarised the 12 oldest messages",
        "dropped the 20 oldest messages",
        "dropped the summary",
    ]


async def test_requests_that_fit_are_sent_as_they_are() -> None:
    model = ScriptedModel(["Hello."], context_window=WINDOW, output_reserve=RESERVE)
    engine = FlowEngine([ResearchFlow], model=model)
    result = await engine.run("research", "hi")
    assert result.ok and result.warnings == ()
    [request] = model.requests
    assert [m.content for m in request.messages] == ["hi"]


def test_scripted_models_refuse_a_reserve_that_fills_the_window() -> None:
    with pytest.raises(ValueError, match="smaller than context_window"):
        ScriptedModel([], context_window=100, output_reserve=100)
    assert ScriptedModel([]).context_window is None


@pytest.mark.parametrize("budget", [0, -5, True, 1.5])
def test_a_bad_memory_budget_is_refused_when_the_flow_is_built(budget: object) -> None:
    class Bad(Step):
        """Bad."""

        memory_budget = budget  # type: ignore[assignment]

    class BadFlow(Flow):
        name = "bad"
        steps = [Bad]

    with pytest.raises(
        FlowDefinitionError, match="memory_budget must be None or a positive number of tokens"
    ):
        FlowEngine([BadFlow], model=ScriptedModel([]))


def test_the_quick_bound_never_undercounts() -> None:
    texts = [
        "",
        "plain words",
        "2,796.20 $440.50 2027-08-01",
        "漢字かな交じり",
        "😀👩🏽‍💻 ok",
        "mixed 12 漢 😀 x" * 9,
    ]
    call = ToolCall("lookup", {"topic": "漢字 12", "n": [1, 2.5, None, True]}, "c1")
    for text in texts:
        request = ModelRequest(
            system=text,
            messages=[
                Message.user(text),
                Message.assistant(text, [call, ToolCall("raw", "{not json 😀", "c2")]),
                Message.tool(call, text),
                Message("assistant", text, remembered_as=text[:3]),
            ],
        )
        assert request_ceiling(request) >= request_tokens(request) > 0, text
    assert text_tokens("") == 0 and text_tokens("abc") == 1 and text_tokens("2027") == 4
    assert text_tokens("漢字") == 2 and text_tokens("😀") == 2


def test_a_summarizer_model_may_be_named_by_its_selection() -> None:
    assert callable(model_summarizer("openai:gpt-4.1-nano"))
    with pytest.raises(FlowDefinitionError, match="unknown model 'gpt-0'"):
        model_summarizer("openai:gpt-0")
    with pytest.raises(TypeError, match="needs a picoflow Model or a model selection"):
        model_summarizer(42)
