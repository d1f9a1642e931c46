"""The embedded offline model: Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) on llama.cpp, via ``xllamacpp``.

It is the default when no provider is configured, so a fresh machine runs picoflow with no API key.
llama.cpp runs in a child process (``xllamacpp.Server`` there, spoken to over 127.0.0.1); one engine
is loaded per process and shared by every ``LocalModel``. Its calls block, so they run in a thread.
Tool calling goes through the schema-constrained JSON protocol of ``_protocol``.

Loading reports its phases into a ``LoadTracker`` (``LocalModel.load_status``), and
``LocalModel.prepare`` loads the model and reads a flow's first prompt before anyone waits for it,
keeping what it read on disk so that a restart does not read it again (``_prompt_cache``).
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from picoflow.exceptions import ModelError
from picoflow.messages import ModelRequest, ModelResponse, ToolCall
from picoflow.models._specs import LOCAL_MODEL_NAME
from picoflow.models.base import Model, ResponseDone, StreamEvent, TextDelta, ToolCallDelta
from picoflow.models.local._process import LlamaProcess, LlamaProcessError
from picoflow.models.local._prompt_cache import PromptCache, build_key, cache_folder
from picoflow.models.local._protocol import ReplyStream, answer_schema, chat_messages, parse_answer
from picoflow.models.local._weights import MODEL_SHA256, LocalModelUnavailable, ensure_model_file, model_dir
from picoflow.models.readiness import LoadStatus, LoadTracker, Phase, Warm
from picoflow.usage import Usage

if TYPE_CHECKING:
    from picoflow.models.catalog import ModelSelection

logger = logging.getLogger("picoflow.models")
T = TypeVar("T")

DEFAULT_CONTEXT = 8192
DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 0.2
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "seed": "seed"}
_WORTH_SAVING = 32
"""Prompt tokens a warm-up must have read anew before its slot is saved again (a few are always new)."""
_WARMING: ContextVar[LoadTracker | None] = ContextVar("picoflow_local_warming", default=None)
"""While ``LocalModel.prepare`` warms a flow: the load its requests report their prompt's reading to."""


def choose_threads(load: float | None = None, cpus: int | None = None) -> int:
    """1 thread when the machine is busy, else 2, so the model never starves its host.

    Two llama.cpp threads only pay off with two idle cores: they meet at a barrier after every
    layer, so when another process takes one core, generation slows to a crawl (measured on 2 CPUs:
    ~14 tokens/s idle, ~1.5 under contention, against ~9 with one thread). "Busy" is therefore
    a 1-minute load average leaving less than about 1.5 cores free.
    """
    override = os.environ.get("PICOFLOW_LOCAL_THREADS", "").strip()
    if override.isdigit() and int(override) > 0:
        return int(override)
    cpus = cpus or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = 0.0
    return 1 if cpus < 2 or load >= cpus - 1.5 else 2


def batch_threads(threads: int, cpus: int | None = None) -> int:
    """Threads for reading the prompt: at least 2 on a multi-core machine, even when it is busy.

    Prompt processing multiplies whole matrices between barriers, so a second thread pays off
    where it would stall token-by-token generation (measured on 2 busy CPUs: 41 against 28 prompt
    tokens/s, and 19 against 16 with a CPU hog beside it). Long prompts dominate a turn's time.
    """
    cpus = cpus or os.cpu_count() or 1
    return max(threads, min(2, cpus))


class LocalEngine:
    """One loaded llama.cpp model, in a child process (``_process``). Thread-safe: requests
    queue inside llama.cpp."""

    def __init__(self, path: Path, *, n_ctx: int, threads: int) -> None:
        if importlib.util.find_spec("xllamacpp") is None:
            raise LocalModelUnavailable(
                "the local model needs llama.cpp bindings: pip install 'picoflow-ai[local]'"
            )
        folder = cache_folder(path.parent)
        settings = {
            "path": str(path),
            "n_ctx": n_ctx,
            "threads": threads,
            "batch_threads": batch_threads(threads),
            # llama.cpp joins this path and a file name without a separator.
            "slot_save_path": f"{folder}{os.sep}",
            "verbose": bool(os.environ.get("PICOFLOW_LOCAL_VERBOSE")),
        }
        try:
            self.process = LlamaProcess(settings)
        except LlamaProcessError as error:
            raise LocalModelUnavailable(str(error)) from error
        self.path = path
        self.n_ctx = n_ctx
        self.threads = threads
        self.prompt_cache = PromptCache(
            self.process.post, folder, build_key(MODEL_SHA256, n_ctx, self.process.version)
        )

    @property
    def alive(self) -> bool:
        """Whether llama.cpp's process still runs (it may have crashed or been killed)."""
        return self.process.process.poll() is None

    def close(self) -> None:
        """Stop llama.cpp's process (it also stops by itself when this process exits)."""
        self.process.close()

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return _checked(self._post("/v1/chat/completions", payload))

    def chat_stream(self, payload: dict[str, Any], on_chunk: Any) -> None:
        """Stream ``payload``; ``on_chunk(chunk) -> bool`` returns True to stop generating."""
        streaming = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        try:
            with self.process.stream("/v1/chat/completions", streaming) as chunks:
                for chunk in chunks:
                    if on_chunk(chunk):
                        return
        except LlamaProcessError as error:
            raise ModelError(f"the local model is not running: {error}") from error

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.process.post(path, body)
        except LlamaProcessError as error:
            raise ModelError(f"the local model is not running: {error}") from error


def _checked(result: Any) -> dict[str, Any]:
    if isinstance(result, dict) and "choices" in result:
        return result
    error = result.get("error", result) if isinstance(result, dict) else {"message": str(result)}
    message = error.get("message", "unknown error") if isinstance(error, dict) else str(error)
    raise ModelError(f"the local model refused the request: {message}")


_engines: dict[tuple[str, int], LocalEngine] = {}
_engines_lock = threading.Lock()
_trackers: dict[tuple[str, int], LoadTracker] = {}
_trackers_lock = threading.Lock()


def tracker_for(directory: Path | None = None, n_ctx: int = DEFAULT_CONTEXT) -> LoadTracker:
    """The load status of the process-wide engine of ``directory`` and ``n_ctx``."""
    key = (str(directory or model_dir()), n_ctx)
    with _trackers_lock:
        return _trackers.setdefault(key, LoadTracker())


def load_engine(
    directory: Path | None = None,
    *,
    n_ctx: int = DEFAULT_CONTEXT,
    threads: int | None = None,
    then: Phase = Phase.READY,
) -> LocalEngine:
    """The process-wide engine: the model is fetched, verified and loaded on first use only.

    The phases go to ``tracker_for(directory, n_ctx)``; once loaded it says ``then`` (``warming``
    when the caller goes on to read a prompt, so readiness is not announced too early).
    """
    folder = directory or model_dir()
    key = (str(folder), n_ctx)
    status = tracker_for(folder, n_ctx)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is not None and not engine.alive:
            logger.warning("picoflow: llama.cpp's process had stopped; loading the model again")
            engine.close()  # reaps the exited process
            engine = None
        if engine is None:
            try:
                verified = ensure_model_file(folder, status=status)
                status.report(Phase.LOADING)
                engine = LocalEngine(verified, n_ctx=n_ctx, threads=threads or choose_threads())
            except LocalModelUnavailable as exc:
                status.report(Phase.FAILED, reason=str(exc))
                raise
            except Exception as exc:
                logger.exception("picoflow: llama.cpp could not load the offline model")
                status.report(Phase.FAILED, reason=f"llama.cpp could not load it ({type(exc).__name__})")
                raise
            if not _engines:
                atexit.register(_close_engines)
            _engines[key] = engine
            status.report(then)
        return engine


def _close_engines() -> None:
    """At exit, stop every llama.cpp process this one started and reap it (it would stop on its
    own once this process is gone, but an unreaped child is a leak to the interpreter)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.close()


async def _in_daemon_thread(work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread: unlike ``asyncio.to_thread``, a server stopped in the middle
    of a 1 GB download or a minute-long prompt exits at once instead of waiting for it."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if result.done():
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        try:
            value, error = work(), None
        except BaseException as exc:
            value, error = None, exc
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="picoflow-local-model", daemon=True).start()
    return await result


def _usage(raw: Mapping[str, Any] | None) -> Usage:
    usage = Usage(model_calls=1)
    if raw:
        usage.input_tokens = int(raw.get("prompt_tokens") or 0)
        usage.output_tokens = int(raw.get("completion_tokens") or 0)
        usage.cached_input_tokens = int((raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return usage


class LocalModel(Model):
    """The embedded offline model. Instances are cheap; the loaded engine is shared per process."""

    reads_images = False  # no vision: PDFs and text files reach it as text, images are refused
    grounding = "small"  # a 1.5B model: its readings get every grounding rule and the rescues

    def __init__(
        self, *, params: Mapping[str, Any] | None = None, model_dir: str | Path | None = None
    ) -> None:
        """
        Args:
            params: ``local`` parameters (temperature, max_tokens, n_ctx, threads, ...).
            model_dir: Folder of the model file (default: ``PICOFLOW_MODEL_DIR``, else the user cache).
        """
        self.name = f"local:{LOCAL_MODEL_NAME}"
        self.params = dict(params or {})
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.last_timings: dict[str, float] = {}
        """llama.cpp's timing figures of the last answer (tokens/s of prompt and generation)."""

    @property
    def load_status(self) -> LoadTracker:
        """How far loading the engine this model uses has got (shared by every model of the engine)."""
        return tracker_for(self.model_dir, self._n_ctx)

    @property
    def _n_ctx(self) -> int:
        return int(self.params.get("n_ctx") or DEFAULT_CONTEXT)

    @classmethod
    def from_selection(cls, selection: ModelSelection) -> LocalModel:
        from picoflow.models.catalog import resolve

        _, params = resolve(selection)
        return cls(params=params)

    def __repr__(self) -> str:
        return f"LocalModel({self.name!r})"

    def _settings(self, request: ModelRequest) -> dict[str, Any]:
        return {**self.params, **request.settings}

    async def engine(self) -> LocalEngine:
        """The loaded engine; the first call downloads, verifies and loads the model (progress on stderr)."""
        return await _in_daemon_thread(
            lambda: load_engine(self.model_dir, n_ctx=self._n_ctx, threads=self.params.get("threads"))
        )

    async def prepare(self, warm: Warm | None = None, *, cache_name: str | None = None) -> LoadStatus:
        """Load the model now, then run ``warm`` (a flow's first request); the final status.

        With ``cache_name``, what ``warm`` made llama.cpp read is restored from the last start
        before and saved after, so only a prompt that changed is read again.
        """
        status = self.load_status
        try:
            engine = await _in_daemon_thread(
                lambda: load_engine(
                    self.model_dir,
                    n_ctx=self._n_ctx,
                    threads=self.params.get("threads"),
                    then=Phase.READY if warm is None else Phase.WARMING,
                )
            )
        except Exception:
            return status.status  # load_engine reported why
        if warm is None:
            return status.status
        status.report(Phase.WARMING)
        restored = cache_name is not None and await _in_daemon_thread(
            lambda: engine.prompt_cache.restore(cache_name)
        )
        self.last_timings = {}
        # The prompt it reads is the longest wait of a start (a minute or two on a small CPU):
        # its progress is the load's, in tokens read.
        reporting = _WARMING.set(status)
        try:
            await warm()
        except Exception:  # warming only saves time later; the model itself is ready
            logger.warning("picoflow: warming the offline model failed", exc_info=True)
        finally:
            _WARMING.reset(reporting)
        read = int(self.last_timings.get("prompt_n") or 0)
        if cache_name is not None and (not restored or read > _WORTH_SAVING):
            await _in_daemon_thread(lambda: engine.prompt_cache.save(cache_name))
        status.report(Phase.READY)
        return status.status

    def build_payload(self, request: ModelRequest) -> dict[str, Any]:
        """The OpenAI-style chat request handed to llama.cpp."""
        settings = self._settings(request)
        parallel = settings.get("parallel_tool_calls", True) is not False
        payload: dict[str, Any] = {
            "messages": chat_messages(request, parallel=parallel),
            "max_tokens": int(settings.get("max_tokens") or DEFAULT_MAX_TOKENS),
            "temperature": DEFAULT_TEMPERATURE,
        }
        for key, wire in _SAMPLING.items():
            if settings.get(key) is not None:
                payload[wire] = settings[key]
        if settings.get("repeat_penalty") is not None:
            payload["repeat_penalty"] = settings["repeat_penalty"]
        schema = answer_schema(request.tools, request.output, parallel=parallel)
        if schema is not None:
            # A reading or a tool call has one right answer; sampling only adds misreadings
            # ("8" read as "show the list" one time in five). Free text keeps its temperature.
            if settings.get("temperature") is None:
                payload["temperature"] = 0.0
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema},
            }
        return payload

    def _response(self, request: ModelRequest, text: str, usage: Usage, finish: str | None) -> ModelResponse:
        constrained = bool(request.tools) or request.output is not None
        if not constrained:
            return ModelResponse(text, [], usage, finish, self.name)
        names = {tool.name for tool in request.tools}
        reply, calls = parse_answer(text, tool_names=names, structured=request.output is not None)
        tool_calls = [ToolCall(name, args, f"call_{uuid.uuid4().hex[:12]}") for name, args in calls]
        return ModelResponse(reply, tool_calls, usage, "tool_calls" if tool_calls else finish, self.name)

    async def request(self, request: ModelRequest) -> ModelResponse:
        warming = _WARMING.get()
        if warming is not None:  # streamed, for the progress of reading its prompt
            async for event in self._stream(request, warming):
                if isinstance(event, ResponseDone):
                    return event.response
        engine = await self.engine()
        payload = self.build_payload(request)
        result = await _in_daemon_thread(lambda: engine.chat(payload))
        self.last_timings = dict(result.get("timings") or {})
        choice = result["choices"][0]
        text = (choice.get("message") or {}).get("content") or ""
        return self._response(request, text, _usage(result.get("usage")), choice.get("finish_reason"))

    def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        return self._stream(request)

    async def _stream(
        self, request: ModelRequest, reading: LoadTracker | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The answer to ``request`` as it is generated; with ``reading``, the prompt's progress
        reported into it as a warm-up's (``warming``, tokens read of the prompt's)."""
        engine = await self.engine()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        stop = threading.Event()
        payload = self.build_payload(request)
        if reading is not None:
            payload["return_progress"] = True

        def on_chunk(chunk: Any) -> bool:
            progress = chunk.get("prompt_progress") if isinstance(chunk, dict) and reading else None
            if reading is not None and isinstance(progress, dict):
                reading.report(
                    Phase.WARMING,
                    done=int(progress.get("processed") or 0),
                    total=int(progress.get("total") or 0) or None,
                )
            loop.call_soon_threadsafe(
                queue.put_nowait, chunk if isinstance(chunk, dict) else {"error": chunk}
            )
            return stop.is_set()

        def produce() -> None:
            try:
                engine.chat_stream(payload, on_chunk)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        worker = asyncio.ensure_future(_in_daemon_thread(produce))
        constrained = bool(request.tools) or request.output is not None
        reply = ReplyStream()
        parts: list[str] = []
        usage, finish = Usage(model_calls=1), None
        try:
            while (chunk := await queue.get()) is not None:
                if "choices" not in chunk:
                    _checked(chunk)
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                    self.last_timings = dict(chunk.get("timings") or {})
                for choice in chunk["choices"][:1]:
                    piece = (choice.get("delta") or {}).get("content") or ""
                    finish = choice.get("finish_reason") or finish
                    parts.append(piece)
                    visible = reply.feed(piece) if constrained else piece
                    if visible:
                        yield TextDelta(visible)
        finally:
            stop.set()
            await worker
        response = self._response(request, "".join(parts), usage, finish)
        for index, call in enumerate(response.tool_calls):
            yield ToolCallDelta(index, call.id, call.name, call.args_json())
        yield ResponseDone(response)


def fetch_model(directory: Path | None = None) -> Path:
    """Download, join and verify the model file now (e.g. while building an image); returns its path."""
    return ensure_model_file(directory)
