"""What one visitor may ask of a shared server, and how a run is stopped: operator limits and Stop buttons.

The operator sets the limits with environment variables (shown in the page);
a run stops cleanly between two steps when its time is up or its visitor
pressed Stop, and keeps every step generated so far.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import goose

STOPPED = "stopped"  # stop_reason of a run ended by its Stop button
TIME_LIMIT = "time_limit"  # stop_reason of a run ended by GOOSE_MAX_RUN_SECONDS


def _env_number(environ: Mapping[str, str], name: str, default: float, minimum: float, kind: type) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a {'whole ' if kind is int else ''}number, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {raw!r}")
    return value


@dataclass(frozen=True)
class Limits:
    """The most a visitor may ask for: prompt tokens, new tokens, tree budget and seconds per run (or race), and
    the temperature (the page's slider ends there; not an operator's setting)."""

    max_prompt_tokens: int = 4096
    max_new_tokens: int = 1024
    max_budget: int = 512
    max_run_s: float = 300.0
    max_temperature: float = 2.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        """Read GOOSE_MAX_PROMPT_TOKENS, GOOSE_MAX_NEW_TOKENS, GOOSE_MAX_BUDGET and GOOSE_MAX_RUN_SECONDS."""
        env = os.environ if environ is None else environ
        return cls(max_prompt_tokens=int(_env_number(env, "GOOSE_MAX_PROMPT_TOKENS", cls.max_prompt_tokens, 1, int)),
                   max_new_tokens=int(_env_number(env, "GOOSE_MAX_NEW_TOKENS", cls.max_new_tokens, 1, int)),
                   max_budget=int(_env_number(env, "GOOSE_MAX_BUDGET", cls.max_budget, 1, int)),
                   max_run_s=float(_env_number(env, "GOOSE_MAX_RUN_SECONDS", cls.max_run_s, 0.1, float)))

    def describe(self) -> str:
        """One line for the page, so visitors know the limits before they hit them."""
        return (f"Limits on this server: prompt ≤ {self.max_prompt_tokens} tokens, ≤ {self.max_new_tokens} new "
                f"tokens, budget ≤ {self.max_budget} nodes, {self.max_run_s:g} s per run or race "
                "(a run that reaches it stops and keeps what it generated).")


class StopSwitches:
    """One Stop switch per browser session (or gradio_client), shared by that session's runs.

    A switch is cleared when a run is submitted from the page (`arm`) and when a run ends, so a
    Stop pressed while the run waits in the queue still stops it, and a stale one stops nothing.
    """

    def __init__(self) -> None:
        self._pressed: set[str] = set()
        self._lock = threading.Lock()

    def arm(self, session: str | None) -> None:
        with self._lock:
            self._pressed.discard(session or "")

    def press(self, session: str | None) -> None:
        with self._lock:
            self._pressed.add(session or "")

    def pressed(self, session: str | None) -> bool:
        with self._lock:
            return (session or "") in self._pressed


class RunGuard:
    """A run's stop conditions: its session's Stop switch and a deadline shared by every run of one event."""

    def __init__(self, switches: StopSwitches, session: str | None, seconds: float) -> None:
        self.switches, self.session = switches, session
        self.deadline = time.monotonic() + seconds

    def reason(self) -> str:
        """Why the run must stop now ("stopped", "time_limit"), or "" to carry on."""
        if self.switches.pressed(self.session):
            return STOPPED
        return TIME_LIMIT if time.monotonic() >= self.deadline else ""

    def steps(self, generation: goose.Generation) -> Iterator[goose.StepRecord]:
        """The generation's steps until it ends or must stop; a stopped run's stop_reason says why."""
        for step in generation:
            yield step
            reason = self.reason()
            if reason and not generation.run.stop_reason:
                generation.run.stop_reason = reason
                return

    def release(self) -> None:
        """Clear the session's switch once its run is over."""
        self.switches.arm(self.session)
