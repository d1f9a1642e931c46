"""Serve flows over HTTP: PicoFlow-compatible routes, the ``/v1`` API with event streams, and a chat page.

    from picoflow.server import ServerSettings, create_app

    app = create_app(engine, settings=ServerSettings(api_keys={"secret": "alice"}))

Run it with any ASGI server (``uvicorn``), or use ``picoflow serve``.
"""

from picoflow.server.app import create_app
from picoflow.server.auth import Identity, UnsafeBind, load_api_keys
from picoflow.server.schemas import ServerSettings

__all__ = ["Identity", "ServerSettings", "UnsafeBind", "create_app", "load_api_keys"]
