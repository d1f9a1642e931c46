"""Session store benchmark: does a save cost the same at turn 1,000 as at turn 1?

Run: ``.venv/bin/python bench/store.py`` (``--sessions N``: sessions per checkpoint, default 20).
Every turn appends four messages of realistic size (a user message, a tool call, a ~2 KB tool
result, an answer) and changes a little state, exactly as the engine hands them to ``save``. For
each checkpoint k in 1, 10, 100 and 1,000 a group of sessions is grown to turn k - 1; then turns
k .. k+7 of every group are saved and timed, the groups interleaved; then every session's load is
timed. Last, 50 sessions are played concurrently (load + save per turn) for turns/s.

Then a persisted turn's cost (``--turn-rounds N``; ``--turn-only`` runs just this part): in one run,
interleaved round by round, (a) a whole ``FlowEngine`` turn on ``MemoryStore``, (b) the same turn
on ``SQLiteStore`` (default durability, a temporary file) and (c) a raw ``sqlite3`` commit of the
rows that turn writes (the session row update and its message rows, one transaction, same schema,
values and durability, on a copy of (b)'s file), checked against the goal (b) <= (a) + 1.5 x (c).
The turns rotate over 40 sessions of a desk flow (a tool call, then an answer: four messages a
turn), one at a time: the store's single-turn latency, which on a fast disk it earns by running
its calls on the event loop's thread (see ``picoflow.sessions._sqlite_connections``).

PostgreSQL: ``$PICOFLOW_BENCH_POSTGRES`` or ``postgresql://postgres@127.0.0.1:5432/test``; the
benchmark works in a schema of its own and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from _desk import DeskFlow, agent
from picoflow import FlowEngine
from picoflow.messages import Message, ToolCall
from picoflow.models import FunctionModel
from picoflow.session import Session
from picoflow.sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore
from picoflow.sessions.sqlite import SQLiteSave, Synchronous, save_rows

CHECKPOINTS = (1, 10, 100, 1000)
WINDOW = 8
"""Timed saves per session and checkpoint: turns k .. k + WINDOW - 1."""
LOAD_ROUNDS = 3
"""Timed loads per session and checkpoint."""
CONCURRENT_SESSIONS = 50
CONCURRENT_TURNS = 40

USER_TEXT = "I'd like a double room in Lisbon from the 3rd to the 7th, ideally with a view of the river. " * 2
ANSWER = "Here are three hotels that match: " + "a short description of one option with its price. " * 10
TOOL_RESULT = json.dumps(
    [
        {"hotel": f"Hotel {n}", "price": 120 + n, "rating": 4.5, "notes": "river view, breakfast " * 4}
        for n in range(12)
    ]
)


def play_turn(session: Session) -> list[tuple[str, Message]]:
    """What one engine turn hands the store: four stamped messages, a little changed state."""
    turn = session.turns + 1
    call = ToolCall(
        "search_hotels", {"city": "Lisbon", "nights": 4, "room": "double", "turn": turn}, f"call-{turn}"
    )
    namespace = session.current_step
    appended = []
    for message in (
        Message.user(USER_TEXT),
        Message.assistant("", [call]),
        Message.tool(call, TOOL_RESULT),
        Message.assistant(ANSWER),
    ):
        stamped = message.stamped(step=session.current_step, seq=session.next_seq)
        session.namespace(namespace).messages.append(stamped)
        session.next_seq += 1
        appended.append((namespace, stamped))
    session.turns = turn
    state = session.state_of(session.current_step)
    state["turn"] = turn
    state["criteria"] = {"city": "Lisbon", "nights": 4, "last_quote": 120 + turn % 12}
    session.usage.input_tokens += 1500
    session.usage.output_tokens += 200
    session.usage.model_calls += 2
    session.updated_at = time.time()
    return appended


@dataclass
class Samples:
    save: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in CHECKPOINTS})
    load: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in CHECKPOINTS})
    turns_per_second: float = 0.0


async def timed(call: Awaitable[object]) -> float:
    start = time.perf_counter()
    await call
    return (time.perf_counter() - start) * 1000


async def save_turn(store: SessionStore, session: Session) -> None:
    appended = play_turn(session)
    await store.save(session, expected_revision=session.revision or None, appended=appended)


async def growth(store: SessionStore, sessions: int, samples: Samples) -> None:
    """One group of sessions per checkpoint, grown (untimed) to just before it; then the groups'
    saves are timed interleaved, so every checkpoint sees the same machine, disk and cache
    conditions and a busy moment cannot be billed to one of them. Loads are timed after all the
    saves: a multi-megabyte load leaves CPU caches cold and would slow the saves that follow it."""
    run = uuid.uuid4().hex[:8]
    groups = {
        checkpoint: [
            Session(id=f"bench-{run}-{checkpoint}-{n}", flow="hotel", current_step="explore")
            for n in range(sessions)
        ]
        for checkpoint in CHECKPOINTS
    }
    for checkpoint, group in groups.items():
        for _ in range(1, checkpoint):
            for session in group:
                await save_turn(store, session)
    for _ in range(WINDOW):
        for index in range(sessions):
            for checkpoint, group in groups.items():
                samples.save[checkpoint].append(await timed(save_turn(store, group[index])))
    for _ in range(LOAD_ROUNDS):
        for index in range(sessions):
            for checkpoint, group in groups.items():
                samples.load[checkpoint].append(await timed(store.load(group[index].id)))


async def concurrent(store: SessionStore, samples: Samples) -> None:
    run = uuid.uuid4().hex[:8]

    async def conversation(n: int) -> None:
        session = Session(id=f"conc-{run}-{n}", flow="hotel", current_step="explore")
        await store.save(session, expected_revision=None, appended=play_turn(session))
        for _ in range(CONCURRENT_TURNS - 1):
            loaded = await store.load(session.id)
            assert loaded is not None
            await store.save(loaded, expected_revision=loaded.revision, appended=play_turn(loaded))

    start = time.perf_counter()
    await asyncio.gather(*(conversation(n) for n in range(CONCURRENT_SESSIONS)))
    samples.turns_per_second = CONCURRENT_SESSIONS * CONCURRENT_TURNS / (time.perf_counter() - start)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(name: str, samples: Samples) -> None:
    print(f"\n{name}")
    print(f"  {'turn':>6}  {'save p50':>9}  {'save p99':>9}  {'load p50':>9}  {'load p99':>9}  saves/loads")
    for checkpoint in CHECKPOINTS:
        save, load = samples.save[checkpoint], samples.load[checkpoint]
        columns = [
            statistics.median(save),
            percentile(save, 0.99),
            statistics.median(load),
            percentile(load, 0.99),
        ]
        print(
            f"  {checkpoint:>6}"
            + "".join(f"  {value:>6.2f} ms" for value in columns)
            + f"  {len(save)}/{len(load)}"
        )
    first, last = samples.save[CHECKPOINTS[0]], samples.save[CHECKPOINTS[-1]]
    ratio = statistics.median(last) / statistics.median(first)
    tail = percentile(last, 0.99) / percentile(first, 0.99)
    verdict = "meets" if ratio <= 1.5 else "MISSES"
    print(f"  save turn-1000 / turn-1: {ratio:.2f}x at p50 ({verdict} the 1.5x goal), {tail:.2f}x at p99")
    print(
        f"  {CONCURRENT_SESSIONS} sessions written concurrently (load + save per turn):"
        f" {samples.turns_per_second:,.0f} turns/s"
    )


async def bench(name: str, make: Callable[[], SessionStore], sessions: int) -> None:
    store = make()
    samples = Samples()
    try:
        await store.load("warm-up")  # connect and migrate outside the measurements
        await growth(store, sessions, samples)
        await concurrent(store, samples)
    finally:
        await store.close()
    report(name, samples)


# --- a persisted turn's cost ----------------------------------------------------------------------

TURN_SESSIONS = 40
"""Sessions the turn rounds rotate over: each gets rounds / 40 turns, so memory stays conversation-sized."""


class Desks:
    """An engine on one store, turning over ``TURN_SESSIONS`` sessions of the desk flow."""

    def __init__(self, store: SessionStore) -> None:
        self.model = FunctionModel(agent)
        self.engine = FlowEngine([DeskFlow], model=self.model, store=store)
        self.sessions: list[str] = []
        self.asked = 0

    async def turn(self, index: int) -> None:
        self.asked += 1
        session_id = self.sessions[index] if index < len(self.sessions) else None
        result = await self.engine.run("desk", f"Where is order {1000 + self.asked}?", session_id)
        if not result.ok or result.session_id is None:
            raise RuntimeError(f"turn failed: {result.error}")
        if session_id is None:
            self.sessions.append(result.session_id)
        self.model.requests.clear()


class RawCommit:
    """Commits the rows of one stored turn with bare ``sqlite3`` on this thread: the same schema,
    pragmas, values and statements as ``SQLiteStore`` (session row update conditioned on the
    revision, then the message rows, in one ``BEGIN IMMEDIATE`` transaction), encoded beforehand."""

    def __init__(self, path: Path, session: Session, turn: list[tuple[str, Message]]) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.session = session
        self.turn = turn

    def rows(self) -> SQLiteSave:
        """The next turn's rows: the revision moves on, the messages take fresh seqs."""
        session = self.session
        appended = [
            (namespace, replace(message, seq=session.next_seq + n))
            for n, (namespace, message) in enumerate(self.turn)
        ]
        session.next_seq += len(appended)
        expected = session.revision
        session.revision += 1
        return save_rows(session, expected, appended)

    def commit(self, rows: SQLiteSave) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        updated = conn.execute(
            "UPDATE picoflow_sessions SET flow = :flow, status = :status, principal = :principal,"
            " current_step = :current_step, revision = :revision, turns = :turns,"
            " updated_at = :updated_at, live = :live, document = :document"
            " WHERE id = :id AND revision = :expected",
            rows.session,
        )
        assert updated.rowcount == 1
        conn.executemany(
            "INSERT INTO picoflow_messages (session_id, seq, namespace, body) VALUES (?, ?, ?, ?)",
            rows.messages,
        )
        conn.execute("COMMIT")


async def persisted_turn(rounds: int) -> None:
    """(a) memory turn, (b) SQLite turn, (c) raw commit of a turn's rows, interleaved round by round."""
    samples: dict[str, list[float]] = {"memory": [], "sqlite": [], "raw": []}
    with tempfile.TemporaryDirectory() as folder:
        memory = Desks(MemoryStore())
        store = SQLiteStore(Path(folder) / "turns.sqlite3")
        sqlite = Desks(store)
        try:
            for index in range(TURN_SESSIONS):  # every session exists before the timing starts
                await memory.turn(index)
                await sqlite.turn(index)
            stored = await store.load(sqlite.sessions[0])
            assert stored is not None
            transcript = await store.transcript(stored.id)
            turn = [("desk", message) for message in transcript[-4:]]
            # The raw commits go to a copy of the store's file: tables and indexes of the same size.
            raw_path = Path(folder) / "raw.sqlite3"
            with (
                contextlib.closing(sqlite3.connect(store.path)) as source,
                contextlib.closing(sqlite3.connect(raw_path)) as copy,
            ):
                source.backup(copy)
            raw = RawCommit(raw_path, stored, turn)

            async def raw_commit() -> None:
                rows = raw.rows()
                start = time.perf_counter()
                raw.commit(rows)
                samples["raw"].append((time.perf_counter() - start) * 1000)

            async def timed_turn(name: str, desks: Desks, index: int) -> None:
                start = time.perf_counter()
                await desks.turn(index)
                samples[name].append((time.perf_counter() - start) * 1000)

            try:
                for round_ in range(rounds):
                    index = round_ % TURN_SESSIONS
                    runs: list[Callable[[], Awaitable[None]]] = [
                        functools.partial(timed_turn, "memory", memory, index),
                        functools.partial(timed_turn, "sqlite", sqlite, index),
                        raw_commit,
                    ]
                    shift = round_ % 3  # each kind goes first, second and third equally often
                    for run in runs[shift:] + runs[:shift]:
                        await run()
            finally:
                raw.conn.close()
        finally:
            await memory.engine.aclose()
            await sqlite.engine.aclose()
    a, b, c = (statistics.median(samples[name]) for name in ("memory", "sqlite", "raw"))
    print(f"\nA persisted turn (desk flow: a tool call, 4 messages; {rounds} rounds, interleaved)")
    for name, label in (
        ("memory", "(a) engine turn on MemoryStore"),
        ("sqlite", "(b) engine turn on SQLiteStore (FULL)"),
        ("raw", "(c) raw sqlite3 commit of its rows"),
    ):
        values = samples[name]
        print(
            f"  {label:<40} p50 {statistics.median(values):6.3f} ms   p90 {percentile(values, 0.9):6.3f} ms"
        )
    budget = a + 1.5 * c
    verdict = "meets" if b <= budget else "MISSES"
    print(
        f"  (b) {b:.3f} ms vs (a) + 1.5 x (c) = {budget:.3f} ms: {verdict} the goal"
        f" ((b) - (a) = {(b - a) / c:.2f} x (c))"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=20, help="sessions per checkpoint (default 20)")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--turn-rounds", type=int, default=600, help="rounds of the persisted-turn part")
    parser.add_argument("--turn-only", action="store_true", help="run only the persisted-turn part")
    args = parser.parse_args()
    if args.turn_only:
        await persisted_turn(args.turn_rounds)
        return

    sample = play_turn(Session(id="size", flow="hotel", current_step="explore"))
    chars = sum(len(m.content) + sum(len(c.args_json()) for c in m.tool_calls) for _, m in sample)
    print(
        f"{args.sessions} sessions per checkpoint, {len(sample)} messages ({chars:,} chars) per turn;"
        f" save samples at turn k = turns k .. k+{WINDOW - 1} of each session, checkpoints interleaved.\n"
        "A load returns the whole live memory (4 messages per turn so far: this bench never compacts)."
    )
    with tempfile.TemporaryDirectory() as folder:
        modes: tuple[Synchronous, ...] = ("FULL", "NORMAL")
        for synchronous in modes:
            path = Path(folder) / f"bench-{synchronous.lower()}.sqlite3"
            await bench(
                f"SQLite, synchronous={synchronous}" + (" (default)" if synchronous == "FULL" else ""),
                functools.partial(SQLiteStore, path, synchronous=synchronous),
                args.sessions,
            )
    if not args.skip_postgres:
        await bench_postgres(args.sessions)
    await persisted_turn(args.turn_rounds)


async def bench_postgres(sessions: int) -> None:
    import psycopg

    url = os.environ.get("PICOFLOW_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"pf_bench_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    except psycopg.Error as exc:
        print(f"\nPostgreSQL: not reachable at {url} ({str(exc).strip()}); skipped", file=sys.stderr)
        return
    try:
        await bench(
            f"PostgreSQL {version[0] if version else ''} (pool of 10, schema {schema})",
            lambda: PostgresStore(url, schema=schema, max_size=10),
            sessions,
        )
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    asyncio.run(main())
