"""The OpenAPI document states what the server does (``picoflow.server.contract``), and the server
answers what the document states: errors as JSON in each surface's shape, 405 and OPTIONS with the
whole ``Allow``, the engine's limits, strict types, and links from a created session."""

from __future__ import annotations

from typing import Any

from picoflow.exceptions import ApprovalRefused, HandoffRefused, RunError
from picoflow.server import ServerSettings
from server.support import client_for, desk_engine

NATIVE = {"$ref": "#/components/schemas/ErrorBody"}
COMPAT = {"$ref": "#/components/schemas/CompatError"}
OPENAI = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"enum": ["invalid_request_error", "server_error"]},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


async def document() -> dict[str, Any]:
    async with client_for(desk_engine(), ServerSettings(max_message_chars=50)) as client:
        found: dict[str, Any] = (await client.get("/openapi.json")).json()
        return found


async def test_every_error_is_json_in_the_shape_of_its_surface() -> None:
    paths = (await document())["paths"]
    shapes: dict[str, set[str]] = {}
    for path, operations in paths.items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                assert list(response["content"]) == ["application/json"], (method, path, status)
                schema = response["content"]["application/json"]["schema"]
                shape = "native" if schema == NATIVE else "compat" if schema == COMPAT else "own"
                shapes.setdefault(shape, set()).add(path)
    assert shapes["compat"] == {"/ai/run", "/ai/flows", "/ai/end"}
    assert {"/v1/chat/completions", "/v1/models/{model}"} <= shapes["own"]  # OpenAI's shape
    assert "/v1/flows/{flow}/diagram.mmd" in shapes["native"]  # text on success, JSON on failure
    turn = paths["/v1/sessions/{session_id}/turns"]["post"]["responses"]
    assert {"408", "413", "415", "422"} <= turn.keys()
    assert "415" not in paths["/ai/run"]["post"]["responses"]  # no files there


async def test_the_engines_limits_and_the_served_flows_are_in_the_schema() -> None:
    found = await document()
    schemas, paths = found["components"]["schemas"], found["paths"]
    message = schemas["TurnRequest"]["properties"]["message"]
    assert message["maxLength"] == 50 and message["type"] == "string"
    assert schemas["TurnRequest"]["properties"]["attachments"]["maxItems"] == 10
    assert schemas["RunRequest"]["required"] == ["flowName", "message"]
    assert schemas["RunRequest"]["properties"]["flowName"]["enum"] == ["desk", "other"]
    form = paths["/v1/flows/{flow}/sessions"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert form["schema"]["additionalProperties"] is False
    assert form["schema"]["properties"]["message"]["maxLength"] == 50
    assert form["encoding"] == {"config": {"contentType": "application/json"}}
    flow = next(p for p in paths["/v1/flows/{flow}"]["get"]["parameters"] if p["name"] == "flow")
    assert flow["schema"]["enum"] == ["desk", "other"]
    chat = paths["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat["properties"]["model"]["enum"] == ["desk", "other"]
    completion = paths["/v1/chat/completions"]["post"]["responses"]["200"]
    assert list(completion["headers"]) == ["X-Picoflow-Session"]
    assert list(paths["/ai/run"]["post"]["responses"]["200"]["headers"]) == ["CHAT_SESSION_ID"]
    end = paths["/ai/end"]["post"]["parameters"]
    assert [(p["name"], p["in"], p["required"]) for p in end] == [("CHAT_SESSION_ID", "header", True)]
    assert schemas["AgUiRunAgentInput"]["properties"]["threadId"]["minLength"] == 1
    # An approval carries a person's label for its arguments that have one (its tool's titles).
    approval = schemas["ApprovalOut"]
    assert "labels" in approval["required"]
    assert approval["properties"]["labels"]["additionalProperties"] == {"type": "string"}


async def test_a_created_session_links_to_every_route_that_takes_its_id() -> None:
    paths = (await document())["paths"]
    links = paths["/v1/flows/{flow}/sessions"]["post"]["responses"]["201"]["links"]
    assert sorted(links) == [
        "AddTurn",
        "CancelTurn",
        "DeleteSession",
        "GetSession",
        "ListApprovals",
        "ListAttachments",
        "SessionDiagram",
        "SessionMessages",
    ]
    ids = {op["operationId"] for ops in paths.values() for op in ops.values()}
    for link in links.values():
        assert link["operationId"] in ids
        assert link["parameters"] == {"path.session_id": "$response.body#/session_id"}
    svg = paths["/v1/sessions/{session_id}/diagram.svg"]["get"]["responses"]["200"]["content"]
    assert list(svg) == ["image/svg+xml"]


async def test_405_and_options_name_every_method_of_the_resource() -> None:
    async with client_for(desk_engine()) as client:
        put = await client.put("/v1/sessions/abc")
        options = await client.options("/v1/sessions/abc")
        chat = await client.get("/v1/chat/completions")
        unknown = await client.options("/v1/nowhere")
    assert put.status_code == 405 and put.headers["allow"] == "DELETE, GET"
    assert put.json()["error"]["kind"] == "method_not_allowed"
    assert put.json()["error"]["message"] == "PUT is not served here; use DELETE, GET."
    assert options.status_code == 204 and options.headers["allow"] == "DELETE, GET" and options.content == b""
    assert chat.status_code == 405 and chat.headers["allow"] == "POST"
    assert chat.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape on its paths
    assert unknown.status_code == 404


async def test_errors_written_before_any_route_keep_their_surfaces_shape() -> None:
    async with client_for(desk_engine(), ServerSettings(max_body_bytes=100)) as client:
        big = "x" * 200
        native = await client.post(
            "/v1/sessions/abc/approvals/a1", content=big, headers={"content-type": "application/json"}
        )
        chat = await client.post(
            "/v1/chat/completions", content=big, headers={"content-type": "application/json"}
        )
        compat = await client.post("/ai/run", content=big, headers={"content-type": "application/json"})
    assert native.status_code == chat.status_code == compat.status_code == 413
    assert native.json() == {
        "error": {
            "kind": "body_too_large",
            "message": "request body is larger than 100 bytes",
            "retryable": False,
            "retry_after": None,
            "fields": [],
            "session_id": None,
        }
    }
    assert chat.json()["error"]["code"] == "body_too_large" and chat.headers["x-should-retry"] == "false"
    assert (
        compat.json()["success"] is False
        and compat.json()["message"] == "request body is larger than 100 bytes"
    )


async def test_values_are_of_the_type_the_document_states() -> None:
    async with client_for(desk_engine(), ServerSettings(max_message_chars=20)) as client:
        as_number = await client.post("/v1/flows/desk/sessions", json={"message": "hi", "stream": 0})
        padded = await client.post("/v1/flows/desk/sessions", json={"message": "hi" + " " * 30})
        lenient = await client.post(
            "/v1/flows/desk/sessions",
            json={"message": "hi", "attachments": [{"media_type": "text/plain", "data": "aGk!"}]},
        )
        form_stream = await client.post(
            "/v1/flows/desk/sessions", files={"message": (None, "hi"), "stream": (None, "0")}
        )
        form_extra = await client.post(
            "/v1/flows/desk/sessions", files={"message": (None, "hi"), "mesage": (None, "hi")}
        )
    assert as_number.status_code == 422
    assert as_number.json()["error"]["fields"] == [
        {"field": "body.stream", "problem": "Input should be a valid boolean"}
    ]
    # The limit is of the message as sent, as maxLength states it.
    assert padded.status_code == 413
    assert lenient.status_code == 422
    assert lenient.json()["error"]["fields"] == [
        {
            "field": "body.attachments.0.data",
            "problem": "Value error, is not base64 (the standard alphabet, padded with =)",
        }
    ]
    assert form_stream.status_code == 422
    assert form_stream.json()["error"]["fields"] == [
        {"field": "body.stream", "problem": "must be true or false"}
    ]
    assert form_extra.status_code == 422
    assert form_extra.json()["error"]["fields"] == [
        {
            "field": "body.mesage",
            "problem": "is not a part of a turn (the parts are message, config, stream, attachments)",
        }
    ]


def _error_classes(root: type[RunError]) -> list[type[RunError]]:
    found = [root]
    for sub in root.__subclasses__():
        found += _error_classes(sub)
    return found


async def test_every_status_a_turn_can_end_in_is_documented_on_every_route_that_runs_one() -> None:
    # From the error tree itself, not from the contract's table: a new failure with a new status
    # fails here until the document states it. A decision's refusals are its route's own, and a
    # staff action on a handoff is no turn.
    statuses = {
        str(error.status)
        for error in _error_classes(RunError)
        if not issubclass(error, ApprovalRefused | HandoffRefused)
    }
    assert {"404", "409", "413", "415", "422", "500", "502", "503"} <= statuses
    paths = (await document())["paths"]
    # Routes that answer every failure with its status, in their surface's shape.
    for path, shape, files in [
        ("/v1/flows/{flow}/sessions", NATIVE, True),
        ("/v1/sessions/{session_id}/turns", NATIVE, True),
        ("/v1/sessions/{session_id}/approvals/{approval_id}", NATIVE, False),
        ("/ai/run", COMPAT, False),
        ("/v1/chat/completions", OPENAI, False),
    ]:
        responses = paths[path]["post"]["responses"]
        for status in statuses - (set() if files else {"415"}):
            assert responses[status]["content"] == {"application/json": {"schema": shape}}, (path, status)
        assert responses["503"]["headers"]["Retry-After"]["required"] is True, path
        assert "model gave no acceptable answer" in responses["502"]["description"], path
    # Streams: a refusal is an HTTP status; a failure once the stream is open is told in it, with
    # its status, and a model's failure (502) only ever comes then.
    for path, told in [
        ("/ag-ui/{flow}", "`RUN_ERROR`"),
        ("/ai-sdk/{flow}", "`message-metadata`"),
        ("/a2a", "`TASK_STATE_FAILED`"),
        ("/v1/sessions/{session_id}/turns", "an `error` event"),
        ("/v1/chat/completions", '`data: {"error": ...}`'),
    ]:
        responses = paths[path]["post"]["responses"]
        stream = responses["200"]["description"]
        assert told in stream, path
        for status in ("409", "413", "422", "500", "502", "503"):
            assert f"; {status} " in stream or f": {status} " in stream, (path, status)
    for path in ("/ag-ui/{flow}", "/ai-sdk/{flow}"):
        responses = paths[path]["post"]["responses"]
        assert {"404", "409", "413", "422", "500", "503"} <= responses.keys() and "502" not in responses
    assert "415" in paths["/ai-sdk/{flow}"]["post"]["responses"]  # files as data: URLs
    assert not {"404", "409", "500", "502", "503"} & paths["/a2a"]["post"]["responses"].keys()
