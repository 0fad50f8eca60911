"""Prepacked, batch-invariant float32 linears for the model body on a CPU (oneDNN).

Why: on a CPU the body's linear layers are most of a verification pass. `nn.Linear` calls MKL's
sgemm, which is slow for the handful of rows a tree holds (measured on the embedded model, 2 AVX2
cores: a 4-row pass costs twice a 1-row pass) and rounds a row differently depending on how many
rows share the call. oneDNN with each weight reordered once for it computes the same float32
products: 4 rows then cost what 1 row costs, 16 rows 1.7x, and every row's result is bitwise the
same whatever else is in the batch, so the linears round a tree's rows as they round the
autoregressive step's single row (tests/test_packed.py checks both; attention still rounds them
differently: docs/METHOD.md, "Exact up to float32 near-ties").

The packed path is taken only inside `packed_linears()` (thread-local), which the Verifier enters:
every method, the autoregressive baseline included, runs through it, while the same model object
stays stock everywhere else (transformers' own `generate`, the bench's hf-generate, is what users
would otherwise run). GOOSE_PACKED_LINEARS=0 turns packing off, for A/B measurements.
"""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from goose.parallel import is_sharded

BATCH_HINT = 16  # rows oneDNN lays the weight out for: a typical tree
_state = threading.local()


def enabled() -> bool:
    return os.environ.get("GOOSE_PACKED_LINEARS", "1") != "0"


def kernels_exist() -> bool:
    try:
        torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def packed_product(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """rows @ weight.T (+ bias) through oneDNN, `weight` as `reorder_weight` laid it out."""
    return torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")


def reorder_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] laid out once for oneDNN's products of about BATCH_HINT rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), BATCH_HINT)


_single_row_apart: dict[tuple, bool] = {}  # (out, in, bias, threads) -> oneDNN rounds a lone row its own way


@torch.no_grad()
def single_row_apart(weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether oneDNN computes a 1-row call with another kernel than a call of several rows, for this weight's
    shape on this CPU (probed once per shape and thread count). Measured: on an AVX-512 Xeon the 2048 -> 640
    projection of the embedded model rounds a lone row differently, every other shape and row count agrees;
    on an AVX2 EPYC none did. Such a weight gets its lone rows computed as a pair (the same row twice), so every
    row still rounds as it would among others."""
    key = (*weight.shape, bias is not None, torch.get_num_threads())
    if key not in _single_row_apart:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(8, weight.shape[1], generator=generator)
        packed = reorder_weight(weight)
        together = packed_product(x, packed, bias)
        alone = torch.cat([packed_product(x[i:i + 1], packed, bias) for i in range(len(x))])
        _single_row_apart[key] = not torch.equal(alone, together)
    return _single_row_apart[key]


class _PackedWeight:
    """oneDNN's layout of one Linear's weight, re-made when the weight changes (in place or replaced)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        self.linear = linear
        self.key: tuple[int, int] | None = None
        self.weight: torch.Tensor | None = None
        self.pair_single_rows = False

    @torch.no_grad()
    def current(self) -> torch.Tensor:
        weight = self.linear.weight
        key = (weight.data_ptr(), weight._version)
        if key != self.key:
            self.weight, self.key = reorder_weight(weight), key
            self.pair_single_rows = single_row_apart(weight, self.linear.bias)
        return self.weight


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if not getattr(_state, "active", False) or x.dtype != torch.float32 or x.device.type != "cpu":
        return F.linear(x, self.weight, self.bias)
    rows = x.reshape(-1, x.shape[-1])
    packed = self._goose_packed
    weight = packed.current()
    if len(rows) == 1 and packed.pair_single_rows:
        out = packed_product(rows.repeat(2, 1), weight, self.bias)[:1]
    else:
        out = packed_product(rows, weight, self.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def plain_linears(body: torch.nn.Module) -> list[torch.nn.Linear]:
    """`body`'s plain `nn.Linear` layers, in model order. Exact type: subclasses (quantised, LoRA, ...) keep their
    own forward."""
    return [m for m in body.modules() if type(m) is torch.nn.Linear]


def pack_linears(body: torch.nn.Module) -> bool:
    """Give every plain float32 CPU `nn.Linear` of `body` a packed weight (once per model).
    True when the body runs packed inside `packed_linears()`."""
    if not enabled() or not kernels_exist():
        return False
    linears = plain_linears(body)
    if not linears or any(m.weight.dtype != torch.float32 or m.weight.device.type != "cpu" or is_sharded(m.weight)
                           for m in linears):
        return False  # a sharded weight's forward belongs to transformers' tensor-parallel wrapper
    for linear in linears:
        if not hasattr(linear, "_goose_packed"):
            linear._goose_packed = _PackedWeight(linear)
            linear._goose_packed.current()  # pack now: set-up belongs to the first call, not its first step
            linear.forward = types.MethodType(_forward, linear)
    return True


@contextmanager
def packed_linears() -> Iterator[None]:
    """Packed linears take over in this thread for the duration (where pack_linears installed them)."""
    previous = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = previous


def body_linears(model: torch.nn.Module) -> str:
    """How a verification pass runs the body's linears on this model: "packed" (oneDNN) or "stock"."""
    return "packed" if pack_linears(model.get_decoder()) else "stock"
