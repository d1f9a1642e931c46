"""The ``picoflow`` command: serve flows, chat in the terminal, inspect flows and sessions.

Flows default to the bundled demos (``picoflow_demos.FLOWS``); ``--flows module:Class,...`` or
``PICOFLOW_FLOWS`` serves your own. The store comes from ``--store``/``PICOFLOW_STORE`` (a SQLite
file in the working folder by default) and the model from ``--model``/``PICOFLOW_MODEL`` (by
default each flow's own, else an API key's provider, else the embedded local model).
``--model scripted:replies.json`` plays a fixed script, for demos and tests without a model.

The command is an edge: each module translates its options into ``FlowEngine`` calls and the
results into terminal output, nothing more.
"""

from picoflow.cli.app import app, main
from picoflow.cli.loading import console

__all__ = ["app", "console", "main"]
