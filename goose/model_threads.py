"""The threads that ran a model on a CPU, and a warning when too many of them live at once.

On Linux torch's OpenMP is libgomp, which keeps a team of helper threads for every thread that has run a parallel
region, for as long as that thread lives. Once the process holds more of those threads than it has CPUs, every
team stops spinning between kernels and sleeps instead, so each kernel waits for its helpers to wake. Measured on a
2-core AVX2 EPYC (docs/BENCHMARKS.md, docs/SPACE.md): the embedded model run on the main thread and then on a
worker, the main thread alive but idle, decoded at 14 against 21 tokens/s; loaded on the main thread alone, it
left no team there. A web server that warms the model up at start-up and generates in worker threads does exactly
that, and nothing but the clock shows it; so a run that finds another live thread beside its own that ran the same
model says so, once per model. The cure is the caller's: run the model on one thread (the app keeps one model
thread: app.model_thread).
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref

import torch


class ThreadsWarning(RuntimeWarning):
    """A model runs on more live threads than the CPUs hold OpenMP teams for."""


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ModelThreads:
    """The threads that ran one model (weakly held: a thread that ends takes its team with it)."""

    def __init__(self) -> None:
        self._threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.warned = False

    def note(self) -> None:
        """The current thread runs the model now: warn (once) if other live threads did and their teams together
        outnumber the CPUs."""
        current = threading.current_thread()
        with self._lock:
            self._threads.add(current)
            alive = sorted((t for t in self._threads if t.is_alive()), key=lambda t: t is not current)
            team, cpu_count = torch.get_num_threads(), cpus()
            if self.warned or len(alive) < 2 or team * len(alive) <= cpu_count:
                return
            self.warned = True
        names = ", ".join(repr(t.name) for t in alive)
        warnings.warn(
            f"this model has run on {len(alive)} threads that are still alive ({names}), each with an OpenMP team "
            f"of {team} threads, on {cpu_count} CPUs: every kernel now waits for its team to wake (measured: 0.6x the "
            f"speed on 2 cores). Run the model on one thread.", ThreadsWarning, stacklevel=2)
