"""``picoflow mcp serve``: the option mistakes that stop it before it serves (the conversations over
stdio and HTTP are in tests/test_mcp_serve.py)."""

from __future__ import annotations

from .support import invoke


def test_mcp_serve_refuses_a_public_bind_without_open_and_bad_options() -> None:
    public = invoke("mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--store", "memory://")
    assert public.exit_code == 2
    assert "refusing to serve MCP on 0.0.0.0 without authentication" in public.output

    assert invoke("mcp", "serve", "--transport", "sse", "--store", "memory://").exit_code == 2
    assert invoke("mcp", "serve", "--port", "70000", "--store", "memory://").exit_code == 2

    nobody = invoke("mcp", "serve", "--principal", " ", "--store", "memory://")
    assert nobody.exit_code == 2 and "--principal must not be empty" in nobody.output
    no_role = invoke("mcp", "serve", "--role", "staff", "--role", " ", "--store", "memory://")
    assert no_role.exit_code == 2 and no_role.output == "error: --role must not be empty\n"

    flows = invoke("mcp", "serve", "--flows", "nowhere:Flow", "--store", "memory://")
    assert flows.exit_code == 1 and "cannot import nowhere" in flows.output


def test_mcp_is_a_command_group() -> None:
    listed = invoke("mcp")
    assert "serve" in listed.output
    helped = invoke("mcp", "serve", "--help")
    assert helped.exit_code == 0 and "--transport" in helped.output and "--principal" in helped.output
    assert "--role" in helped.output
