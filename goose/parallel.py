"""Tensor parallelism: one model sharded over several processes (docs/PARALLEL.md, "Bigger than one device").

`torchrun --nproc-per-node N -m goose ... --tensor-parallel` starts N processes (ranks); transformers shards
every attention and MLP projection over them (its `tp_plan`) and each forward pass all-reduces their
partial results, so every rank ends a pass with the same final hidden states and the same logits. Drafting
runs on the host of every rank from those replicated logits: the ranks draft the same tree and stay in
lockstep without sending a token. That is an assumption worth checking, not trusting: every verification
pass first gathers a hash of each rank's tree and prefix (`check_lockstep`) and stops the run where they differ.

What would break the lockstep is any decision a rank takes from its own measurements: the budget tuner's
measured pass times (`agreed_seconds`, `agreed_costs`: the slowest rank's, which is what a step costs) and an
unseeded sampler (`agreed_seed`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

# The projections that hold the attention's keys and values: kept whole on every rank where the ranks
# outnumber a single key/value head (multi-query attention, as Gemma 3 270M's 4 query heads over 1 KV head).
KEY_VALUE_MODULES = ("k_proj", "v_proj", "k_norm")
REPLICATE = "replicate"  # transformers' tp style: every rank keeps the whole parameter
# A rank stuck in a collective with a dead peer gives up after this (torchrun normally stops it sooner).
COLLECTIVE_TIMEOUT = timedelta(seconds=60)


class ParallelError(ValueError):
    """Tensor parallelism cannot run as asked; every rank raises the same one."""


@dataclass
class Parallel:
    """How a model is split over the ranks, for the run's record.

    replicated: plan entries kept whole on every rank instead of split (and why: `reasons`)
    reasons:    piece -> why it runs differently under tensor parallelism (the KV heads, the body's
                linears, the LM head)
    """

    world_size: int
    backend: str
    replicated: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def rank() -> int:
    """This process's rank: torchrun's RANK, 0 outside torchrun."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """The rank that prints and writes files (the others run the same work silently)."""
    return rank() == 0


def join_process_group(device: str) -> str:
    """The process group torchrun set up for, joined once: gloo on CPUs, NCCL on CUDA. Returns the backend."""
    if not dist.is_available():
        raise ParallelError("tensor parallelism needs torch.distributed, which this build of torch lacks")
    if not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise ParallelError("tensor parallelism needs a process group: launch with "
                                "`torchrun --nproc-per-node N -m goose ... --tensor-parallel`")
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if cuda else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return dist.get_backend()


def shard_plan(config, world_size: int, name: str) -> Parallel:
    """Check that `config`'s model splits over `world_size` ranks and adapt its plan (in place) where the
    ranks outnumber a single key/value head. Raises ParallelError where it cannot be split."""
    text = config.get_text_config(decoder=True)
    plan = dict(getattr(text, "base_model_tp_plan", None) or {})
    if not plan:
        raise ParallelError(f"model {name!r} has no tensor-parallel plan (its config's base_model_tp_plan is "
                            f"empty); run it in one process, or spread it with --device auto")
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    if heads % world_size:
        fits = [n for n in range(2, heads + 1) if heads % n == 0]
        raise ParallelError(f"{world_size} processes cannot split the {heads} query heads of {name!r}; "
                            f"use --nproc-per-node in {fits}")
    parallel = Parallel(world_size, dist.get_backend() if dist.is_initialized() else "")
    if kv_heads % world_size:
        if kv_heads != 1:  # replicated KV heads pair up with the right query heads only when there is one
            raise ParallelError(f"{world_size} processes cannot split the {kv_heads} key/value heads of {name!r}; "
                                f"use a process count that divides {kv_heads}")
        parallel.replicated = [key for key in plan if key.rsplit(".", 1)[-1] in KEY_VALUE_MODULES]
        plan.update(dict.fromkeys(parallel.replicated, REPLICATE))
        text.base_model_tp_plan = plan
        parallel.reasons["key_value_heads"] = (f"1 key/value head over {world_size} ranks: "
                                               f"{', '.join(KEY_VALUE_MODULES)} replicated on every rank")
    return parallel


def is_sharded(tensor: torch.Tensor) -> bool:
    """A tensor split over ranks (a DTensor), which the plain-tensor fast paths (goose.packed, the screened
    heads) cannot use."""
    if not dist.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def pair_replicated_heads(parallel: Parallel, model: torch.nn.Module) -> None:
    """Where the KV projections are replicated, each rank holds 1/world of the query heads but the whole
    (single) KV head: its attention layers must repeat that head for their own query heads, not for all."""
    if not parallel.replicated:
        return
    heads = model.config.get_text_config(decoder=True).num_attention_heads
    for module in model.modules():
        if hasattr(module, "num_key_value_groups"):
            module.num_key_value_groups = heads // parallel.world_size


def note_fallbacks(parallel: Parallel, model: torch.nn.Module) -> None:
    """Record which of Goose's plain-tensor fast paths step aside for the plain path on this sharded model."""
    if any(is_sharded(m.weight) for m in model.get_decoder().modules() if isinstance(m, torch.nn.Linear)):
        parallel.reasons["body_linears"] = ("stock: the body's linears are split over the ranks (DTensor) and "
                                            "transformers' tensor-parallel forward runs them; oneDNN prepacking "
                                            "(goose.packed) needs a whole plain weight")
    if is_sharded(model.get_output_embeddings().weight):
        parallel.reasons["head"] = ("full: the LM head is split by vocabulary over the ranks, each computes its "
                                    "share of the logits and they are gathered; the int8 and bf16 screens "
                                    "(goose.heads.screens) need the whole float32 head on one rank")


def is_tensor_parallel(model: torch.nn.Module) -> bool:
    """Whether `model` was loaded sharded over several ranks (transformers records its distributed config)."""
    config = getattr(model.config, "distributed_config", None)
    return bool(config is not None and (config.tp_size or 1) > 1 and dist.is_initialized())


def _gather(value: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's `value` (one small tensor each), in rank order."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else value.device
    value = value.to(device)
    gathered = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, value)
    return [g.cpu() for g in gathered]


def check_lockstep(prefix_length: int, tokens: Sequence[int], parents: Sequence[int],
                   depths: Sequence[int]) -> None:
    """Raise ParallelError unless every rank is about to verify the same nodes on the same prefix.
    One all-gather of an 8-byte hash per pass; the pass itself all-reduces twice per layer."""
    digest = hashlib.blake2b(repr((prefix_length, list(tokens), list(parents), list(depths))).encode(),
                             digest_size=8).digest()
    mine = torch.tensor([int.from_bytes(digest, "little", signed=True)])
    hashes = [int(h) for h in _gather(mine)]
    if len(set(hashes)) > 1:
        raise ParallelError(f"the ranks lost lockstep: rank {rank()} verifies {len(tokens)} nodes at position "
                            f"{prefix_length} and the others hold other trees (hashes {hashes})")


def agreed_seconds(model: torch.nn.Module, seconds: float) -> float:
    """A duration every rank measured, as the slowest rank measured it (the step waits for it); the value
    itself outside tensor parallelism. Decisions taken from it then agree on every rank."""
    if not is_tensor_parallel(model):
        return seconds
    return max(float(s) for s in _gather(torch.tensor([seconds], dtype=torch.float64)))


def agreed_costs(model: torch.nn.Module, costs: Mapping[int, float]) -> dict[int, float]:
    """A cost table each rank measured, as the slowest rank measured each size (see agreed_seconds)."""
    sizes = sorted(costs)
    if not is_tensor_parallel(model):
        return {n: costs[n] for n in sizes}
    mine = torch.tensor([costs[n] for n in sizes], dtype=torch.float64)
    slowest = torch.stack(_gather(mine)).amax(0)
    return dict(zip(sizes, slowest.tolist()))


def agreed_seed() -> int:
    """A random seed drawn on rank 0 and shared by every rank (a sampled run under tensor parallelism)."""
    return int(_gather(torch.tensor([torch.seed() % 2 ** 62]))[0])
