"""The machine's yardsticks: bytes one forward pass streams, and the memory bandwidth that bounds it."""

from __future__ import annotations

import time

import torch


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters: what one forward pass streams from memory at least (tied weights once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def measure_memory_bandwidth(nbytes: int = 1 << 30, repeats: int = 3) -> dict[str, float]:
    """This machine's memory bandwidth in GB/s, best of `repeats`: reading (a sum) and copying (read + write).

    The yardstick beside "bandwidth achieved": a memory-bound decoder cannot
    stream its weights faster than this.
    """
    source = torch.ones(nbytes // 4, dtype=torch.float32)
    target = torch.zeros_like(source)
    best_read = best_copy = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        source.sum()
        best_read = min(best_read, time.perf_counter() - start)
        start = time.perf_counter()
        target.copy_(source)
        best_copy = min(best_copy, time.perf_counter() - start)
    return {"read": nbytes / best_read / 1e9, "copy": 2 * nbytes / best_copy / 1e9}
