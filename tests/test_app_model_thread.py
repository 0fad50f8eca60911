"""The app's model thread (app.model_thread): every model event, however Gradio calls it, runs on one thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from types import SimpleNamespace

from app.cancel import stop_on_cancel
from app.limits import StopSwitches
from app.model_thread import on_model_thread, run_on_model_thread, stop_model_thread, to_model_thread
from app.ui import session_of

visitor = contextvars.ContextVar("visitor", default=None)  # stands for Gradio's progress context


def test_events_and_their_generators_run_on_one_thread_not_the_callers():
    seen: list[tuple[str, int, str | None]] = []

    def note(what: str) -> None:
        seen.append((what, threading.get_ident(), visitor.get()))

    def run(request):
        note("function")
        return "done"

    def stream(request):
        try:
            for i in range(3):
                note(f"step {i}")
                yield i
        finally:
            note("clean-up")

    switches = StopSwitches()
    function, generator = (stop_on_cancel(fn, switches, session_of) for fn in (run, stream))

    async def events() -> list:
        visitor.set("a visitor")
        request = SimpleNamespace(session_hash="model-thread")
        first = await function(request)
        items = [item async for item in generator(request)]
        closed_early = generator(request)
        await anext(closed_early)
        await closed_early.aclose()  # a visitor who leaves mid-run: the generator's clean-up runs on the thread too
        return [first, items]

    assert asyncio.run(events()) == ["done", [0, 1, 2]]
    assert [what for what, *_ in seen] == ["function", "step 0", "step 1", "step 2", "clean-up", "step 0",
                                           "clean-up"]
    threads = {ident for _, ident, _ in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert {who for *_, who in seen} == {"a visitor"}, "each call runs in its event's context"
    assert run_on_model_thread(threading.get_ident) in threads, "start-up work (app.py's warm-up) runs there too"


def test_a_call_made_on_the_model_thread_runs_at_once():
    """A call on the model thread that sends more work to it does not wait for itself."""
    assert not on_model_thread()
    inner = run_on_model_thread(lambda: (on_model_thread(), run_on_model_thread(threading.get_ident)))
    assert inner == (True, run_on_model_thread(threading.get_ident))

    async def awaited() -> int:
        return await to_model_thread(threading.get_ident)

    assert asyncio.run(awaited()) == inner[1]


def test_a_stopped_model_thread_ends_and_the_next_call_starts_another():
    """The tests end the model thread after each file (conftest): it must really end, and come back when needed."""
    first = run_on_model_thread(threading.current_thread)
    stop_model_thread()
    assert not first.is_alive(), "its thread (and the thread's OpenMP team) is gone"
    second = run_on_model_thread(threading.current_thread)
    assert second is not first and second.is_alive()
    stop_model_thread()
    stop_model_thread()  # a second stop, with no thread, does nothing
