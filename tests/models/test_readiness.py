"""The load status of a model: its words, its JSON, and a tracker updated from one thread and watched
from others (handshakes with events, never sleeps)."""

from __future__ import annotations

import asyncio
import threading

from picoflow.models import FunctionModel
from picoflow.models.local import LocalModel
from picoflow.models.readiness import LoadStatus, LoadTracker, Phase, overall, preparable_models

DOWNLOAD = LoadStatus(phase=Phase.DOWNLOADING, done=312_400_000, total=1_117_320_768, part=7, parts=22)


def test_each_phase_in_words_and_as_json() -> None:
    assert [LoadStatus(phase=phase).message for phase in Phase if phase is not Phase.DOWNLOADING] == [
        "The offline model is not loaded yet; it loads with the first message.",
        "Checking the model file…",
        "Loading the model…",
        "Getting ready…",
        "Ready.",
        "The offline model could not be loaded: unknown error",
    ]
    assert DOWNLOAD.message == "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)"
    assert LoadStatus(phase=Phase.DOWNLOADING).message == "Downloading the offline model…"
    assert DOWNLOAD.as_dict() == {
        "status": "loading",
        "phase": "downloading",
        "done": 312_400_000,
        "total": 1_117_320_768,
        "part": 7,
        "parts": 22,
        "message": "Downloading the offline model: 312 of 1,117 MB (part 7 of 22)",
    }
    failed = LoadStatus(phase=Phase.FAILED, reason="no network")
    assert failed.as_dict() == {
        "status": "failed",
        "phase": "failed",
        "reason": "no network",
        "message": "The offline model could not be loaded: no network",
    }
    assert LoadStatus(phase=Phase.READY).as_dict() == {
        "status": "ready",
        "phase": "ready",
        "message": "Ready.",
    }
    assert [LoadStatus(phase=phase).settled for phase in Phase] == [False] * 5 + [True, True]


def test_overall_status_of_several_loads() -> None:
    ready, loading = LoadStatus(phase=Phase.READY), LoadStatus(phase=Phase.LOADING)
    failed = LoadStatus(phase=Phase.FAILED, reason="x")
    assert overall([]) == ready
    assert overall([ready, ready]) == ready
    assert overall([ready, DOWNLOAD, loading]) == DOWNLOAD
    assert overall([DOWNLOAD, failed]) == failed


def test_subscribers_see_each_change_once_until_they_leave() -> None:
    tracker = LoadTracker()
    seen: list[Phase] = []
    leave = tracker.subscribe(lambda status: seen.append(status.phase))

    def broken(status: LoadStatus) -> None:
        raise RuntimeError("a listener with a bug")

    tracker.subscribe(broken)
    tracker.report(Phase.LOADING)
    tracker.report(Phase.LOADING)  # no change, no news
    leave()
    tracker.report(Phase.READY)
    assert seen == [Phase.LOADING]
    assert tracker.status == LoadStatus(phase=Phase.READY)
    assert repr(tracker) == "LoadTracker(ready)"


def test_a_thread_waits_until_the_load_is_settled() -> None:
    tracker = LoadTracker(DOWNLOAD)
    waiting = threading.Event()
    result: list[LoadStatus] = []

    def waiter() -> None:
        waiting.set()
        result.append(tracker.wait(timeout=10))

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait(10)
    tracker.report(Phase.LOADING)
    tracker.report(Phase.FAILED, reason="disk full")
    thread.join(10)
    assert result == [LoadStatus(phase=Phase.FAILED, reason="disk full")]


async def test_a_coroutine_sees_every_phase_a_loading_thread_goes_through() -> None:
    tracker = LoadTracker(DOWNLOAD)
    steps = [
        LoadStatus(phase=Phase.CHECKING, done=0, total=10),
        LoadStatus(phase=Phase.LOADING),
        LoadStatus(phase=Phase.WARMING),
        LoadStatus(phase=Phase.READY),
    ]
    seen: list[LoadStatus] = []
    observed = threading.Semaphore(0)

    def on_change(status: LoadStatus) -> None:
        seen.append(status)
        observed.release()

    def loader() -> None:
        # Each update only after the waiter showed the previous one, so none is folded into the next.
        for status in steps:
            observed.acquire(timeout=10)
            tracker.update(status)

    thread = threading.Thread(target=loader)
    thread.start()
    final = await asyncio.wait_for(tracker.settled(on_change), 10)
    thread.join(10)
    assert final == LoadStatus(phase=Phase.READY)
    assert seen == [DOWNLOAD, *steps]


async def test_waiting_for_a_settled_load_returns_at_once() -> None:
    seen: list[LoadStatus] = []
    ready = LoadStatus(phase=Phase.READY)
    assert await LoadTracker(ready).settled(seen.append) == ready
    assert seen == [ready]


def test_models_to_prepare_are_found_once_per_load() -> None:
    first, second = LocalModel(), LocalModel()
    other = LocalModel(params={"n_ctx": 2048})
    hosted = FunctionModel(lambda request: "hi")
    assert preparable_models([hosted, first, second, other]) == [first, other]
