"""A thread-safe cache of loaded target models shared by every browser tab, with the operator's model policy.

Loading the embedded model takes seconds (minutes the very first time), so every
tab must reuse one copy, and two tabs asking at once must not load it twice. On
a public server the operator lists the models visitors may use (GOOSE_MODELS);
anything else is refused before a byte is downloaded, and at most
GOOSE_MAX_MODELS models besides the embedded one stay in memory. A model is
warmed before its first run (`warm`), so the first visitor's clock does not
hold what every model pays once.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import torch

import goose

DEFAULT_ALIASES = ("", goose.DEFAULT_MODEL)
log = logging.getLogger(__name__)


class ModelNotAllowedError(goose.ModelLoadError):
    """The server's operator does not offer this model."""


def canonical_name(name: str | None) -> str:
    """The registry key of a model name: blank and "gemma-3-270m" both mean the embedded default."""
    name = (name or "").strip()
    return goose.DEFAULT_MODEL if name in DEFAULT_ALIASES else name


def warm(model: goose.GooseModel) -> bool:
    """Pay, outside any visitor's clock, what a model's first run in this process pays once, for every method the
    page offers at its default budget (goose.warm_up: kept with the model). False when already warm."""
    ran = [goose.warm_up(model, method) for method in goose.available_methods()]
    return any(ran)


def is_warm(model: goose.GooseModel) -> bool:
    return all(goose.is_warm(model, method) for method in goose.available_methods())


class ModelRegistry:
    """Loaded models by name; `loader` (goose.load_model by default) is called at most once per name.

    allowed:    the names visitors may ask for, in the order offered (None: any id or folder).
    max_models: how many loaded models besides the embedded one (and those registered by hand) stay
                in memory; the least recently used one is freed before another is loaded.
    """

    def __init__(self, loader: Callable[[str | None], goose.GooseModel] | None = None,
                 allowed: Sequence[str] | None = None, max_models: int = 1) -> None:
        if max_models < 1:
            raise ValueError(f"max_models must be at least 1, got {max_models}")
        self._loader = loader or (lambda name: goose.load_model(name))
        self._allowed = None if allowed is None else list(dict.fromkeys(canonical_name(n) for n in allowed))
        self.max_models = max_models
        self._models: OrderedDict[str, goose.GooseModel] = OrderedDict()  # least recently used first
        self._pinned: set[str] = {goose.DEFAULT_MODEL}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 loader: Callable[[str | None], goose.GooseModel] | None = None) -> ModelRegistry:
        """The policy from GOOSE_MODELS, GOOSE_ALLOW_ANY_MODEL and GOOSE_MAX_MODELS; models from
        GOOSE_MODEL_FACTORIES ("name=module:function,...", each function returning a GooseModel) are
        registered up front, for tests and custom setups."""
        env = os.environ if environ is None else environ
        listed = [n.strip() for n in env.get("GOOSE_MODELS", "").split(",") if n.strip()]
        allow_any = env.get("GOOSE_ALLOW_ANY_MODEL", "").strip().lower() in ("1", "true", "yes")
        raw_max = env.get("GOOSE_MAX_MODELS", "").strip() or "1"
        if not raw_max.isdigit() or int(raw_max) < 1:
            raise ValueError(f"GOOSE_MAX_MODELS must be a whole number >= 1, got {raw_max!r}")
        registry = cls(loader, None if allow_any else listed or [goose.DEFAULT_MODEL], int(raw_max))
        for entry in filter(None, (e.strip() for e in env.get("GOOSE_MODEL_FACTORIES", "").split(","))):
            name, _, target = entry.partition("=")
            module, _, function = target.partition(":")
            if not (name and module and function):
                raise ValueError(f"GOOSE_MODEL_FACTORIES entries look like name=module:function, got {entry!r}")
            registry.register(name.strip(), getattr(importlib.import_module(module.strip()), function.strip())())
        return registry

    @property
    def allows_any(self) -> bool:
        return self._allowed is None

    @property
    def choices(self) -> list[str]:
        """The models offered in the page, the default first (empty when any model is allowed)."""
        return list(self._allowed or [])

    def register(self, name: str, model: goose.GooseModel) -> None:
        """Seed the cache and offer the model (tests put tiny models here under names like "tiny-llama").
        Registered models are never evicted."""
        key = canonical_name(name)
        with self._lock:
            self._models[key] = model
            self._pinned.add(key)
            if self._allowed is not None and key not in self._allowed:
                self._allowed.append(key)

    def check_allowed(self, name: str | None) -> str:
        """The registry key of `name`; raises ModelNotAllowedError, naming GOOSE_MODELS, for an unlisted model."""
        key = canonical_name(name)
        if self._allowed is not None and key not in self._allowed:
            raise ModelNotAllowedError(
                f"model {key!r} is not offered on this server: it serves only the models listed in GOOSE_MODELS "
                f"({', '.join(self._allowed)}). Run the app yourself with GOOSE_MODELS or GOOSE_ALLOW_ANY_MODEL=1 "
                "to use others.")
        return key

    def is_loaded(self, name: str | None) -> bool:
        with self._lock:
            return canonical_name(name) in self._models

    def loaded(self) -> list[str]:
        """Names of the models in memory, least recently used first."""
        with self._lock:
            return list(self._models)

    def get(self, name: str | None) -> goose.GooseModel:
        """The model called `name`, loading it on first use; raises ModelNotAllowedError before any download,
        goose.ModelLoadError and friends when loading fails."""
        key = self.check_allowed(name)
        with self._lock:  # one lock for all loads: a second tab waits instead of loading a second copy
            if key not in self._models:
                if key not in self._pinned:
                    self._evict_for_one_more()
                self._models[key] = self._loader(None if key == goose.DEFAULT_MODEL else key)
            self._models.move_to_end(key)
            return self._models[key]

    def is_warm(self, name: str | None) -> bool:
        """Whether the model is loaded and warmed in this process (so a run starts at once)."""
        with self._lock:
            model = self._models.get(canonical_name(name))
        return model is not None and is_warm(model)

    def get_warm(self, name: str | None) -> goose.GooseModel:
        """`get`, then `warm` the model if this process has not yet (under the load lock: one warm-up at a time)."""
        model = self.get(name)
        with self._lock:
            warm(model)
        return model

    def warm_up(self, name: str | None = None, run: bool = True) -> None:
        """Load a model, and warm it unless `run` is False, before the server accepts visitors, saying so in the
        log; a failure is logged (and shown again in the page when someone asks for the model)."""
        key, doing = canonical_name(name), "warming up" if run else "loading"
        what = " (load, head choice, cost table, a short run of each method)" if run else ""
        log.info("%s %s before the first visitor%s…", doing, key, what)
        start = time.perf_counter()
        try:
            self.get_warm(name) if run else self.get(name)
        except (goose.ModelLoadError, goose.UnsupportedModelError, OSError) as error:
            log.warning("%s %s failed: %s", doing, key, error)
            return
        log.info("%s is %s after %.1f s", key, "warm" if run else "loaded",
                 time.perf_counter() - start)

    def before_launch(self, zero_gpu: bool = False) -> None:
        """What the server does before it opens: load and warm the first offered model; on ZeroGPU, load (and
        do not run: the main process has no GPU) every offered model that fits in max_models, since ZeroGPU
        moves to the GPU only what the main process loaded before the launch."""
        if not zero_gpu:
            self.warm_up(next(iter(self.choices), None))
            return
        others = [name for name in self.choices if name != goose.DEFAULT_MODEL][:self.max_models]
        for name in self.choices:
            if name == goose.DEFAULT_MODEL or name in others:
                self.warm_up(name, run=False)

    def _evict_for_one_more(self) -> None:
        """Free least recently used unpinned models until one more fits in max_models."""
        evictable = [k for k in self._models if k not in self._pinned]
        freed = evictable[:max(0, len(evictable) - self.max_models + 1)]
        for key in freed:
            del self._models[key]
        if freed:
            log.info("freed %s to stay within %d models", ", ".join(freed), self.max_models)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
