"""What things cost on this device, measured once and kept (issue: speed).

  choose_head   the fastest exact LM head, timed once per model;
  cost_table    seconds of one verification pass per tree size (body + LM head + top-k), measured once per
                model, device, thread count, head and kind of body linears, and cached on disk;
  autoregressive_cost  seconds of one plain autoregressive pass (the root alone, without the adjacency table's
                top-k), measured beside the table;
  prefill_row_cost  seconds per prompt row of the LM head's top-k that a prefill pays for the adjacency table,
                measured beside the table;
(goose.budget.interpolate_cost reads any tree size off such a table.)
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Mapping, Sequence

import torch

import goose.tree
import goose.verify
from goose.assets import cache_dir, kept_on_disk
from goose.config import GooseConfig
from goose.heads.factory import HEAD_CHOICES, head_for, heads_here, known_head
from goose.heads.routing import parse_routed, routed_kind
from goose.heads.screens import HEAD_REVISION
from goose.model import GooseModel
from goose.packed import body_linears
from goose.parallel import agreed_costs, is_tensor_parallel
from goose.sources import AdjacencyTable, ContextMatcher
from goose.sources.prior import find_prior
from goose.tree import BRANCH, DraftTree, build_goose_tree
from goose.verify import Verifier
from goose.walk import GreedyWalker

# 1 is the root alone: a plain autoregressive step. Where no tree pays for its extra rows (a steep
# cost curve, as on a CPU, and drafts that are rarely right) the tuner falls back to it rather than
# run below the speed of plain decoding.
BUDGET_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
COST_FORMAT = 8  # 2: the grid starts at 1; 3: measured on text; 4: keyed by the body's linears; 5: real trees;
# 6: least time over interleaved rounds; 7: with the autoregressive pass and a prefill row; 8: a prefill row ranked
# among the prior's vocabulary
# The key the autoregressive pass is kept under on disk, beside the tree sizes (1 and up). A method that keeps no
# adjacency table (autoregressive decoding, pld, suffix) skips its top-k of each row: 0.2-0.7 ms of a 51 ms 1-node
# pass in a warm process, 5 ms in a fresh one's first rounds (embedded model, 2-core EPYC). Priced at the table's
# 1-node pass, an autoregressive baseline read up to 9% dear. Split off as the table is read: the tuner weighs tree
# sizes only.
AUTOREGRESSIVE = 0
# And the seconds per prompt row of the head's top-k, which a prefill pays for the rows an adjacency table keeps
# (goose.target.ModelTarget.prefill) and autoregressive decoding does not. Timed as a default run pays it: ranked
# among the model's prior's vocabulary where it has one (8 ms for a 132-token prompt, embedded model, 2-core AVX2
# EPYC; 199 ms over the whole vocabulary). It prices that part of a replay's head start (goose.whatif.run).
PREFILL_ROW = -1
PREFILL_ROWS = 64  # rows it is timed on, divided out


def median_seconds(call: Callable[[], object], repeats: int, device: torch.device,
                   after: Callable[[], object] | None = None) -> float:
    """Median wall time of `repeats` calls on `device` (waiting for its kernels on a GPU); `after`, when given,
    runs untimed after each call (to restore the state the next one starts from)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if after is not None:
            after()
    return sorted(times)[len(times) // 2]


def choose_head(goose_model: GooseModel, kind: str = "auto") -> str:
    """The head a run applies: `kind` itself, or for "auto" the fastest exact head on this device for every
    call size, timed once per model (`_faster_head`). The bf16 screen pays where bfloat16 products are fast
    (AVX-512 BF16, AMX, GPUs) and on many rows; on a plain AVX2 CPU bf16 is emulated and the int8 screen is
    the fast one."""
    if not known_head(kind):
        raise ValueError(f"unknown head {kind!r}; choose one of {', '.join(HEAD_CHOICES)}")
    if kind != "auto":
        return kind
    if goose_model.cache.head_choice is None:
        goose_model.cache.head_choice = kept_on_disk(cache_dir() / "head-choice.json", _choice_key(goose_model),
                                                lambda: _faster_head(goose_model))
    return goose_model.cache.head_choice


def _choice_key(goose_model: GooseModel) -> str:
    """The timing a head choice depends on: model, device, thread count, and the heads built here."""
    weight = goose_model.model.get_output_embeddings().weight
    return (f"v1|{goose_model.name}|{weight.device}|{weight.dtype}|threads={torch.get_num_threads()}"
            f"|heads={','.join(_contenders(goose_model))}|revision={HEAD_REVISION}")


def _contenders(goose_model: GooseModel) -> list[str]:
    """The heads worth timing here: those built on this device, bf16 on a CPU only where it is not emulated."""
    device = goose_model.model.get_output_embeddings().weight.device
    emulated_bf16 = device.type == "cpu" and not torch.backends.cpu.get_cpu_capability().startswith(("AVX512", "AMX"))
    return [kind for kind in heads_here(goose_model) if not (kind == "screened" and emulated_bf16)]


ROUTE_ROWS = (1, 2, 4, 8, 16, 32)  # rows per call the heads are timed at: the autoregressive step to big trees


def fastest_route(seconds: Mapping[str, Mapping[int, float]]) -> str:
    """The head, or routed pair of heads (goose.heads.routing.routed_kind), with the least time over the timed call
    sizes, each size counted relative to its fastest head (so that big calls do not outweigh small ones).
    A pair must win: a single head is kept where it is fastest, or as fast, at every size."""
    sizes = sorted(next(iter(seconds.values())))
    best = {n: min(times[n] for times in seconds.values()) for n in sizes}

    def score(head_at: Callable[[int], str]) -> float:
        return sum(seconds[head_at(n)][n] / best[n] for n in sizes)

    options = {kind: (lambda n, kind=kind: kind) for kind in seconds}
    for small in seconds:
        for large in seconds:
            for rows in sizes[1:]:
                if small != large:
                    options[routed_kind(small, large, rows)] = (
                        lambda n, small=small, large=large, rows=rows: small if n < rows else large)
    return min(options, key=lambda kind: (score(options[kind]), "@" in kind))


@torch.inference_mode()
def _faster_head(goose_model: GooseModel, sizes: Sequence[int] = ROUTE_ROWS, repeats: int = 3,
                 prefix: int = 256) -> str:
    weight = goose_model.model.get_output_embeddings().weight
    kinds = _contenders(goose_model)
    # The rows of a real spine tree's pass (goose.costs.measurement_trees), its first n for n rows: confident
    # spine rows and flat rejected-branch rows, as a run's calls hold them. A screen's cost depends on how
    # flat its rows are (measured: timed on confident rows alone, the int8 screen looked as fast as bf16 up
    # to 32 rows; on real trees it costs more from 8).
    verifier = Verifier(goose_model.model)
    text = measurement_text(goose_model, prefix + 2 * max(sizes))
    tree = measurement_trees(goose_model, verifier, text, prefix, [max(sizes)], kinds[0])[max(sizes)]
    hidden = verifier.forward_tree(tree).float()
    seconds: dict[str, dict[int, float]] = {}
    for kind in kinds:
        head = head_for(goose_model, kind)
        head.greedy(hidden[:sizes[0]], 10)  # warm-up
        seconds[kind] = {n: median_seconds(lambda: head.greedy(hidden[:n], 10), repeats,  # noqa: B023
                                           weight.device) for n in sizes}
    chosen = fastest_route(seconds)
    used = parse_routed(chosen) or (chosen,)
    for kind in kinds:  # the losers' weight copies are memory nobody will use
        if kind not in (*used, "full"):
            goose_model.cache.heads.pop(kind, None)
    return chosen


def _measure_text() -> str:
    """Text to measure verification on: this package's own source (code and English), always at hand."""
    return inspect.getsource(goose.tree) + inspect.getsource(goose.verify)


def measurement_text(goose_model: GooseModel, length: int) -> list[int]:
    """At least `length` tokens of the measurement text (repeated where it is shorter)."""
    text = goose_model.encode(_measure_text())
    while len(text) < length:
        text = text + text
    return text


def measurement_trees(goose_model: GooseModel, verifier: Verifier, text: Sequence[int], prefix: int,
                      sizes: Sequence[int], head: str) -> dict[int, DraftTree]:
    """The spine trees of each of `sizes` nodes a run would draft at token `prefix` of `text`, from one pass over
    the prefix that seeds the adjacency table with the prefix's own rows: real branches, whose rows are flatter
    than text's (a screened head pays for that). Leaves `verifier` holding the prefix. Filled up with the text's
    own tokens where the sources run short."""
    config = GooseConfig()
    verifier.truncate(0)
    hidden = verifier.forward_chain(list(text[:prefix]))
    verifier.truncate(prefix)
    adjacency = AdjacencyTable.from_config(config)
    top = head_for(goose_model, head).top(hidden, config.top_k)
    adjacency.refresh(text[:prefix], [None, *text[:prefix - 1]], top.indices, top.values)
    matcher = ContextMatcher.from_config(config)
    matcher.extend(list(text[:prefix + 1]))
    match = matcher.match()
    trees = {}
    for size in sizes:
        tree = trees[size] = build_goose_tree(text[prefix], text[prefix - 1], match, adjacency, config, size,
                                              config.ema_start)
        filler = iter(text[prefix + 1:])
        while len(tree) < size:
            tree.add(next(filler), len(tree) - 1, BRANCH)
    return trees


def cost_key(goose_model: GooseModel, threads: int, head: str) -> str:
    weight = goose_model.model.get_input_embeddings().weight
    ranks = f"|ranks={torch.distributed.get_world_size()}" if is_tensor_parallel(goose_model.model) else ""
    return (f"v{COST_FORMAT}|{goose_model.name}|{weight.device}|{weight.dtype}|threads={threads}|head={head}"
            f"|linears={body_linears(goose_model.model)}|revision={HEAD_REVISION}{ranks}")


@torch.inference_mode()
def measure_costs(goose_model: GooseModel, sizes: Sequence[int] = BUDGET_GRID, prefix: int = 256,
                  repeats: int = 5, head: str = "screened",
                  between: Callable[[], object] | None = None) -> dict[int, float]:
    """Seconds of one verification step per node count (the least over interleaved rounds, `least_seconds`):
    the tree's forward pass, the greedy walk along it through the run's LM head (with the adjacency table's
    top-k) and the accepted path kept in the cache; under AUTOREGRESSIVE, the same for the root alone without
    the top-k (a plain autoregressive step); under PREFILL_ROW, the head's top-k of a prompt row.

    Timed on the spine trees a run drafts in real text (`measurement_trees`), not on text chains: a real
    tree's rejected branches have flatter rows, which cost a screened head more, and the walk and the cache's
    upkeep are part of every step (measured against text chains, 2-core AMX Xeon: real steps cost 1.08x the
    chain at 1 node, 1.4x at 23). The tuner reads this table as it is, so that it is fixed before any run.
    `between`, when given, runs untimed after every call (a caller's cancel check may raise there)."""
    verifier = Verifier(goose_model.model)
    walker = GreedyWalker(head_for(goose_model, head))
    text = measurement_text(goose_model, prefix + 2 * max(sizes))
    trees = measurement_trees(goose_model, verifier, text, prefix, sorted(set(sizes)), head)

    def step(tree: DraftTree, top_k: int) -> None:
        verification, _ = walker.walk(tree, verifier.forward_tree(tree), top_k)
        verifier.commit([0, *verification.accepted])

    calls = {n: (lambda tree=trees[n]: step(tree, GooseConfig().top_k)) for n in sorted(set(sizes))}
    calls[AUTOREGRESSIVE] = lambda: step(DraftTree.rooted_at(text[prefix]), 0)
    prompt_rows = verifier.forward_chain(list(text[prefix:prefix + PREFILL_ROWS]))  # text rows, as a prompt's
    verifier.truncate(prefix)
    prior = find_prior(goose_model.name)  # a run over it ranks its prompt rows among its vocabulary (a default run)
    vocabulary = prior.harvest_vocabulary(text[prefix:prefix + PREFILL_ROWS]) if prior is not None else None
    calls[PREFILL_ROW] = lambda: walker.head.top_among(prompt_rows, vocabulary, GooseConfig().top_k)
    def after() -> None:
        verifier.truncate(prefix)  # the same prefix each time
        if between is not None:
            between()

    seconds = least_seconds(calls, repeats, goose_model.model.device, after=after)
    seconds[PREFILL_ROW] /= len(prompt_rows)
    return seconds


def least_seconds(calls: Mapping[int, Callable[[], object]], rounds: int, device: torch.device,
                  after: Callable[[], object] | None = None) -> dict[int, float]:
    """Least wall time of each call over `rounds` rounds that take every call in turn (after one untimed
    warm-up round). Another process on a shared machine only ever adds time, and a burst of it lands on one
    round rather than on one size: a table timed size by size, with medians, once read 1.75 s for a 1-node
    step beside 0.59 s for 16 nodes (2-core EPYC, while a test suite ran), and steered every later run."""
    for call in calls.values():
        call()
        if after is not None:
            after()
    least = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for n, call in calls.items():
            least[n] = min(least[n], median_seconds(call, 1, device, after))
    return least


def no_dearer_than_bigger(costs: Mapping[int, float]) -> dict[int, float]:
    """Each size's cost capped by every bigger size's: a pass of fewer rows does less work, and noise on a
    shared machine only ever adds time, so a size measured dearer than a bigger one was disturbed
    (measured: a 24-node pass at 323 ms beside 290 ms for 32 nodes)."""
    capped, cheapest = {}, float("inf")
    for n in sorted(costs, reverse=True):
        cheapest = capped[n] = min(costs[n], cheapest)
    return dict(sorted(capped.items()))


def cost_table(goose_model: GooseModel, cache_file: str | os.PathLike | None = None,
               head: str = "screened") -> dict[int, float]:
    """This device's verification cost per node count with the given LM head, measured on first use and cached
    (on disk for every process, and with the model so that a run does not read the file again)."""
    return dict(_kept_costs(goose_model, cache_file, head)[0])


def autoregressive_cost(goose_model: GooseModel, cache_file: str | os.PathLike | None = None,
                        head: str = "screened") -> float | None:
    """Seconds of one plain autoregressive pass on this device, measured with its cost table (None where the
    table holds none)."""
    return _kept_costs(goose_model, cache_file, head)[1]


def prefill_row_cost(goose_model: GooseModel, cache_file: str | os.PathLike | None = None,
                     head: str = "screened") -> float | None:
    """Seconds per prompt row of the head's top-k in a prefill that keeps an adjacency table, measured with the
    cost table (None where the table holds none)."""
    return _kept_costs(goose_model, cache_file, head)[2]


def _kept_costs(goose_model: GooseModel, cache_file: str | os.PathLike | None,
                head: str) -> tuple[dict[int, float], float | None, float | None]:
    key = cost_key(goose_model, torch.get_num_threads(), head)
    path = str(cache_file or cache_dir() / "verify-costs.json")
    kept = goose_model.cache.cost_tables
    if (path, key) not in kept:
        # split over ranks, every rank measures and all keep the slowest rank's times: their tuners then agree
        table = kept_on_disk(path, key, lambda: {
            str(n): c for n, c in agreed_costs(goose_model.model, measure_costs(goose_model, head=head)).items()})
        kept[path, key] = split_costs({int(n): c for n, c in table.items()})
    return kept[path, key]


def split_costs(seconds: Mapping[int, float]) -> tuple[dict[int, float], float | None, float | None]:
    """measure_costs' seconds as (the tree sizes' table, no size dearer than a bigger one; the autoregressive pass;
    a prompt row's top-k), the last two None where not measured."""
    sizes = no_dearer_than_bigger({n: c for n, c in seconds.items() if n >= 1})
    return sizes, seconds.get(AUTOREGRESSIVE), seconds.get(PREFILL_ROW)
