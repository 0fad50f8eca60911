"""Run model callbacks on a Hugging Face ZeroGPU Space, and unchanged everywhere else.

On ZeroGPU (the `spaces` package sets SPACES_ZERO_GPU) the main process never holds a GPU: a
function decorated with `spaces.GPU` runs in a forked worker that is lent one for `duration`
seconds. `spaces` patches torch when it is imported, so that `model.to("cuda")` in the main process
(goose.load_model does it, as torch.cuda.is_available() then says yes) keeps the weights in CPU
memory and the worker finds them on the GPU. Hence: import `spaces` before anything touches CUDA
(`import_spaces`), load models at start-up in the main process, and run them only inside
`on_gpu` functions. A worker is a fork: what it caches (the head choice, the Stop switches) does not
come back to the main process, so each GPU call warms its own model state (`app.models.warm`, through goose.warm_up).

Off ZeroGPU (a CPU Space, a dedicated GPU Space where CUDA is simply present, a laptop)
`on_gpu` returns the function itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

ZERO_GPU_ENV = "SPACES_ZERO_GPU"  # what the `spaces` package itself reads (spaces/config.py)

F = TypeVar("F", bound=Callable[..., Any])


def on_zero_gpu(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs on a ZeroGPU Space (the same test as the `spaces` package's)."""
    env = os.environ if environ is None else environ
    return env.get(ZERO_GPU_ENV, "").strip().lower() in ("1", "t", "true")


def import_spaces() -> Any:
    """The `spaces` module on a ZeroGPU Space (imported now, so it patches torch before CUDA is touched);
    None elsewhere or when the package is absent."""
    if not on_zero_gpu():
        return None
    try:
        import spaces
    except ImportError:
        return None
    return spaces


def on_gpu(duration: int | Callable[..., int] = 60) -> Callable[[F], F]:
    """A decorator: `spaces.GPU(duration=...)` on a ZeroGPU Space, the function unchanged elsewhere.

    `duration` is the most seconds one call holds the GPU (or a function of the call's arguments
    giving it); ZeroGPU refuses calls whose duration exceeds the visitor's quota."""
    def decorate(function: F) -> F:
        spaces = import_spaces()
        return function if spaces is None else spaces.GPU(duration=duration)(function)

    return decorate
