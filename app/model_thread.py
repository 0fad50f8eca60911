"""One thread does all of the app's model work: loading and warming a model, every run, race and Lab check.

PyTorch's CPU kernels run on OpenMP (libgomp on Linux), which keeps a team of helper threads for every thread that
has run a parallel region. Between two regions the helpers spin, ready for the next one, unless the process holds
more such threads than it has CPUs: then libgomp cuts the spinning short, and every region waits for its helpers
to wake. A model loaded on the main thread and run on one of the server's worker threads is that case. On a
2-core AVX2 EPYC, `goose.generate` ran autoregressive decoding at 11.3-11.9 tokens/s on a worker thread beside a
main thread that had loaded the model, against 19.2-20.5 on the main thread, and at 21.3-21.9 on a thread that
loaded the model and ran it, alone. The Race read 0.65x the library's tokens/s. So the app sends every call that
touches the model to this one thread, and its clocks read what a stopwatch around `goose.generate` reads.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_marker = threading.local()  # `is_model_thread` is set on the model thread
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None  # started on first use


def _model_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="goose-model",
                                           initializer=setattr, initargs=(_marker, "is_model_thread", True))
        return _executor


def on_model_thread() -> bool:
    """Whether the caller is the model thread."""
    return getattr(_marker, "is_model_thread", False)


def run_on_model_thread(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` on the model thread, waited for (at once when the caller is that thread)."""
    if on_model_thread():
        return call(*args)
    return _model_executor().submit(call, *args).result()


async def to_model_thread(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` on the model thread, awaited: asyncio.to_thread's counterpart, in the caller's context (Gradio's
    progress bar reads it). Calls queue in the order they were sent."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_model_executor(),
                                                            functools.partial(context.run, call, *args))


def stop_model_thread() -> None:
    """End the model thread once its queued calls are done; its OpenMP team ends with it, and the next call starts a
    new thread. For a process that also runs the model on another thread, as the tests do on their main thread:
    while both threads keep a team, each runs at the slow pace above."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is not None:
        executor.shutdown(wait=True)
