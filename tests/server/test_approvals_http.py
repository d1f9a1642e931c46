"""Approvals over HTTP: a refund the model proposes waits in the turn's response and in the
session; a decision through ``POST /v1/sessions/{id}/approvals/{approval_id}`` answers as a turn,
streamed or not; who may see and who may decide come from the caller's key only."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from picoflow import Caller, FlowEngine
from picoflow.approvals import args_sha256
from picoflow.models import ScriptedModel, ToolCall
from picoflow.models.readiness import LoadStatus, LoadTracker, Phase, Warm
from picoflow.server import ServerSettings
from picoflow.sessions import MemoryStore
from picoflow.testing import transcript_lines

from .approvals_support import CUSTOMER, KEYS, NOW, OTHER, STAFF, RefundFlow, Refunds, clock
from .support import DOWNLOADING, WatchedTracker, client_for, events_of
from .test_readiness import DOWNLOADING_BODY

SMALL = ToolCall("refund", {"order_id": 40001, "amount": 25.5}, "c1")
BIG = ToolCall("refund", {"order_id": 40002, "amount": 250.0}, "c2")
USAGE_KEYS = ("reasoning_tokens", "cached_input_tokens", "cache_creation_tokens")

pytestmark = pytest.mark.usefixtures("fresh_ledger")


def make_engine(script: list[Any]) -> tuple[FlowEngine, ScriptedModel]:
    model = ScriptedModel(script)
    return FlowEngine([RefundFlow], store=MemoryStore(), model=model, clock=clock), model


def client(engine: FlowEngine, **settings: Any) -> Any:
    return client_for(engine, ServerSettings(api_keys=KEYS, **settings))


def usage(input_tokens: int, output_tokens: int, model_calls: int = 1, tool_calls: int = 0) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        **dict.fromkeys(USAGE_KEYS, 0),
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "total_tokens": input_tokens + output_tokens,
    }


def approval(shown: dict[str, Any], call: ToolCall, **changes: Any) -> dict[str, Any]:
    """The whole JSON of the approval of ``call`` (pending, unless ``changes`` say otherwise); the
    hashes of the tool's definition and of the flow are taken from ``shown`` once checked."""
    assert len(shown["tool_sha256"]) == 64 and len(shown["flow_version"]) == 64
    assert shown["id"].startswith("apr_") and len(shown["id"]) == 28
    args = {**call.args, "note": ""}  # validated: with the default the tool gets
    staff = call.args["amount"] > 100
    roles = ["staff"] if staff else []
    return {
        "id": shown["id"],
        "tool": "refund",
        "args": args,
        "summary": f"Refund ${call.args['amount']:.2f} on order {call.args['order_id']}",
        "approvers": {
            "principal": not staff,
            "roles": roles,
            "description": "someone with the 'staff' role" if staff else "the customer",
        },
        "expires_at": NOW + 600,
        "step": "Refunds",
        "call_id": call.id,
        "args_sha256": args_sha256(args),
        "tool_sha256": shown["tool_sha256"],
        "flow_version": shown["flow_version"],
        "created_at": NOW,
        "status": "pending",
        "decided_by": None,
        "decided_at": None,
        "reason": None,
        "labels": {"order_id": "Order"},  # the tool's title of it; the other arguments have none
        **changes,
    }


def turn(session_id: str, message: str, turn_usage: dict[str, int], **changes: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "flow": "refunds",
        "message": message,
        "content_type": "text/plain",
        "completed": False,
        "step": "Refunds",
        "usage": turn_usage,
        "warnings": [],
        "html": None,
        "pending": [],
        "awaiting_human": False,
        **changes,
    }


def refused(kind: str, message: str, session_id: str | None) -> dict[str, Any]:
    return {
        "error": {
            "kind": kind,
            "message": message,
            "retryable": False,
            "retry_after": None,
            "fields": [],
            "session_id": session_id,
        }
    }


async def propose(
    http: httpx.AsyncClient, message: str = "refund order 40001", **headers: str
) -> dict[str, Any]:
    reply = await http.post(
        "/v1/flows/refunds/sessions", json={"message": message}, headers=headers or CUSTOMER
    )
    assert reply.status_code == 201, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def test_a_proposed_refund_waits_then_runs_once_when_the_customer_approves() -> None:
    engine, _ = make_engine([[SMALL], "Your refund is on its way."])
    async with client(engine) as http:
        proposed = await propose(http)
        session_id = proposed["session_id"]
        waiting = approval(proposed["pending"][0], SMALL)
        assert proposed == turn(
            session_id,
            "Waiting for approval: Refund $25.50 on order 40001 (the customer must approve)",
            usage(13, 9),
            pending=[waiting],
        )
        assert Refunds.ledger == []

        session = (await http.get(f"/v1/sessions/{session_id}?transcript=false", headers=CUSTOMER)).json()
        assert (session["status"], session["turns"], session["approvals"]) == (
            "awaiting_approval",
            1,
            [waiting],
        )
        listed = await http.get(f"/v1/sessions/{session_id}/approvals", headers=CUSTOMER)
        assert listed.status_code == 200 and listed.json() == [waiting]

        decided = await http.post(
            f"/v1/sessions/{session_id}/approvals/{waiting['id']}",
            json={"decision": "approve"},
            headers=CUSTOMER,
        )
        assert decided.status_code == 200, decided.text
        assert decided.json() == turn(session_id, "Your refund is on its way.", usage(20, 7, tool_calls=1))
        assert Refunds.ledger == [(waiting["id"], 40001, 25.5)]

        approved = approval(waiting, SMALL, status="approved", decided_by="cust-1", decided_at=NOW)
        listed = await http.get(f"/v1/sessions/{session_id}/approvals", headers=CUSTOMER)
        assert listed.json() == [approved]
        session = (await http.get(f"/v1/sessions/{session_id}", headers=CUSTOMER)).json()
        assert (session["status"], session["approvals"]) == ("running", [approved])
        assert [(m["role"], m["content"]) for m in session["transcript"]] == [
            ("user", "refund order 40001"),
            ("assistant", ""),
            ("tool", "refunded $25.50 on order 40001"),
            ("assistant", "Your refund is on its way."),
        ]

        again = await http.post(
            f"/v1/sessions/{session_id}/approvals/{waiting['id']}",
            json={"decision": "deny"},
            headers=CUSTOMER,
        )
        assert again.status_code == 409
        assert again.json() == refused(
            "approval_decided", f"approval {waiting['id']} was approved already", session_id
        )
    assert Refunds.ledger == [(waiting["id"], 40001, 25.5)]


async def test_a_denied_refund_does_not_run_and_the_model_reads_the_reason() -> None:
    engine, model = make_engine([[SMALL], "Understood, no refund."])
    async with client(engine) as http:
        proposed = await propose(http)
        session_id, waiting = proposed["session_id"], proposed["pending"][0]
        denied = await http.post(
            f"/v1/sessions/{session_id}/approvals/{waiting['id']}?render=html",
            json={"decision": "deny", "reason": "  the parcel came back  "},
            headers=CUSTOMER,
        )
        assert denied.status_code == 200, denied.text
        assert denied.json() == turn(
            session_id,
            "Understood, no refund.",
            usage(25, 6),
            html="<p>Understood, no refund.</p>\n",
        )
        listed = (await http.get(f"/v1/sessions/{session_id}/approvals", headers=CUSTOMER)).json()
        assert listed == [
            approval(
                waiting,
                SMALL,
                status="denied",
                decided_by="cust-1",
                decided_at=NOW,
                reason="the parcel came back",
            )
        ]
    assert Refunds.ledger == []
    assert model.requests[-1].messages[-1].content == "Not run: refund was denied: the parcel came back"
    assert await transcript_lines(engine, session_id) == [
        "Refunds | user: refund order 40001",
        'Refunds | assistant: -> refund({"amount": 25.5, "order_id": 40001}) #c1',
        "Refunds | tool refund #c1 (error): Not run: refund was denied: the parcel came back",
        "Refunds | assistant: Understood, no refund.",
    ]


async def test_only_staff_decide_a_staff_refund_and_other_customers_see_nothing() -> None:
    engine, _ = make_engine([[BIG], "Refunded by our staff."])
    async with client(engine) as http:
        proposed = await propose(http, "refund order 40002")
        session_id, shown = proposed["session_id"], proposed["pending"][0]
        waiting = approval(shown, BIG)
        assert proposed["pending"] == [waiting]
        assert proposed["message"] == (
            "Waiting for approval: Refund $250.00 on order 40002 (someone with the 'staff' role must approve)"
        )
        path = f"/v1/sessions/{session_id}/approvals/{waiting['id']}"

        by_customer = await http.post(path, json={"decision": "approve"}, headers=CUSTOMER)
        assert by_customer.status_code == 403
        assert by_customer.json() == refused(
            "approval_not_allowed",
            f"approval {waiting['id']} needs someone with the 'staff' role",
            session_id,
        )
        by_customer_streamed = await http.post(
            path, json={"decision": "approve", "stream": True}, headers=CUSTOMER
        )
        assert (by_customer_streamed.status_code, by_customer_streamed.json()) == (403, by_customer.json())

        not_found = refused("approval_not_found", f"no approval {waiting['id']} for this caller", session_id)
        by_other = await http.post(path, json={"decision": "approve"}, headers=OTHER)
        assert (by_other.status_code, by_other.json()) == (404, not_found)
        no_session = refused("session_not_found", "No such session.", session_id)
        for headers in (OTHER, STAFF):  # the session is the customer's; staff see its approvals only
            seen = await http.get(f"/v1/sessions/{session_id}", headers=headers)
            assert (seen.status_code, seen.json()) == (404, no_session)
        other_list = await http.get(f"/v1/sessions/{session_id}/approvals", headers=OTHER)
        assert (other_list.status_code, other_list.json()) == (404, no_session)
        assert Refunds.ledger == []

        staff_list = await http.get(f"/v1/sessions/{session_id}/approvals", headers=STAFF)
        assert (staff_list.status_code, staff_list.json()) == (200, [waiting])
        by_staff = await http.post(
            path, json={"decision": "approve", "reason": "receipt checked"}, headers=STAFF
        )
        assert by_staff.status_code == 200, by_staff.text
        assert by_staff.json() == turn(session_id, "Refunded by our staff.", usage(20, 6, tool_calls=1))
        assert Refunds.ledger == [(waiting["id"], 40002, 250.0)]

        approved = approval(
            waiting, BIG, status="approved", decided_by="sup-9", decided_at=NOW, reason="receipt checked"
        )
        for headers in (CUSTOMER, STAFF):
            listed = await http.get(f"/v1/sessions/{session_id}/approvals", headers=headers)
            assert listed.json() == [approved]
        twice = await http.post(path, json={"decision": "approve"}, headers=STAFF)
        assert twice.status_code == 409
        assert twice.json() == refused(
            "approval_decided", f"approval {waiting['id']} was approved already", session_id
        )
    assert Refunds.ledger == [(waiting["id"], 40002, 250.0)]


async def test_a_malformed_decision_is_422_naming_the_field_and_changes_nothing() -> None:
    engine, _ = make_engine([[SMALL]])
    async with client(engine, max_body_bytes=4096) as http:
        proposed = await propose(http)
        session_id, waiting = proposed["session_id"], proposed["pending"][0]
        path = f"/v1/sessions/{session_id}/approvals/{waiting['id']}"

        async def problems(body: Any) -> tuple[int, list[dict[str, str]]]:
            reply = await http.post(path, json=body, headers=CUSTOMER)
            return reply.status_code, reply.json()["error"]["fields"]

        assert await problems({"decision": "maybe"}) == (
            422,
            [{"field": "body.decision", "problem": "Input should be 'approve' or 'deny'"}],
        )
        assert await problems({"reason": "why not"}) == (
            422,
            [{"field": "body.decision", "problem": "Field required"}],
        )
        assert await problems({"decision": "approve", "approved_by": "sup-9"}) == (
            422,
            [{"field": "body.approved_by", "problem": "Extra inputs are not permitted"}],
        )
        assert await problems({"decision": "deny", "reason": 7}) == (
            422,
            [{"field": "body.reason", "problem": "Input should be a valid string"}],
        )
        assert await problems({"decision": "deny", "reason": "x" * 2001}) == (
            422,
            [{"field": "body.reason", "problem": "reason is longer than 2000 characters"}],
        )
        assert await problems(["approve"]) == (
            422,
            [
                {
                    "field": "body",
                    "problem": "Input should be a valid dictionary or object to extract fields from",
                }
            ],
        )
        too_big = await http.post(path, json={"decision": "deny", "reason": "x" * 5000}, headers=CUSTOMER)
        assert too_big.status_code == 413 and too_big.json()["error"]["kind"] == "body_too_large"
        malformed = await http.post(
            f"/v1/sessions/{session_id}/approvals/apr_123", json={"decision": "approve"}
        )
        assert malformed.status_code == 401  # the caller first, whatever the request holds
        malformed = await http.post(
            f"/v1/sessions/{session_id}/approvals/apr_123", json={"decision": "approve"}, headers=CUSTOMER
        )
        assert (malformed.status_code, malformed.json()) == (
            404,
            refused("approval_not_found", "No such approval.", session_id),
        )
        unknown = await http.get("/v1/sessions/no-such-session/approvals", headers=CUSTOMER)
        assert (unknown.status_code, unknown.json()) == (
            404,
            refused("session_not_found", "No such session.", "no-such-session"),
        )

        still = (await http.get(f"/v1/sessions/{session_id}/approvals", headers=CUSTOMER)).json()
        assert still == [approval(waiting, SMALL)]
    assert Refunds.ledger == []


async def test_streams_show_the_approval_asked_for_and_the_turn_its_decision_resumes() -> None:
    engine, _ = make_engine([[SMALL], "Your refund is on its way."])
    async with client(engine) as http:
        asked = await http.post(
            "/v1/flows/refunds/sessions",
            json={"message": "refund order 40001", "stream": True},
            headers=CUSTOMER,
        )
        assert asked.status_code == 200 and asked.headers["content-type"].startswith("text/event-stream")
        events = events_of(asked.text)
        result = events[-1][1]
        session_id, waiting = result["session_id"], approval(result["pending"][0], SMALL)
        assert events == [
            ("step", {"step": "Refunds", "previous": None}),
            ("approval_requested", waiting),
            (
                "result",
                turn(
                    session_id,
                    "Waiting for approval: Refund $25.50 on order 40001 (the customer must approve)",
                    usage(13, 9),
                    pending=[waiting],
                ),
            ),
        ]

        decided = await http.post(
            f"/v1/sessions/{session_id}/approvals/{waiting['id']}",
            json={"decision": "approve"},
            headers={**CUSTOMER, "Accept": "text/event-stream"},
        )
        assert decided.status_code == 200 and decided.headers["content-type"].startswith("text/event-stream")
        approved = approval(waiting, SMALL, status="approved", decided_by="cust-1", decided_at=NOW)
        assert events_of(decided.text) == [
            ("approval_decided", approved),
            ("tool_call", {"step": "Refunds", "id": "c1", "name": "refund", "args": SMALL.args}),
            (
                "tool_result",
                {
                    "step": "Refunds",
                    "id": "c1",
                    "name": "refund",
                    "content": "refunded $25.50 on order 40001",
                    "is_error": False,
                },
            ),
            ("text", {"step": "Refunds", "text": "Your refund is on its way."}),
            ("result", turn(session_id, "Your refund is on its way.", usage(20, 7, tool_calls=1))),
        ]
    assert Refunds.ledger == [(waiting["id"], 40001, 25.5)]


async def test_a_new_message_withdraws_what_waits_and_the_session_shows_it() -> None:
    engine, _ = make_engine([[SMALL], "Fine, no refund then. Anything else?"])
    async with client(engine) as http:
        proposed = await propose(http)
        session_id, waiting = proposed["session_id"], proposed["pending"][0]
        moved_on = await http.post(
            f"/v1/sessions/{session_id}/turns", json={"message": "never mind"}, headers=CUSTOMER
        )
        assert (
            moved_on.status_code == 200
            and moved_on.json()["message"] == "Fine, no refund then. Anything else?"
        )
        session = (await http.get(f"/v1/sessions/{session_id}?transcript=false", headers=CUSTOMER)).json()
        withdrawn = approval(
            waiting,
            SMALL,
            status="withdrawn",
            decided_at=NOW,
            reason="withdrawn: a new message came before anyone decided it",
        )
        assert (session["status"], session["approvals"]) == ("running", [withdrawn])
        late = await http.post(
            f"/v1/sessions/{session_id}/approvals/{waiting['id']}",
            json={"decision": "approve"},
            headers=CUSTOMER,
        )
        assert late.status_code == 409 and late.json()["error"]["kind"] == "approval_stale"
    assert Refunds.ledger == []


async def test_the_openapi_document_names_the_approval_routes() -> None:
    engine, _ = make_engine([])
    async with client(engine) as http:
        document = (await http.get("/openapi.json", headers=CUSTOMER)).json()
    decide = document["paths"]["/v1/sessions/{session_id}/approvals/{approval_id}"]["post"]
    assert decide["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DecisionRequest"
    }
    statuses = {"200", "401", "403", "404", "408", "409", "413", "422", "500", "502", "503"}
    assert set(decide["responses"]) == statuses  # a decision resumes a turn: it may end as one
    listed = document["paths"]["/v1/sessions/{session_id}/approvals"]["get"]
    assert listed["responses"]["200"]["content"]["application/json"]["schema"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/ApprovalOut"},
        "title": "Response List Approvals V1 Sessions  Session Id  Approvals Get",
    }
    assert document["components"]["schemas"]["DecisionRequest"]["additionalProperties"] is False


async def test_staff_find_what_waits_for_them_across_sessions() -> None:
    engine, _ = make_engine([[BIG], [SMALL]])
    async with client(engine) as http:
        big = await propose(http, "refund order 40002")
        small = await propose(http, "refund order 40001", **OTHER)
        staff_queue = await http.get("/v1/approvals", headers=STAFF)
        assert staff_queue.status_code == 200
        assert staff_queue.json() == [
            {"session_id": big["session_id"], "approval": approval(big["pending"][0], BIG)}
        ]
        # A customer finds what waits for it in its own sessions, and nothing of another's.
        own = (await http.get("/v1/approvals", headers=OTHER)).json()
        assert own == [{"session_id": small["session_id"], "approval": approval(small["pending"][0], SMALL)}]
        assert (await http.get("/v1/approvals", headers=CUSTOMER)).json() == []
        assert (await http.get("/v1/approvals?flow=nope", headers=STAFF)).json() == []
        bad = await http.get("/v1/approvals?limit=0", headers=STAFF)
        assert bad.status_code == 422
        assert bad.json()["error"]["fields"] == [
            {"field": "query.limit", "problem": "Input should be greater than or equal to 1"}
        ]
    assert Refunds.ledger == []


async def test_calls_proposed_together_run_once_all_are_decided() -> None:
    other = ToolCall("refund", {"order_id": 40003, "amount": 10.0}, "c2")
    engine, _ = make_engine([[SMALL, other], "One refunded, one not."])
    async with client(engine) as http:
        proposed = await propose(http, "refund orders 40001 and 40003")
        session_id = proposed["session_id"]
        first, second = (
            approval(shown, call) for shown, call in zip(proposed["pending"], (SMALL, other), strict=True)
        )
        assert proposed["pending"] == [first, second]
        assert proposed["message"] == (
            "Waiting for approval: Refund $25.50 on order 40001 (the customer must approve)\n"
            "Waiting for approval: Refund $10.00 on order 40003 (the customer must approve)"
        )
        path = f"/v1/sessions/{session_id}/approvals"

        decided = await http.post(f"{path}/{first['id']}", json={"decision": "approve"}, headers=CUSTOMER)
        assert decided.status_code == 200, decided.text
        assert decided.json()["pending"] == [second]  # the response still waits: nothing ran
        assert Refunds.ledger == []

        decided = await http.post(
            f"{path}/{second['id']}", json={"decision": "deny", "reason": "too small"}, headers=CUSTOMER
        )
        assert decided.status_code == 200, decided.text
        assert (decided.json()["message"], decided.json()["pending"]) == ("One refunded, one not.", [])
        assert Refunds.ledger == [(first["id"], 40001, 25.5)]
        listed = (await http.get(path, headers=CUSTOMER)).json()
        assert [(a["id"], a["status"], a["reason"]) for a in listed] == [
            (first["id"], "approved", None),
            (second["id"], "denied", "too small"),
        ]


class LoadingScript(ScriptedModel):
    """A scripted model behind a load the test steps through (see ``support.LoadingDesk``)."""

    def __init__(self, script: list[Any]) -> None:
        super().__init__(script)
        self.tracker = WatchedTracker(DOWNLOADING)

    @property
    def load_status(self) -> LoadTracker:
        return self.tracker

    async def prepare(self, warm: Warm | None = None, *, cache_name: str | None = None) -> LoadStatus:
        return self.tracker.status


async def decide_while_loading(engine: FlowEngine, model: LoadingScript, path: str) -> httpx.Response:
    """A streamed decision (by the customer) sent while ``model`` downloads; the load ends once the
    decision waits for it."""
    async with client(engine) as http:
        decision = asyncio.create_task(
            http.post(path, json={"decision": "approve", "stream": True}, headers=CUSTOMER)
        )
        assert await asyncio.to_thread(model.tracker.watched.wait, 10)
        model.tracker.report(Phase.READY)
        return await asyncio.wait_for(decision, 10)


async def test_a_decision_streamed_while_the_model_loads_shows_the_load_then_the_turn() -> None:
    store = MemoryStore()
    proposer = FlowEngine([RefundFlow], store=store, model=ScriptedModel([[SMALL], [BIG]]), clock=clock)
    customer = Caller(principal="cust-1")
    first = await proposer.run("refunds", "refund order 40001", caller=customer)
    second = await proposer.run("refunds", "refund order 40002", caller=customer)
    assert first.session_id and second.session_id
    (small,), (big,) = first.pending, second.pending

    # The same flow, served by a process whose model is still downloading.
    model = LoadingScript(["Your refund is on its way."])
    engine = FlowEngine([RefundFlow], store=store, model=model, clock=clock)
    streamed = await decide_while_loading(
        engine, model, f"/v1/sessions/{first.session_id}/approvals/{small.id}"
    )
    assert streamed.status_code == 200
    events = events_of(streamed.text)
    assert [name for name, _ in events] == [
        "status",
        "approval_decided",
        "tool_call",
        "tool_result",
        "text",
        "result",
    ]
    assert events[0][1] == DOWNLOADING_BODY
    assert events[-1][1]["message"] == "Your refund is on its way."
    assert Refunds.ledger == [(small.id, 40001, 25.5)]

    # The stream opened to show the load: a refusal can then only be its error event.
    model = LoadingScript([])
    engine = FlowEngine([RefundFlow], store=store, model=model, clock=clock)
    refused_late = await decide_while_loading(
        engine, model, f"/v1/sessions/{second.session_id}/approvals/{big.id}"
    )
    assert refused_late.status_code == 200
    assert events_of(refused_late.text) == [
        ("status", DOWNLOADING_BODY),
        (
            "error",
            {
                "status": 403,
                **refused(
                    "approval_not_allowed",
                    f"approval {big.id} needs someone with the 'staff' role",
                    second.session_id,
                ),
            },
        ),
    ]
    assert Refunds.ledger == [(small.id, 40001, 25.5)]
