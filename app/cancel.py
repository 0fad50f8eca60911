"""A cancelled event stops its run: a cancel (gradio_client's `job.cancel()`) presses the visitor's Stop switch, so
the run ends after its step in flight and frees what it held, as with the Stop button.

Gradio cancels an event by cancelling the asyncio task that awaits it. A plain function runs in a worker thread,
which that does not reach: a race or a Lab check would run on to its end, holding the model's queue slot (and
the cancel request, which waits for the task) all along. So a model event runs here as a coroutine that awaits
its function in a thread: when its task is cancelled, it presses the switch, waits for the thread to stop after
the current step, and only then lets the task end. The thread is the app's model thread (app.model_thread).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from app.limits import StopSwitches
from app.model_thread import to_model_thread

DONE = object()  # what next() gives back once a generator is over


async def _until_done(switches: StopSwitches, session: str | None, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)` on the model thread (in this task's context: Gradio's progress bar reads it). A cancel of the
    task presses the session's switch and waits for the call to return before it is raised."""
    work = asyncio.ensure_future(to_model_thread(call, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        switches.press(session)
        while not work.done():
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:  # a second cancel: the run is stopping already
                pass
        switches.arm(session)  # a press that came after the run's own release must not stop the next run
        raise


def stop_on_cancel(fn: Callable[..., Any], switches: StopSwitches, session_of: Callable[[Any], str | None]
                   ) -> Callable[..., Any]:
    """`fn` (a function or a generator function taking `request: gr.Request`) as a coroutine (or an async
    generator) whose cancellation presses the Stop switch of the request's session."""
    signature = inspect.signature(fn)

    def session(args: tuple, kwargs: dict) -> str | None:
        return session_of(signature.bind_partial(*args, **kwargs).arguments.get("request"))

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        async def stream(*args: Any, **kwargs: Any):
            key = session(args, kwargs)
            iterator = fn(*args, **kwargs)
            try:
                while (item := await _until_done(switches, key, next, iterator, DONE)) is not DONE:
                    yield item
            finally:
                await asyncio.shield(to_model_thread(iterator.close))  # runs the generator's own clean-up

        return stream

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        return await _until_done(switches, session(args, kwargs), functools.partial(fn, *args, **kwargs))

    return call
