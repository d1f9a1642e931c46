"""The embedded offline model (``local``): llama.cpp in a child process, behind the ``Model`` seam.

``_model`` is ``LocalModel`` and the engine it shares per process; ``_process`` the child process
that holds llama.cpp; ``_protocol`` the schema-constrained JSON it answers in; ``_weights`` the
model file (downloaded once, verified, cached); ``_prompt_cache`` the processed prompts kept on disk.

``python -m picoflow.models.local`` fetches the weights ahead of time.
"""

from picoflow.models.local._model import (
    DEFAULT_CONTEXT,
    DEFAULT_MAX_TOKENS,
    LocalEngine,
    LocalModel,
    batch_threads,
    choose_threads,
    fetch_model,
    load_engine,
    tracker_for,
)
from picoflow.models.local._weights import LocalModelUnavailable

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_MAX_TOKENS",
    "LocalEngine",
    "LocalModel",
    "LocalModelUnavailable",
    "batch_threads",
    "choose_threads",
    "fetch_model",
    "load_engine",
    "tracker_for",
]
