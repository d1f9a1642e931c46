"""Who may do what: API keys, the ownership boundary between principals, open mode, CORS and hosts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picoflow.server import Identity, ServerSettings, UnsafeBind, create_app, load_api_keys
from picoflow.server.auth import check_bind, is_loopback, parse_api_keys

from .support import client_for, desk_engine

KEYS = ServerSettings(api_keys={"key-a": "alice", "key-b": Identity("bob", frozenset({"staff"}))})
ALICE = {"Authorization": "Bearer key-a"}
BOB = {"X-API-Key": "key-b"}


async def test_keys_are_required_once_configured() -> None:
    async with client_for(desk_engine(), KEYS) as client:
        anonymous = await client.post("/v1/flows/desk/sessions", json={"message": "hi"})
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.json()["error"]["kind"] == "unauthorized"
        wrong = await client.get("/v1/flows", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "nope" not in wrong.text
        basic = await client.get("/v1/flows", headers={"Authorization": "Basic a2V5LWE6"})
        assert basic.status_code == 401
        assert (await client.get("/ai/flows")).status_code == 401
        assert (await client.get("/healthcheck")).status_code == 200
        assert (await client.get("/v1/flows", headers=ALICE)).status_code == 200
        assert (await client.get("/v1/flows", headers=BOB)).status_code == 200


async def test_a_principal_cannot_read_continue_or_end_another_principals_session() -> None:
    engine = desk_engine()
    async with client_for(engine, KEYS) as client:
        created = await client.post("/v1/flows/desk/sessions", json={"message": "hi"}, headers=ALICE)
        session = created.json()["session_id"]
        stored = await engine.store.load(session)
        assert stored is not None and stored.principal == "alice"

        for method, path, body in [
            ("GET", f"/v1/sessions/{session}", None),
            ("GET", f"/v1/sessions/{session}/diagram.svg", None),
            ("POST", f"/v1/sessions/{session}/turns", {"message": "who am i"}),
            ("DELETE", f"/v1/sessions/{session}", None),
        ]:
            reply = await client.request(method, path, json=body, headers=BOB)
            assert reply.status_code == 404, (method, path)
            assert reply.json()["error"]["kind"] == "session_not_found"
        run = await client.post(
            "/ai/run",
            json={"flowName": "desk", "message": "who"},
            headers={**BOB, "CHAT_SESSION_ID": session},
        )
        assert run.status_code == 404
        end = await client.post("/ai/end", headers={**BOB, "CHAT_SESSION_ID": session})
        assert end.status_code == 404
        assert (await client.get("/v1/sessions", headers=BOB)).json() == []

        mine = await client.get(f"/v1/sessions/{session}", headers=ALICE)
        assert mine.status_code == 200 and mine.json()["turns"] == 1
        assert [item["id"] for item in (await client.get("/v1/sessions", headers=ALICE)).json()] == [session]
    after = await engine.store.load(session)
    assert after is not None and after.turns == 1 and after.revision == 1


async def test_identity_fields_in_the_body_are_ignored() -> None:
    async with client_for(desk_engine(), KEYS) as client:
        reply = await client.post(
            "/v1/flows/desk/sessions",
            json={
                "message": "who am i?",
                "principal": "bob",
                "customer_id": "bob",
                "config": {"customer_id": "bob", "principal": "bob", "tone": "warm"},
            },
            headers=ALICE,
        )
        seen = json.loads(reply.json()["message"].removeprefix("tool said: "))
        assert seen == {"config": {"tone": "warm"}, "principal": "alice"}
        compat = await client.post(
            "/ai/run",
            json={
                "flowName": "desk",
                "message": "who",
                "customer_id": "alice",
                "config": {"principal": "alice"},
            },
            headers=BOB,
        )
        assert json.loads(compat.json()["message"].removeprefix("tool said: ")) == {
            "config": {},
            "principal": "bob",
        }


async def test_open_mode_on_loopback_uses_the_local_principal() -> None:
    engine = desk_engine()
    async with client_for(engine) as client:
        reply = await client.post("/v1/flows/desk/sessions", json={"message": "who"})
        assert json.loads(reply.json()["message"].removeprefix("tool said: "))["principal"] == "local"
        # A key that is sent is still checked: no silent downgrade to anonymous.
        assert (await client.get("/v1/flows", headers={"Authorization": "Bearer guess"})).status_code == 401


def test_open_mode_is_refused_off_loopback_unless_explicit() -> None:
    engine = desk_engine()
    with pytest.raises(UnsafeBind, match=r"refusing to serve on 0\.0\.0\.0 without authentication"):
        create_app(engine, settings=ServerSettings(host="0.0.0.0"))
    create_app(engine, settings=ServerSettings(host="0.0.0.0", open_mode=True))
    create_app(engine, settings=ServerSettings(host="0.0.0.0", api_keys={"k": "p"}))


async def test_public_bind_with_keys_requires_them() -> None:
    settings = ServerSettings(host="0.0.0.0", api_keys={"key-a": "alice"})
    async with client_for(desk_engine(), settings) as client:
        assert (await client.get("/v1/flows")).status_code == 401
        assert (await client.get("/v1/flows", headers=ALICE)).status_code == 200


def test_check_bind_decisions() -> None:
    assert check_bind("127.0.0.1", has_keys=False, open_flag=None) is True
    assert check_bind("localhost", has_keys=False, open_flag=None) is True
    assert check_bind("::1", has_keys=False, open_flag=None) is True
    assert check_bind("127.0.0.1", has_keys=True, open_flag=None) is False
    assert check_bind("10.0.0.5", has_keys=True, open_flag=None) is False
    assert check_bind("10.0.0.5", has_keys=False, open_flag=True) is True
    with pytest.raises(UnsafeBind):
        check_bind("192.168.1.4", has_keys=False, open_flag=None)
    assert [is_loopback(h) for h in ("127.0.0.2", "[::1]", "0.0.0.0", "example.com")] == [
        True,
        True,
        False,
        False,
    ]


def test_api_keys_from_the_environment_and_a_file(tmp_path: Path) -> None:
    lines = tmp_path / "keys.txt"
    lines.write_text("# team keys\nk1 = alice\n\nk2=bob  # on call\n", encoding="utf-8")
    assert load_api_keys(
        {"PICOFLOW_API_KEYS_FILE": str(lines), "PICOFLOW_API_KEYS": "k3=carol,k1=alice2"}
    ) == {
        "k1": Identity("alice2"),
        "k2": Identity("bob"),
        "k3": Identity("carol"),
    }
    as_json = tmp_path / "keys.json"
    as_json.write_text(json.dumps({"k1": "alice", "k2": {"principal": "bob", "visibilities": ["staff"]}}))
    assert load_api_keys({"PICOFLOW_API_KEYS_FILE": str(as_json)}) == {
        "k1": Identity("alice"),
        "k2": Identity("bob", frozenset({"staff"})),
    }
    assert load_api_keys({}) == {}
    with pytest.raises(ValueError, match="entry 2 is not of the form key=principal") as error:
        parse_api_keys("ok=alice,s3cret-without-principal")
    assert "s3cret" not in str(error.value)
    with pytest.raises(ValueError, match="cannot read"):
        load_api_keys({"PICOFLOW_API_KEYS_FILE": str(tmp_path / "missing")})


async def test_cors_exposes_the_session_header() -> None:
    async with client_for(desk_engine(), KEYS) as client:
        preflight = await client.options(
            "/ai/run",
            headers={
                "Origin": "https://chat.example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,chat_session_id,authorization",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "*"
        run = await client.post(
            "/ai/run",
            json={"flowName": "desk", "message": "hi"},
            headers={**ALICE, "Origin": "https://chat.example.com"},
        )
        assert run.headers["access-control-allow-origin"] == "*"
        assert "CHAT_SESSION_ID" in run.headers["access-control-expose-headers"]


async def test_open_mode_only_allows_local_origins_and_hosts() -> None:
    async with client_for(desk_engine()) as client:
        local = await client.get("/ai/flows", headers={"Origin": "http://localhost:5173"})
        assert local.headers["access-control-allow-origin"] == "http://localhost:5173"
        assert "CHAT_SESSION_ID" in local.headers["access-control-expose-headers"]
        foreign = await client.get("/ai/flows", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in foreign.headers
        rebound = await client.get("/ai/flows", headers={"Host": "evil.example"})
        assert rebound.status_code == 400
