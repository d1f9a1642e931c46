"""Serve flows over HTTP: PicoFlow-compatible routes, the ``/v1`` API with event streams, and a chat page.

    from picoflow.server import ServerSettings, create_app

    app = create_app(engine, settings=ServerSettings(api_keys={"secret": "alice"}))

Run it with any ASGI server (``uvicorn``), or use ``picoflow serve``.
"""

from typing import TYPE_CHECKING, Any

from picoflow.server.auth import Identity, UnsafeBind, load_api_keys

if TYPE_CHECKING:
    from picoflow.server.app import create_app
    from picoflow.server.schemas import ServerSettings

__all__ = ["Identity", "ServerSettings", "UnsafeBind", "create_app", "load_api_keys"]


def __getattr__(name: str) -> Any:
    # The application needs FastAPI (picoflow-ai[server]); authentication alone does not, so the MCP
    # server (picoflow-ai[mcp]) can use picoflow.server.auth without it.
    if name == "create_app":
        from picoflow.server.app import create_app

        return create_app
    if name == "ServerSettings":
        from picoflow.server.schemas import ServerSettings

        return ServerSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
