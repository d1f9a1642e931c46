"""Recording an eval's model answers, and playing a run again from them with no model at all.

``picoflow eval --record FILE`` keeps every answer the models gave (the flow's, the simulated
user's, the judge's), each under a key: a SHA-256 of what decides the answer (who asked: ``flow``,
``user`` or ``judge``; the step; the system prompt; the messages with their tool calls and results;
the tools offered with their schemas; the output schema), and an occurrence number for a request
asked again in the same run. ``--replay FILE`` answers each request from the recording: the same
run plays the same way, every time, offline.

A request the recording does not hold is a divergence: the flow (its prompt, its tools, its code)
no longer asks what it asked when the recording was made. The run stops there, with a failed
``replay`` check naming the turn, the step and what differs from the request recorded at the same
place (the system prompt, a message, the tools...): each recorded request keeps a hash of each of
its parts for that.

The file is JSON, one entry per answer in the order the eval played them, each saying the scenario,
the run and the turn it came from::

    {"picoflow_recording": 1,
     "models": {"flow": {"name": "local:...", "grounding": "small", ...}, "user": {...}},
     "entries": [{"scenario": "refund-small", "run": 1, "turn": 1, "position": 1, "role": "user",
                  "step": null, "key": "9f2c...", "occurrence": 1,
                  "request": {"system": "1a2b...", "messages": ["..."], "tools": {}, "output": "...",
                              "last": "user: [The conversation begins...]"},
                  "response": {"text": "...", "tool_calls": [], ...}}]}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from picoflow.evals.checks import Check
from picoflow.exceptions import ModelError
from picoflow.messages import Message, ModelRequest, ModelResponse, ResponseWarning, ToolCall
from picoflow.models.base import Model, ResponseDone, StreamEvent
from picoflow.request_diff import describe_difference
from picoflow.usage import Usage

__all__ = ["Divergence", "Recorder", "Recording", "ReplayDiverged", "Replayer", "Role", "request_key"]

#: Who asked: the flow's steps, the simulated user, or the judge.
Role = Literal["flow", "user", "judge"]

FORMAT = 1
#: Characters of a request's last message kept in the file, so a person can tell entries apart.
PREVIEW = 160
_MODEL_FIELDS = ("name", "grounding", "context_window", "output_reserve", "reads_images", "time_limit")


class ReplayDiverged(ModelError):
    """A request the recording does not hold: the run no longer plays as it was recorded."""

    kind = "replay_diverged"


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first request of a run the recording did not hold, and what differs."""

    scenario: str
    run: int
    turn: int
    role: Role
    step: str | None
    differs: str
    """What changed, compared with the request recorded at the same place ("the system prompt")."""

    def describe(self) -> str:
        where = f"step {self.step}" if self.step else "the simulated user" if self.role == "user" else "judge"
        return (
            f"diverged at turn {self.turn} ({where}): the request differs from the recording ({self.differs})"
        )

    def check(self) -> Check:
        return Check("replay", "failed", "the recorded request", self.differs, self.describe())


@dataclass(frozen=True, slots=True)
class _Parts:
    """A request's parts, each hashed: enough to say which one changed."""

    role: str
    step: str | None
    system: str
    messages: tuple[str, ...]
    tools: Mapping[str, str]
    output: str | None
    last: str

    def as_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "messages": list(self.messages),
            "tools": dict(self.tools),
            "output": self.output,
            "last": self.last,
        }


@dataclass(slots=True)
class _Entry:
    scenario: str
    run: int
    turn: int
    position: int
    key: str
    occurrence: int
    parts: _Parts
    response: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "run": self.run,
            "turn": self.turn,
            "position": self.position,
            "role": self.parts.role,
            "step": self.parts.step,
            "key": self.key,
            "occurrence": self.occurrence,
            "request": self.parts.as_json(),
            "response": self.response,
        }


def request_key(role: Role, request: ModelRequest) -> str:
    """The SHA-256 of what decides the answer to ``request`` when ``role`` asks it (canonical JSON:
    sorted keys, no spaces). Left out: the session's id, times, sequence numbers and settings."""
    return _digest(_canonical(role, request), full=True)


def _canonical(role: Role, request: ModelRequest) -> dict[str, Any]:
    return {
        "role": role,
        "step": request.step,
        "system": request.system,
        "messages": [_message_json(message) for message in request.messages],
        "tools": [_tool_json(tool) for tool in request.tools],
        "output": _output_json(request),
    }


def _parts(role: Role, request: ModelRequest) -> _Parts:
    last = request.messages[-1] if request.messages else None
    preview = f"{last.role}: {last.content}" if last is not None else ""
    return _Parts(
        role,
        request.step,
        _digest(request.system),
        tuple(_digest(_message_json(message)) for message in request.messages),
        {tool.name: _digest(_tool_json(tool)) for tool in request.tools},
        _digest(_output_json(request)) if request.output is not None else None,
        preview if len(preview) <= PREVIEW else preview[: PREVIEW - 1] + "…",
    )


def _message_json(message: Message) -> dict[str, Any]:
    return {
        "role": message.role,
        "content": message.content,
        "kind": message.kind,
        "tool_calls": [{"id": c.id, "name": c.name, "args": c.args} for c in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "is_error": message.is_error,
        "attachments": [ref.sha256 for ref in message.attachments],
    }


def _tool_json(tool: Any) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": tool.strict,
    }


def _output_json(request: ModelRequest) -> dict[str, Any] | None:
    output = request.output
    if output is None:
        return None
    return {
        "name": output.name,
        "schema": output.schema,
        "description": output.description,
        "strict": output.strict,
    }


def _digest(value: Any, *, full: bool = False) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return digest if full else digest[:16]


def _response_json(response: ModelResponse) -> dict[str, Any]:
    """The answer as JSON, fields left at their defaults left out (the file stays readable)."""
    usage = {name: count for name, count in response.usage.as_dict().items() if count}
    usage.pop("total_tokens", None)
    data: dict[str, Any] = {
        "text": response.text,
        "tool_calls": [{"id": c.id, "name": c.name, "args": c.args} for c in response.tool_calls],
        "usage": usage,
        "finish_reason": response.finish_reason,
        "model": response.model,
        "answered_by": response.answered_by,
        "reasoning": response.reasoning,
        "warnings": [{"code": w.code, "message": w.message} for w in response.warnings],
    }
    return {key: value for key, value in data.items() if key == "text" or value}


def _response_of(data: Mapping[str, Any]) -> ModelResponse:
    return ModelResponse(
        text=data.get("text", ""),
        tool_calls=[ToolCall(c["name"], c["args"], c["id"]) for c in data.get("tool_calls", [])],
        usage=Usage(**data.get("usage", {})),
        finish_reason=data.get("finish_reason"),
        model=data.get("model"),
        reasoning=[dict(block) for block in data.get("reasoning", [])],
        warnings=[ResponseWarning(w["code"], w["message"]) for w in data.get("warnings", [])],
        answered_by=data.get("answered_by"),
    )


@dataclass(slots=True)
class _Where:
    scenario: str = ""
    run: int = 0
    turn: int = 0
    position: int = 0


@dataclass(slots=True)
class Recording:
    """Every model answer of an eval, keyed by its request, with the scenario, run and turn each came
    from. The eval says where it is (``at``); ``recorder`` wraps a model to add to the recording,
    ``replayer`` answers from it."""

    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each role's model was (name, grounding, context window...): a replayer plays it."""
    entries: list[_Entry] = field(default_factory=list)
    divergence: Divergence | None = None
    """The first request of the run being replayed that the recording did not hold."""
    source: str = "<recording>"
    _where: _Where = field(default_factory=_Where, init=False, repr=False)
    _seen: dict[tuple[str, int, str], int] = field(default_factory=dict, init=False, repr=False)
    _index: dict[tuple[str, int, str], list[_Entry]] | None = field(default=None, init=False, repr=False)

    @staticmethod
    def load(path: str | Path) -> Recording:
        """The recording in ``path``; ``ValueError`` naming the file when it is not one."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read the recording: {exc}") from None
        if not isinstance(data, dict) or data.get("picoflow_recording") != FORMAT:
            raise ValueError(f"{path}: not a picoflow recording (made by picoflow eval --record)")
        try:
            entries = [
                _Entry(
                    item["scenario"],
                    item["run"],
                    item["turn"],
                    item["position"],
                    item["key"],
                    item["occurrence"],
                    _Parts(
                        item["role"],
                        item["step"],
                        item["request"]["system"],
                        tuple(item["request"]["messages"]),
                        dict(item["request"]["tools"]),
                        item["request"]["output"],
                        item["request"].get("last", ""),
                    ),
                    item["response"],
                )
                for item in data["entries"]
            ]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: a recording entry lacks {exc}") from None
        return Recording(dict(data.get("models", {})), entries, source=str(path))

    def save(self, path: str | Path) -> None:
        """Write the recording as JSON, entries in the order played (by scenario, run, turn, position)."""
        order = {name: index for index, name in enumerate(dict.fromkeys(e.scenario for e in self.entries))}
        entries = sorted(self.entries, key=lambda e: (order[e.scenario], e.run, e.turn, e.position))
        document = {
            "picoflow_recording": FORMAT,
            "models": self.models,
            "entries": [entry.as_json() for entry in entries],
        }
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(document, indent=1, ensure_ascii=False, default=str)
        target.write_text(text + "\n", encoding="utf-8")

    def at(self, scenario: str, run: int, turn: int) -> None:
        """Where the eval is: the answers asked from now on belong to this turn."""
        if (scenario, run) != (self._where.scenario, self._where.run):
            self.divergence = None
        if (scenario, run, turn) != (self._where.scenario, self._where.run, self._where.turn):
            self._where = _Where(scenario, run, turn, 0)

    def recorder(self, model: Model, role: Role) -> Recorder:
        self.models[role] = {name: getattr(model, name) for name in _MODEL_FIELDS}
        return Recorder(model, role, self)

    def replayer(self, role: Role) -> Replayer:
        """A model answering ``role``'s requests from the recording; ``ValueError`` when it holds none."""
        if role not in self.models:
            raise ValueError(f"{self.source}: the recording holds no answers of the {role} model")
        return Replayer(role, self)

    def has(self, role: Role) -> bool:
        return role in self.models

    def _next(self, role: Role, request: ModelRequest) -> tuple[_Where, str, int, _Parts]:
        """Where the request is asked, its key, and how often that key was asked before in the run."""
        self._where.position += 1
        where = _Where(self._where.scenario, self._where.run, self._where.turn, self._where.position)
        key = request_key(role, request)
        seen = (where.scenario, where.run, key)
        self._seen[seen] = self._seen.get(seen, 0) + 1
        return where, key, self._seen[seen], _parts(role, request)

    def _add(self, where: _Where, key: str, occurrence: int, parts: _Parts, response: ModelResponse) -> None:
        self.entries.append(
            _Entry(
                where.scenario,
                where.run,
                where.turn,
                where.position,
                key,
                occurrence,
                parts,
                _response_json(response),
            )
        )

    def _answer(self, role: Role, request: ModelRequest) -> ModelResponse:
        where, key, occurrence, parts = self._next(role, request)
        if self._index is None:
            self._index = {}
            for entry in self.entries:
                self._index.setdefault((entry.scenario, entry.run, entry.key), []).append(entry)
            for found in self._index.values():
                found.sort(key=lambda entry: entry.occurrence)
        found = self._index.get((where.scenario, where.run, key), [])
        if occurrence <= len(found):
            return _response_of(found[occurrence - 1].response)
        if found:
            differs = f"asked {occurrence} times where the recording asked {len(found)}"
        else:
            differs = self._differs(where, parts)
        divergence = Divergence(where.scenario, where.run, where.turn, role, request.step, differs)
        if self.divergence is None:
            self.divergence = divergence
        raise ReplayDiverged(divergence.describe(), step=request.step)

    def _differs(self, where: _Where, parts: _Parts) -> str:
        """What differs from the request recorded at the same place of the same run."""
        runs = [e for e in self.entries if (e.scenario, e.run) == (where.scenario, where.run)]
        if not runs:
            return f"the recording holds no run {where.run} of scenario {where.scenario}"
        same = [e for e in runs if (e.turn, e.position) == (where.turn, where.position)]
        if not same:
            return "the recording asked no more at this point of the turn"
        return describe_difference(same[0].parts, parts)

    def divergence_check(self) -> Check | None:
        """The failed ``replay`` check of the run being played, once it diverged."""
        return self.divergence.check() if self.divergence is not None else None


class _Passed(Model):
    """A wrapper that shows its model's name, window, grounding... as its own."""

    def _take_after(self, info: Mapping[str, Any]) -> None:
        self.name = str(info.get("name", self.name))
        self.grounding = str(info.get("grounding", self.grounding))
        self.context_window = info.get("context_window")
        self.output_reserve = int(info.get("output_reserve") or 0)
        self.reads_images = bool(info.get("reads_images", True))
        self.time_limit = info.get("time_limit")


class Recorder(_Passed):
    """Passes every request to ``inner`` and adds its answer to ``recording``, under ``role``."""

    def __init__(self, inner: Model, role: Role, recording: Recording) -> None:
        self.inner, self.role, self.recording = inner, role, recording
        self._take_after({name: getattr(inner, name) for name in _MODEL_FIELDS})

    async def request(self, request: ModelRequest) -> ModelResponse:
        where, key, occurrence, parts = self.recording._next(self.role, request)
        response = await self.inner.request(request)
        self.recording._add(where, key, occurrence, parts, response)
        return response

    async def request_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        where, key, occurrence, parts = self.recording._next(self.role, request)
        async for event in self.inner.request_stream(request):
            if isinstance(event, ResponseDone):
                self.recording._add(where, key, occurrence, parts, event.response)
            yield event

    async def aclose(self) -> None:
        await self.inner.aclose()


class Replayer(_Passed):
    """Answers ``role``'s requests from ``recording``, as the recorded model did; a request it does
    not hold raises ``ReplayDiverged`` (and is noted as the run's divergence)."""

    def __init__(self, role: Role, recording: Recording) -> None:
        self.role, self.recording = role, recording
        self._take_after(recording.models[role])

    async def request(self, request: ModelRequest) -> ModelResponse:
        return self.recording._answer(self.role, request)
