"""MCP servers as tool sources: real servers (``mcp-server-time`` from PyPI and a misbehaving one
written with the SDK) started locally over stdio or HTTP; no network."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from picoflow import Caller, Flow, FlowDefinitionError, FlowEngine, Step, TerminateStep, tool
from picoflow.exceptions import ToolSourceUnavailable
from picoflow.mcp import MCPServer
from picoflow.messages import ModelRequest
from picoflow.models import FunctionModel, ScriptedModel, ToolCall
from picoflow.sessions import MemoryStore
from picoflow.testing import transcript_lines

UPPER_BOUND = 60.0
"""A failing test stops within this instead of hanging; no test waits for it to pass."""
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")
MISBEHAVING = Path(__file__).parent / "mcp_servers" / "misbehaving.py"


def misbehaving(**options: Any) -> MCPServer:
    env = options.pop("env", None)
    return MCPServer.stdio(sys.executable, [str(MISBEHAVING)], env=env, **options)


def flow_with(*servers: MCPServer, name: str = "mcp") -> type[Flow]:
    class Desk(Step):
        """Answer with the tools."""

        mcp_servers = list(servers)

        @tool
        def note(self, text: str) -> str:
            """Keep a note."""
            return f"noted {text}"

    class DeskFlow(Flow):
        steps = [Desk, TerminateStep]

    DeskFlow.name = name
    return DeskFlow


def tool_names(request: ModelRequest) -> list[str]:
    return [definition.name for definition in request.tools]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def tool_results(lines: list[str], name: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in lines if f"| tool {name} " in line]


async def test_mcp_server_time_answers_a_function_model() -> None:
    time_server = MCPServer.stdio(TIME_SERVER)

    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "user":
            return ToolCall("get_current_time", {"timezone": "UTC"})
        return f"It is {json.loads(last.content)['datetime']} in UTC."

    model = FunctionModel(answer)
    engine = FlowEngine([flow_with(time_server)], model=model)
    try:
        async with asyncio.timeout(UPPER_BOUND):
            result = await engine.run("mcp", "What time is it in UTC?")
        assert result.error is None, result.error
        lines = await transcript_lines(engine, result.session_id)
    finally:
        await engine.aclose()
    assert tool_names(model.requests[0]) == ["note", "terminate_session", "get_current_time", "convert_time"]
    definition = model.requests[0].tools[2]
    assert definition.strict
    assert definition.parameters["required"] == ["timezone"]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"
    day = r"(Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day"
    expected = [
        re.escape("Desk | user: What time is it in UTC?"),
        re.escape('Desk | assistant: -> get_current_time({"timezone": "UTC"}) #call_1'),
        re.escape("Desk | tool get_current_time #call_1: ")
        + re.escape('{\n  "timezone": "UTC",\n  "datetime": "')
        + stamp
        + re.escape('",\n  "day_of_week": "')
        + day
        + re.escape('",\n  "is_dst": false\n}'),
        f"Desk \\| assistant: It is {stamp} in UTC\\.",
    ]
    assert len(lines) == len(expected), lines
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    assert result.message == lines[-1].removeprefix("Desk | assistant: ")
    assert result.warnings == ()


async def run_script(engine: FlowEngine, script: list[Any], **kwargs: Any) -> tuple[Any, list[str]]:
    engine_model = ScriptedModel(script)
    engine._override = engine_model  # one script per turn, on the engine's shared servers
    engine._models.clear()
    async with asyncio.timeout(UPPER_BOUND):
        result = await engine.run("mcp", "Go.", **kwargs)
    assert result.error is None, result.error
    return result, await transcript_lines(engine, result.session_id)


@pytest.fixture
async def engine_for() -> AsyncIterator[Any]:
    engines: list[FlowEngine] = []

    def make(*servers: MCPServer) -> FlowEngine:
        engine = FlowEngine([flow_with(*servers)], model=ScriptedModel([]))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.aclose()


async def test_prefix_and_allow_list_choose_the_tools_offered(engine_for: Any) -> None:
    engine = engine_for(misbehaving(prefix="mb", allow=["echo", "pid"]))
    await engine.start()
    result, lines = await run_script(
        engine, [[ToolCall("mb_echo", {"text": "hi", "times": 2}), ToolCall("note", {"text": "x"})], "Done."]
    )
    assert [d.name for d in engine.flow("mcp").steps["Desk"].definitions] == [
        "note",
        "terminate_session",
        "mb_echo",
        "mb_pid",
    ]
    assert lines == [
        "Desk | user: Go.",
        'Desk | assistant: -> mb_echo({"text": "hi", "times": 2}) #call_1, note({"text": "x"}) #call_2',
        "Desk | tool mb_echo #call_1: hi hi",
        "Desk | tool note #call_2: noted x",
        "Desk | assistant: Done.",
    ]
    assert result.warnings == ()


async def test_invalid_arguments_are_refused_before_the_call_without_their_values(engine_for: Any) -> None:
    engine = engine_for(misbehaving(allow=["echo"]))
    secret = "my-card-4111111111111111-and-more-text-past-forty"
    result, lines = await run_script(
        engine,
        [
            ToolCall("echo", {"text": secret, "times": 9, "loud": True}),
            ToolCall("echo", {"text": "ok"}),
            "Done.",
        ],
    )
    assert lines == [
        "Desk | user: Go.",
        f'Desk | assistant: -> echo({{"loud": true, "text": "{secret}", "times": 9}}) #call_1',
        "Desk | tool echo #call_1 (error): Invalid arguments for echo:\n"
        "- text: String should have at most 40 characters\n"
        "- times: Input should be less than or equal to 3\n"
        "- loud: Extra inputs are not permitted\n"
        "Correct the arguments and call echo again.",
        'Desk | assistant: -> echo({"text": "ok"}) #call_2',
        "Desk | tool echo #call_2: ok",
        "Desk | assistant: Done.",
    ]
    assert result.warnings == ()


async def test_an_error_result_becomes_an_error_tool_message(engine_for: Any) -> None:
    engine = engine_for(misbehaving(allow=["refuse", "echo"]))
    result, lines = await run_script(
        engine, [ToolCall("refuse", {"reason": "closed"}), ToolCall("echo", {"text": "after"}), "Sorry."]
    )
    assert lines == [
        "Desk | user: Go.",
        'Desk | assistant: -> refuse({"reason": "closed"}) #call_1',
        "Desk | tool refuse #call_1 (error): Error executing tool refuse",
        'Desk | assistant: -> echo({"text": "after"}) #call_2',
        "Desk | tool echo #call_2: after",
        "Desk | assistant: Sorry.",
    ]
    assert result.warnings == ()


FAILED = "failed: its server stopped or answered wrongly, so its result is unknown. You may call it again."


@pytest.mark.parametrize(
    ("tool_name", "message", "warning"),
    [
        ("crash", f"crash {FAILED}", ("mcp_server_failed", "tool crash failed: MCP server ")),
        ("point", f"point {FAILED}", ("mcp_server_failed", "tool point failed: MCP server ")),
        (
            "slow",
            "slow did not finish within 1 seconds and was stopped; it gave no result.",
            ("tool_timeout", "tool slow did not finish within 1 s and was stopped"),
        ),
    ],
    ids=["crash-mid-call", "wrong-output-schema", "slow-call"],
)
async def test_a_misbehaving_server_gives_a_tool_message_and_a_warning_then_restarts(
    engine_for: Any, tool_name: str, message: str, warning: tuple[str, str]
) -> None:
    engine = engine_for(misbehaving(timeout=1.0))
    result, lines = await run_script(
        engine, [ToolCall("pid", {}), ToolCall(tool_name, {}), ToolCall("pid", {}), "Done."]
    )
    first, second = (int(pid) for pid in tool_results(lines, "pid"))
    assert lines == [
        "Desk | user: Go.",
        "Desk | assistant: -> pid({}) #call_1",
        f"Desk | tool pid #call_1: {first}",
        f"Desk | assistant: -> {tool_name}({{}}) #call_2",
        f"Desk | tool {tool_name} #call_2 (error): {message}",
        "Desk | assistant: -> pid({}) #call_3",
        f"Desk | tool pid #call_3: {second}",
        "Desk | assistant: Done.",
    ]
    assert first != second, "the server was restarted"
    code, text = warning
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith(text)
    stored = await engine.store.load(result.session_id)
    assert stored is not None
    assert [(w.code, w.message, w.step) for w in stored.warnings] == [(code, result.warnings[0], "Desk")]
    assert alive(second)
    await engine.aclose()
    assert not alive(first)
    assert not alive(second)


async def test_the_engine_shares_one_server_between_sessions_and_stops_it_on_aclose(engine_for: Any) -> None:
    engine = engine_for(misbehaving(allow=["pid"]))
    _, one = await run_script(engine, [ToolCall("pid", {}), "Done."])
    _, two = await run_script(engine, [ToolCall("pid", {}), "Done."])
    (pid,) = set(tool_results(one, "pid") + tool_results(two, "pid"))
    assert alive(int(pid))
    await engine.aclose()
    assert not alive(int(pid))


async def test_a_schema_picoflow_cannot_validate_is_refused_when_tools_are_registered(
    engine_for: Any,
) -> None:
    engine = engine_for(misbehaving(env={"MISBEHAVE": "schema"}))
    with pytest.raises(FlowDefinitionError) as refused:
        await engine.start()
    assert str(refused.value) == (
        "flow mcp, step Desk, MCP server "
        f"{sys.executable} {MISBEHAVING}, tool 'negated': its input schema n uses 'not', which picoflow "
        "cannot validate; leave it out with allow="
    )
    fine = engine_for(misbehaving(env={"MISBEHAVE": "schema"}, allow=["echo"]))
    await fine.start()
    assert fine.flow("mcp").steps["Desk"].mcp_tools == ("echo",)


async def test_a_tool_exposing_an_injected_argument_is_refused(engine_for: Any) -> None:
    engine = engine_for(misbehaving(env={"MISBEHAVE": "principal"}, prefix="crm"))
    with pytest.raises(FlowDefinitionError, match="tool 'crm_lookup': argument 'principal' is injected"):
        await engine.start()


async def test_allow_naming_a_tool_the_server_lacks_is_refused(engine_for: Any) -> None:
    engine = engine_for(misbehaving(allow=["echo", "fly"]))
    with pytest.raises(FlowDefinitionError, match="offers no tool 'fly'"):
        await engine.start()


async def test_a_server_that_does_not_start_fails_the_turn_cleanly() -> None:
    engine = FlowEngine(
        [flow_with(MCPServer.stdio(str(MISBEHAVING.parent / "missing-server"), startup_timeout=10))],
        model=ScriptedModel([]),
    )
    try:
        result = await engine.run("mcp", "Hello")
    finally:
        await engine.aclose()
    assert result.error is not None and result.error.is_a(ToolSourceUnavailable)
    assert (result.error.status, result.error.retryable) == (503, True)


async def test_a_server_that_does_not_start_fails_only_its_own_flow() -> None:
    broken = flow_with(MCPServer.stdio(str(MISBEHAVING.parent / "missing-server")), name="broken")
    plain = flow_with(name="plain")
    store = MemoryStore()
    engine = FlowEngine([broken, plain], store=store, model=ScriptedModel(["Hello there.", "Still here."]))
    try:
        first = await engine.run("broken", "Hello")
        served = await engine.run("plain", "Hello")
        again = await engine.run("broken", "Hello")  # tried again, and refused again
        more = await engine.run("plain", "More", served.session_id)
    finally:
        await engine.aclose()
    assert served.ok and more.ok and [served.message, more.message] == ["Hello there.", "Still here."]
    assert all(r.error is not None and r.error.is_a(ToolSourceUnavailable) for r in (first, again))
    assert [info.flow for info in await store.list_sessions()] == ["plain"]


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    spec = importlib.util.spec_from_file_location("misbehaving_server", MISBEHAVING)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inner = module.app()
    started = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async def sent(message: Any) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set()  # the app is ready; the listening socket queues connections till then
            await send(message)

        await inner(scope, receive, sent if scope["type"] == "lifespan" else send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    async with asyncio.timeout(UPPER_BOUND):
        await started.wait()
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    await task
    sock.close()


async def test_the_callers_identity_reaches_an_http_server_from_code_not_from_the_model(
    http_url: str, engine_for: Any
) -> None:
    server = MCPServer.http(
        http_url,
        allow=["whoami"],
        caller_headers=lambda ctx: {"X-Customer": ctx.principal or "anonymous"},
        caller_meta=lambda ctx: {"customer": ctx.principal},
    )
    engine = engine_for(server)
    results = {}
    for principal in ("C-1", "C-2"):
        result, lines = await run_script(
            engine,
            [ToolCall("whoami", {}), ToolCall("whoami", {"customer": "C-evil"}), "Done."],
            caller=Caller(principal=principal),
        )
        results[principal] = lines
        assert result.warnings == ()
    assert results["C-2"][:4] == [
        "Desk | user: Go.",
        "Desk | assistant: -> whoami({}) #call_1",
        'Desk | tool whoami #call_1: {"meta": "C-2", "header": "C-2"}',
        'Desk | assistant: -> whoami({"customer": "C-evil"}) #call_2',
    ]
    assert results["C-1"][2] == 'Desk | tool whoami #call_1: {"meta": "C-1", "header": "C-1"}'
    assert results["C-1"][4:] == [
        "Desk | tool whoami #call_2 (error): Invalid arguments for whoami:\n"
        "- customer: Extra inputs are not permitted\n"
        "Correct the arguments and call whoami again.",
        "Desk | assistant: Done.",
    ]


async def test_concurrent_first_turns_of_two_sessions_start_one_shared_server() -> None:
    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        return ToolCall("pid", {}) if last.role == "user" else f"pid {last.content}"

    engine = FlowEngine([flow_with(misbehaving(allow=["pid"]))], model=FunctionModel(answer))
    try:
        async with asyncio.timeout(UPPER_BOUND):
            one, two = await asyncio.gather(engine.run("mcp", "a"), engine.run("mcp", "b"))
        assert one.error is None and two.error is None
        assert one.message == two.message
        first = await transcript_lines(engine, one.session_id)
        assert first == [
            "Desk | user: a",
            "Desk | assistant: -> pid({}) #call_1",
            f"Desk | tool pid #call_1: {one.message.removeprefix('pid ')}",
            f"Desk | assistant: {one.message}",
        ]
    finally:
        await engine.aclose()
    assert not alive(int(one.message.removeprefix("pid ")))


async def test_a_sub_step_of_another_flow_gets_that_flows_mcp_tools_before_its_first_turn() -> None:
    class Helper(Step):
        """Echo what you are given."""

    class Front(Step):
        """Delegate to the helper of the tools flow."""

        @tool
        async def ask_helper(self, text: str) -> str:
            """Ask the helper."""
            answer: str = await self.run_step(Helper, text)
            return answer

    class ToolsFlow(Flow):
        name = "tools"
        steps = [Helper]
        mcp_servers = [misbehaving(allow=["echo"])]

    class FrontFlow(Flow):
        name = "front"
        steps = [Front]

    model = ScriptedModel(
        [ToolCall("ask_helper", {"text": "hi"}), ToolCall("echo", {"text": "hi"}), "hi (echoed)", "Done."]
    )
    engine = FlowEngine([FrontFlow, ToolsFlow], model=model)
    try:
        async with asyncio.timeout(UPPER_BOUND):
            result = await engine.run("front", "Go.")
        assert result.error is None, result.error
        lines = await transcript_lines(engine, result.session_id)
    finally:
        await engine.aclose()
    # The front flow offers no MCP tool; its helper, a step of the tools flow, offers that flow's.
    assert [tool_names(request) for request in model.requests] == [
        ["ask_helper"],
        ["echo"],
        ["echo"],
        ["ask_helper"],
    ]
    assert lines[3:5] == [
        'Helper@2 | assistant: -> echo({"text": "hi"}) #call_2',
        "Helper@2 | tool echo #call_2: hi",
    ]


async def test_a_flows_servers_serve_its_conversational_steps_and_their_sub_step_runs() -> None:
    class Helper(Step):
        """Echo what you are given."""

    class Front(Step):
        """Delegate to the helper."""

        @tool
        async def ask_helper(self, text: str) -> str:
            """Ask the helper."""
            answer: str = await self.run_step(Helper, text)
            return answer

    class SharedFlow(Flow):
        name = "mcp"
        steps = [Front, Helper, TerminateStep]
        mcp_servers = [misbehaving(allow=["echo"])]

    model = ScriptedModel(
        [ToolCall("ask_helper", {"text": "hi"}), ToolCall("echo", {"text": "hi"}), "hi (echoed)", "Done."]
    )
    engine = FlowEngine([SharedFlow], model=model)
    try:
        async with asyncio.timeout(UPPER_BOUND):
            result = await engine.run("mcp", "Go.")
        assert result.error is None, result.error
        lines = await transcript_lines(engine, result.session_id)
        steps = engine.flow("mcp").steps
    finally:
        await engine.aclose()
    assert [tool_names(request) for request in model.requests] == [
        ["ask_helper", "terminate_session", "echo"],
        ["echo"],
        ["echo"],
        ["ask_helper", "terminate_session", "echo"],
    ]
    assert [d.name for d in steps["TerminateStep"].definitions] == []
    assert lines == [
        "Front | user: Go.",
        'Front | assistant: -> ask_helper({"text": "hi"}) #call_1',
        "Helper@2 | user: hi",
        'Helper@2 | assistant: -> echo({"text": "hi"}) #call_2',
        "Helper@2 | tool echo #call_2: hi",
        "Helper@2 | assistant: hi (echoed)",
        "Front | tool ask_helper #call_1: hi (echoed)",
        "Front | assistant: Done.",
    ]
