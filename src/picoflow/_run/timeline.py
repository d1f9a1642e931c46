"""Recording a turn's timeline (``picoflow.timeline``): an observer that keeps what the turn
emits as entries, bounded and cleaned of secrets, and hands the engine one JSON document to store.

The events every observer sees become records the way eval scenarios see them
(``picoflow.events.EventRecords``); what only an inspector needs — the model requests, refused
answers, erasures and state changes — is added here. Entries are plain dicts until the end of
the turn, where each is cleaned once and measured against the turn's byte budget. A turn someone
watches (``on_timeline``) also hands each entry over, cleaned, when it is recorded and when it grows.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json, to_jsonable_python

from picoflow._run.observers import EventStream, TurnObserver
from picoflow.events import EventRecords
from picoflow.session import copy_json
from picoflow.timeline import REDACTED, SECRET, TIMELINE_VERSION, TimelineSettings, TimelineUpdate

if TYPE_CHECKING:
    from picoflow.approvals import Approval
    from picoflow.context import Caller
    from picoflow.messages import Message, ModelRequest, ModelResponse, ToolCall
    from picoflow.results import TurnResult
    from picoflow.session import Session, SessionMigration
    from picoflow.slots.grounding import Verdict

_SECRET_VARIABLE = re.compile(r"(API_KEYS?|_KEY|_TOKEN|_SECRET|_PASSWORD)$")
"""Environment variables whose values are keys: never shown in a timeline."""
_SECRET_FIELD = re.compile(
    r"(?i)(passw(or)?d|passphrase|secret|api[_-]?key|private[_-]?key|token(?!s)|authorization|credential)"
)
"""Field names hidden whatever the application's hook says."""
MIN_SECRET = 4
"""Shorter config values are not looked for: they cannot be keys, and hiding every "de" or "42"
from the texts would make them unreadable."""


def environment_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values of the environment variables that hold keys (provider keys, tokens)."""
    env = os.environ if environ is None else environ
    found: list[str] = []
    for name, value in env.items():
        if not _SECRET_VARIABLE.search(name.upper()):
            continue
        if name.upper().endswith("API_KEYS"):  # picoflow's own: key=principal pairs
            found += [part.split("=", 1)[0].strip() for part in value.replace(",", "\n").splitlines()]
        else:
            found.append(value.strip())
    return tuple(sorted({value for value in found if len(value) >= 8}, key=len, reverse=True))


def _config_strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        if len(value) >= MIN_SECRET:
            yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _config_strings(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _config_strings(item)


class Recording:
    """An engine's timeline setting, with the secrets it hides: makes each turn's recorder."""

    def __init__(self, settings: TimelineSettings) -> None:
        self.settings = settings
        self.secrets = tuple(dict.fromkeys([*settings.secrets, *environment_secrets()]))

    def recorder(
        self,
        caller: Caller | None,
        trigger: str = "message",
        watch: Callable[[TimelineUpdate], None] | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> TimelineRecorder:
        """The recorder of one turn; ``watch`` is handed each entry as it is recorded. ``clock``
        (Unix seconds) dates and times the entries instead of this process's clocks: a durable
        turn's recorder reads the workflow's time, which a replay reads the same."""
        secrets = self.secrets
        if caller is not None and caller.config:
            extra = sorted(set(_config_strings(dict(caller.config))), key=len, reverse=True)
            secrets = tuple(dict.fromkeys([*extra, *secrets]))
        if clock is None:
            log = _Log(self.settings, secrets, trigger)
        else:
            log = _Log(self.settings, secrets, trigger, clock=clock, started=clock(), started_at=clock())
        if watch is not None:
            log.watch = watch
            log.records.shown = log.show
        return TimelineRecorder(log)


class _Timed(EventRecords):
    """The turn's records, each stamped with when it happened (``at_ms``, since the turn began)."""

    __slots__ = ("clock", "shown", "started")

    def __init__(self, started: float, clock: Callable[[], float]) -> None:
        super().__init__(detailed=True)
        self.started = started
        self.clock = clock
        self.shown: Callable[[dict[str, Any]], None] | None = None
        """Called with each record added or completed, when someone watches the turn."""

    def completed(self, record: dict[str, Any]) -> None:
        if self.shown is not None:
            self.shown(record)

    def adopt(self, entries: Sequence[dict[str, Any]], since: float) -> None:
        """Entries recorded elsewhere (the sub-step runs of a tool handler run by a durable
        executor's activity), whose ``at_ms`` count from ``since`` (on this clock)."""
        offset = _ms(since - self.started)
        for entry in entries:
            entry["at_ms"] = round(offset + (entry.get("at_ms") or 0.0), 2)
            self.records.append(entry)
            if self.shown is not None:
                self.shown(entry)

    def add(self, entry: dict[str, Any], parent: str | None, at: float | None = None) -> None:
        """An entry, of an event or the timeline's own, stamped with the time (``at``: on this
        clock, when the caller read it already)."""
        if parent is not None:
            entry["parent"] = parent
        entry["at_ms"] = _ms((self.clock() if at is None else at) - self.started)
        self.records.append(entry)
        if self.shown is not None:
            self.shown(entry)


@dataclass(slots=True)
class _Log:
    """What a turn's recorder and those of its sub-step runs write to."""

    settings: TimelineSettings
    secrets: tuple[str, ...]
    trigger: str
    clock: Callable[[], float] = time.perf_counter
    """What entries are timed by (seconds; only differences are read)."""
    started: float = field(default_factory=time.perf_counter)
    records: _Timed = field(init=False)
    started_at: float = field(default_factory=time.time)
    flow: str = ""
    flow_version: str = ""
    """The version of the flow the turn ran on (the session's, once migrated)."""
    message: str = ""
    session_id: str | None = None
    turn: int = 1
    failure: str | None = None
    """What the loop's error said, for the developer (the result's text is the user's)."""
    states_before: dict[str, Any] | None = None
    state_entries: list[dict[str, Any]] = field(default_factory=list)
    last_request: dict[tuple[str | None, str], tuple[str, Sequence[Message], int, bool]] = field(
        default_factory=dict
    )
    """Per (parent, step): the previous request's system prompt and messages, its attempt, and
    whether its answer was refused (the next request is then the next attempt)."""
    calls: dict[tuple[str | None, str], tuple[dict[str, Any], float]] = field(default_factory=dict)
    answered: dict[tuple[str | None, str], tuple[dict[str, Any], tuple[ToolCall, ...]]] = field(
        default_factory=dict
    )
    """Per (parent, step): the entry of the latest request answered (where acceptance is noted),
    and the calls of its answer as they came."""
    watch: Callable[[TimelineUpdate], None] | None = None
    """Who watches the turn live: handed each entry as it is recorded and as it grows."""
    indices: dict[int, int] = field(default_factory=dict)
    """Per entry shown (by identity: entries live as long as the turn), its index."""
    cleaner: _Cleaner | None = None
    relayed: bool = False
    """The turn is recorded where it runs (a durable executor's worker), which relays its entries:
    none of this log's own is handed to the watcher."""
    stored_as: int | None = None
    """The turn's number, once the timeline recorded where it ran is stored."""

    def __post_init__(self) -> None:
        self.records = _Timed(self.started, self.clock)

    def show(self, entry: dict[str, Any]) -> None:
        """Hand ``entry`` to the watcher, cleaned, at the index it was first shown at (callers on
        every turn's path check ``watch`` first: most turns have no watcher)."""
        if self.watch is None or self.relayed:
            return
        if self.cleaner is None:
            self.cleaner = _Cleaner(self.settings, self.secrets)
        index = self.indices.setdefault(id(entry), len(self.indices))
        self.watch(TimelineUpdate(self.session_id, self.turn, index, self.cleaner.encode(entry)))


class SubStepRecorder(TurnObserver):
    """Records only the sub-step runs of what it watches (a tool handler run by a durable
    executor's activity, whose call the workflow records): ``entries`` after the run."""

    def __init__(self, recording: Recording) -> None:
        self.log = recording.recorder(None).log

    def sub_turn(self, step: str, call: ToolCall | None) -> TurnObserver:
        return TimelineRecorder(self.log, call.id if call is not None else step)

    def entries(self) -> list[dict[str, Any]]:
        """What the runs recorded, as JSON values (not cleaned yet: the turn's document is)."""
        return [to_jsonable_python(entry, fallback=repr) for entry in self.log.records.records]


class TimelineRecorder(TurnObserver):
    """Records one turn (or, with ``parent``, a sub-step run inside it)."""

    wants_session = True

    def __init__(self, log: _Log, parent: str | None = None) -> None:
        self.log = log
        self.parent = parent
        self.events = EventStream(log.records, parent=parent)
        self.wants_timeline = parent is None and log.watch is not None

    @property
    def stored_elsewhere(self) -> int | None:
        """The turn's number when its timeline was recorded and stored where it ran (a durable
        executor's worker; ``timeline_stored``), else None: this recorder's ``document`` is it."""
        return self.log.stored_as

    # --- a turn recorded where it runs ------------------------------------------------------

    def timeline_relayed(self) -> None:
        self.log.relayed = True
        self.log.records.shown = None

    def timeline_entry(self, update: TimelineUpdate) -> None:
        if self.log.watch is not None:
            self.log.watch(update)

    def timeline_stored(self, session_id: str, turn: int) -> None:
        if self.parent is None:
            self.log.session_id, self.log.stored_as = session_id, turn

    # --- the turn ---------------------------------------------------------------------------

    def turn_started(self, flow: str, session_id: str | None, message: str) -> None:
        self.log.flow, self.log.session_id, self.log.message = flow, session_id, message

    def session_opened(self, session_id: str) -> None:
        self.log.session_id = session_id

    def session_before(self, session: Session) -> None:
        self.log.flow = session.flow
        self.log.flow_version = session.flow_version
        self.log.turn = session.turns + 1
        self.log.states_before = copy_json(session.states)

    def session_after(self, session: Session) -> None:
        before = self.log.states_before
        if before is None:
            return
        after = session.states
        at = _ms(self.log.clock() - self.log.started)
        for step in sorted(set(before) | set(after)):
            if before.get(step) == after.get(step):
                continue  # most steps' states are as they were: nothing to convert
            changes = _diff(before.get(step) or {}, after.get(step) or {})
            if changes:
                entry = {"kind": "state", "step": step, "changes": changes, "at_ms": at}
                self.log.state_entries.append(entry)
                self.log.show(entry)

    # --- model requests ---------------------------------------------------------------------

    def model_started(self, step: str, model: str, request: ModelRequest) -> None:
        log, key = self.log, (self.parent, step)
        previous = log.last_request.get(key)
        shared = 0
        system: str | None = request.system
        attempt = 1
        if previous is not None:
            prior_system, prior_messages, prior_attempt, refused = previous
            shared = _shared_prefix(prior_messages, request.messages)
            attempt = prior_attempt + 1 if refused else 1
            if prior_system == system:
                system = None  # said already
        log.last_request[key] = (request.system, list(request.messages), attempt, False)
        entry: dict[str, Any] = {
            "kind": "model",
            "step": step,
            "model": model,
            "attempt": attempt,
            "system": system,
            "history": shared,
            "messages": [_message(m) for m in request.messages[shared:]],
            "tools": [tool.name for tool in request.tools],
            "output": request.output.name if request.output is not None else None,
        }
        sent = log.clock()  # one reading: when the entry happened and when its latency starts
        log.records.add(entry, self.parent, sent)
        log.calls[key] = (entry, sent)

    def model_finished(self, step: str, response: ModelResponse) -> None:
        log, key = self.log, (self.parent, step)
        found = log.calls.pop(key, None)
        if found is None:
            return
        entry, sent = found
        calls = response.tool_calls
        log.answered[key] = (entry, tuple(calls))
        usage = response.usage
        entry.update(
            latency_ms=_ms(log.clock() - sent),
            text=response.text,
            tool_calls=[_call(call) for call in calls],
            usage={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "model_calls": max(usage.model_calls, 1),
                "tool_calls": 0,
            },
            finish_reason=response.finish_reason,
            answered_by=response.answered_by or response.model,
        )
        if log.watch is not None:
            log.show(entry)

    def model_failed(self, step: str, error: BaseException) -> None:
        key = (self.parent, step)
        found = self.log.calls.pop(key, None)
        if found is not None:
            entry, sent = found
            entry.update(latency_ms=_ms(self.log.clock() - sent), error=_describe(error))
            self.log.show(entry)
        self._refused(key)

    def response_accepted(self, step: str, response: ModelResponse, parsed: Any) -> None:
        log = self.log
        found = log.answered.pop((self.parent, step), None)
        if found is None:
            return
        entry, answered = found
        # As the turn reads the answer: calls written as text read as calls, each with its id
        # (the entry's are rebuilt only when the turn changed them: most answers it takes as they came).
        if tuple(response.tool_calls) != answered:
            entry["tool_calls"] = [_call(call) for call in response.tool_calls]
        if parsed is not None:
            entry["parsed"] = to_jsonable_python(parsed, fallback=repr)
        if log.watch is not None:
            log.show(entry)

    def response_rejected(self, step: str, check: str, reason: str) -> None:
        entry: dict[str, Any] = {"kind": "rejected", "step": step, "check": check, "reason": reason}
        self.log.records.add(entry, self.parent)
        self._refused((self.parent, step))

    def _refused(self, key: tuple[str | None, str]) -> None:
        previous = self.log.last_request.get(key)
        if previous is not None:
            self.log.last_request[key] = (*previous[:3], True)

    # --- what every observer sees, as eval scenarios see it ---------------------------------

    # Those of every turn straight to the records, without building the event an ``EventStream``
    # would emit: the same records.

    def step_entered(self, step: str, previous: str | None) -> None:
        self.log.records.entered(step, previous, self.parent)

    def tool_started(self, step: str, call: ToolCall) -> None:
        args = {} if isinstance(call.args, str) else call.args
        self.log.records.tool_called(step, call.id, call.name, args, self.parent)

    def tool_answered(self, step: str, call: ToolCall, content: str, is_error: bool) -> None:
        self.log.records.tool_returned(step, call.id, call.name, content, is_error, self.parent)

    def tool_failed(self, step: str, call: ToolCall, error: BaseException) -> None:
        self.log.records.tool_returned(
            step, call.id, call.name, f"raised {_describe(error)}", True, self.parent
        )

    def approval_requested(self, step: str, approval: Approval) -> None:
        self.events.approval_requested(step, approval)

    def approval_decided(self, approval: Approval) -> None:
        self.events.approval_decided(approval)

    def reading_judged(self, step: str, verdicts: tuple[Verdict, ...]) -> None:
        self.events.reading_judged(step, verdicts)

    def pattern_fired(self, step: str, pattern: str, detail: str | None) -> None:
        self.events.pattern_fired(step, pattern, detail)

    def handed_off(self, step: str, reason: str | None, summary: str) -> None:
        self.events.handed_off(step, reason, summary)

    def session_migrated(self, migration: SessionMigration) -> None:
        self.events.session_migrated(migration)

    def memory_erased(self, namespace: str) -> None:
        self.log.records.add({"kind": "erased", "namespace": namespace}, self.parent)

    def turn_ended(self, error: BaseException | None) -> None:
        if error is not None and self.parent is None:
            self.log.failure = str(error)

    def sub_turn(self, step: str, call: ToolCall | None) -> TurnObserver:
        return TimelineRecorder(self.log, call.id if call is not None else step)

    # --- the document -----------------------------------------------------------------------

    def document(self, result: TurnResult) -> tuple[str, int, str] | None:
        """(session id, turn, JSON text) of the turn that gave ``result``; None when nothing ran
        here: input refused, an unknown or ended session, a turn run elsewhere (a durable executor)."""
        log = self.log
        session_id = result.session_id
        if session_id is None or log.states_before is None:
            return None
        cleaner = _Cleaner(log.settings, log.secrets)
        error = result.error
        if error is not None:
            outcome = "failed"
        elif result.pending:
            outcome = "paused"
        else:
            outcome = "replied"
        usage = result.usage
        head: dict[str, Any] = {
            "version": TIMELINE_VERSION,
            "session_id": session_id,
            "turn": log.turn,
            "flow": result.flow or log.flow,
            "flow_version": log.flow_version,
            "trigger": log.trigger,
            "message": cleaner.text(log.message),
            "started_at": log.started_at,
            "duration_ms": _ms(log.clock() - log.started),
            "outcome": outcome,
            "reply": "" if error is not None else cleaner.text(result.message),
            "step": result.step,
            "error": None
            if error is None
            else {
                "kind": error.kind,
                "message": cleaner.text(log.failure or error.message),
                "step": result.step,
            },
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "model_calls": usage.model_calls,
                "tool_calls": usage.tool_calls,
            },
        }
        budget = log.settings.max_bytes
        records = log.records.records
        count = len(records)
        texts = cleaner.encode_all([*records, *log.state_entries])  # state changes (always kept) last
        lengths = [_bytes(text) + 1 for text in texts]  # each entry's bytes, and its comma
        # 64: room for the size and an ``omitted`` entry
        size = len(to_json(head)) + 64 + sum(lengths[count:])
        if size + sum(lengths[:count]) <= budget:  # most turns: every entry fits
            shown = texts
            head["size"] = sum(lengths)
        else:
            shown = []
            omitted = omitted_bytes = 0
            for text, length in zip(texts[:count], lengths[:count], strict=True):
                if omitted or size + length > budget:
                    omitted += 1
                    omitted_bytes += length - 1
                    continue
                shown.append(text)
                size += length
            if omitted:
                shown.append(
                    to_json({"kind": "omitted", "entries": omitted, "bytes": omitted_bytes}).decode()
                )
            shown += texts[count:]
            head["size"] = sum(_bytes(text) + 1 for text in shown)
        body = to_json(head).decode()
        return session_id, log.turn, f'{body[:-1]},"entries":[{",".join(shown)}]}}'


def _bytes(text: str) -> int:
    """The UTF-8 length of ``text``, without encoding it when it is ASCII (most entries are)."""
    return len(text) if text.isascii() else len(text.encode())


def _names_a_secret(lowered: str) -> bool:
    """Whether a word a key naming a secret holds is anywhere in the (lowercased) text: looked for
    first, as plain substrings (much faster than a pattern of alternatives)."""
    return (
        "passw" in lowered
        or "passphrase" in lowered
        or "secret" in lowered
        or "api_key" in lowered
        or "apikey" in lowered
        or "api-key" in lowered
        or "private" in lowered
        or "token" in lowered
        or "authorization" in lowered
        or "credential" in lowered
    )


_SCALARS = frozenset({str, int, float, bool, type(None)})
_SECRET_KEYS: dict[str, bool] = {}
"""Whether a key names a secret, per key met (most are met every turn: the same tools' arguments)."""


def _hides_a_field(value: Any, data: bool = False) -> bool:
    """Whether cleaning would hide a field of ``value``: a key that names a secret in the
    application's data (under one of ``_DATA``'s keys, at any depth). A value that is not plain
    JSON is the walk's to judge (True)."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if data:
                name = str(key)
                hidden = _SECRET_KEYS.get(name)
                if hidden is None:
                    hidden = bool(_SECRET_FIELD.search(name))
                    if len(_SECRET_KEYS) < 10_000:  # bounded: keys may be ids
                        _SECRET_KEYS[name] = hidden
                if hidden:
                    return True
            if type(item) not in _SCALARS and _hides_a_field(item, data or key in _DATA):
                return True
        return False
    if kind is list or kind is tuple:
        return any(type(item) not in _SCALARS and _hides_a_field(item, data) for item in value)
    return kind not in _SCALARS


_KEY = re.compile(r'"((?:[^"\\]|\\.)*)":')
"""A key in JSON text (a string followed by a colon)."""
_NAMES_FIELDS = frozenset({"field_set", "field_dropped", "state"})
"""Entries that name a field in a value (a reading's ``field``, a state change's ``key``)."""
_DATA = frozenset({"args", "value", "before", "after", "read_as", "parsed"})
"""Where an entry holds the application's data (whose fields the ``redact`` hook may hide); the
rest of an entry is the timeline's own shape."""


class _Cleaner:
    """Makes recorded values safe and bounded: secrets replaced, redacted fields hidden, long texts
    cut, anything not JSON made JSON."""

    def __init__(self, settings: TimelineSettings, secrets: tuple[str, ...]) -> None:
        self.limit = settings.max_text_chars
        self.redact = settings.redact
        self.secrets = secrets
        self.escaped = [to_json(secret).decode()[1:-1] for secret in secrets]

    def encode(self, entry: Mapping[str, Any]) -> str:
        """The entry as JSON text, cleaned. Most entries need no change at all: encoded once, an
        entry shorter than the text limit holds no text to cut, and one whose keys name no secret
        (with no ``redact`` hook) hides no field; only secrets are then replaced, in the text."""
        return self._cleaned(entry, to_json(entry, fallback=repr).decode())

    def encode_all(self, entries: Sequence[Mapping[str, Any]]) -> list[str]:
        """Each entry as ``encode`` makes it. In most turns no entry needs more than its secrets
        replaced: that is then checked and done once, over all of them joined."""
        texts = [to_json(entry, fallback=repr).decode() for entry in entries]
        if (
            self.redact is None
            and max(map(len, texts), default=0) <= self.limit
            and not any(entry.get("kind") in _NAMES_FIELDS or _hides_a_field(entry) for entry in entries)
        ):
            # Nothing to cut and no field to hide: only secrets to replace. The keys are looked at,
            # not the whole text scanned for words naming a secret (ten passes over every prompt
            # and result). No JSON text holds a raw line break, nor does an escaped secret: joined
            # by one, the entries are replaced in together and split back exactly.
            joined = "\n".join(texts)
            for escaped in self.escaped:
                if escaped in joined:
                    joined = joined.replace(escaped, SECRET)
            return joined.split("\n") if texts else []
        return [self._cleaned(entry, text) for entry, text in zip(entries, texts, strict=True)]

    def _cleaned(self, entry: Mapping[str, Any], text: str) -> str:
        if len(text) > self.limit or self.redact is not None:
            return self._encode_walked(entry)
        lowered = text.lower().replace("tokens", "")  # counts of tokens are no secret
        if _names_a_secret(lowered) and (
            entry.get("kind") in _NAMES_FIELDS or any(_SECRET_FIELD.search(key) for key in _KEY.findall(text))
        ):
            return self._encode_walked(entry)
        for escaped in self.escaped:
            if escaped in text:
                text = text.replace(escaped, SECRET)
        return text

    def _encode_walked(self, entry: Mapping[str, Any]) -> str:
        cleaned = self.clean(entry)
        kind = entry.get("kind")
        if kind in ("field_set", "field_dropped") and self._hidden(
            str(entry.get("field")), entry.get("value")
        ):
            cleaned["value"] = REDACTED
            if isinstance(cleaned.get("evidence"), dict):
                cleaned["evidence"]["text"] = REDACTED
            cleaned.pop("read_as", None)
        elif kind == "state":
            for change in cleaned["changes"]:
                value = change.get("after", change.get("before"))
                if any(self._hidden(part, value) for part in str(change["key"]).split(".")):
                    for side in ("before", "after"):
                        if side in change:
                            change[side] = REDACTED
        return to_json(cleaned).decode()

    def clean(self, value: Any) -> Any:
        """The timeline's own shape: only its ``_DATA`` keys hold fields the hook may hide."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                str(key): self._data(item) if key in _DATA else self.clean(item)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.clean(item) for item in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self.clean(to_jsonable_python(value, fallback=repr))

    def _data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                str(key): REDACTED if self._hidden(str(key), item) else self._data(item)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._data(item) for item in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self._data(to_jsonable_python(value, fallback=repr))

    def _hidden(self, key: str, value: Any) -> bool:
        return bool(_SECRET_FIELD.search(key)) or (self.redact is not None and bool(self.redact(key, value)))

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, SECRET)
        if len(text) > self.limit:
            return f"{text[: self.limit]}… [{len(text) - self.limit} more characters]"
        return text


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A step's state key by key, as JSON values: what was added, removed or changed. Inside a
    mapping present on both sides the diff goes on, its keys joined by dots (``form.known.city``),
    so a change deep in a large value shows as that change alone."""
    changes: list[dict[str, Any]] = []
    _walk(to_jsonable_python(before, fallback=repr), to_jsonable_python(after, fallback=repr), "", changes)
    return changes


def _walk(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str, changes: list[dict[str, Any]]) -> None:
    for key in sorted(set(old) | set(new), key=str):
        path = f"{prefix}{key}"
        if key not in new:
            changes.append({"key": path, "before": old[key], "removed": True})
        elif key not in old:
            changes.append({"key": path, "after": new[key], "added": True})
        elif isinstance(old[key], dict) and isinstance(new[key], dict):
            _walk(old[key], new[key], f"{path}.", changes)
        elif old[key] != new[key]:
            changes.append({"key": path, "before": old[key], "after": new[key]})


def _shared_prefix(previous: Sequence[Message], current: Sequence[Message]) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if old is not new and old != new:
            break
        shared += 1
    return shared


def _message(message: Message) -> dict[str, Any]:
    shown: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.kind:
        shown["kind"] = message.kind
    if message.role == "tool":
        shown["name"] = message.name
        if message.is_error:
            shown["is_error"] = True
    if message.tool_calls:
        shown["tool_calls"] = [_call(call) for call in message.tool_calls]
    if message.attachments:
        shown["files"] = [
            {"name": ref.name, "media_type": ref.media_type, "size": ref.size} for ref in message.attachments
        ]
    return shown


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "args": call.args}


def _describe(error: BaseException) -> str:
    return f"{getattr(error, 'kind', type(error).__name__)}: {error}"


def _ms(seconds: float) -> float:
    """Milliseconds, to two decimals. A dozen a turn: ``round(x, 2)`` goes through a decimal
    string and costs several times this (the same value but for a last-digit tie)."""
    if seconds >= 0:
        return int(seconds * 100_000 + 0.5) / 100
    return round(seconds * 1000, 2)
