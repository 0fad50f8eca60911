"""A thread-safe cache of loaded target models, keyed by name, shared by every browser tab.

Loading the embedded model takes seconds (minutes the very first time), so every
tab must reuse one copy, and two tabs asking at once must not load it twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import goose

DEFAULT_ALIASES = ("", goose.DEFAULT_MODEL)


def canonical_name(name: str | None) -> str:
    """The registry key of a model name: blank and "gemma-3-270m" both mean the embedded default."""
    name = (name or "").strip()
    return goose.DEFAULT_MODEL if name in DEFAULT_ALIASES else name


class ModelRegistry:
    """Loaded models by name; `loader` (goose.load_model by default) is called at most once per name."""

    def __init__(self, loader: Callable[[str | None], goose.GooseModel] | None = None) -> None:
        self._loader = loader or (lambda name: goose.load_model(name))
        self._models: dict[str, goose.GooseModel] = {}
        self._lock = threading.Lock()

    def register(self, name: str, model: goose.GooseModel) -> None:
        """Seed the cache (tests put tiny models here under names like "tiny-llama")."""
        with self._lock:
            self._models[canonical_name(name)] = model

    def is_loaded(self, name: str | None) -> bool:
        with self._lock:
            return canonical_name(name) in self._models

    def get(self, name: str | None) -> goose.GooseModel:
        """The model called `name`, loading it on first use; raises goose.ModelLoadError and friends."""
        key = canonical_name(name)
        with self._lock:  # one lock for all loads: a second tab waits instead of loading a second copy
            if key not in self._models:
                self._models[key] = self._loader(None if key == goose.DEFAULT_MODEL else key)
            return self._models[key]

    def preload(self, name: str | None = None) -> threading.Thread:
        """Start loading a model in the background so the first click does not wait for it."""
        def load() -> None:
            try:
                self.get(name)
            except (goose.ModelLoadError, goose.UnsupportedModelError, OSError) as error:
                # shown again, in the page, when someone asks for this model
                logging.getLogger(__name__).warning("preloading %s failed: %s", canonical_name(name), error)

        thread = threading.Thread(target=load, name="goose-preload", daemon=True)
        thread.start()
        return thread
