"""Running a benchmark: every method on the same prompts, interleaved per prompt, in one session.

Methods run interleaved per prompt so that drifts in machine load touch all
of them alike. Greedy runs are checked against autoregressive decoding: a
speed-up only counts if it is lossless. The numbers are defined in goose.metrics.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import torch

from goose import metrics
from goose.bench.diagnosis import (
    DIAGNOSE_FILE,
    POOLED_FILE,
    append_diagnoses,
    diagnose_prompt,
    load_diagnoses,
    write_pooled,
)
from goose.bench.machine import measure_memory_bandwidth, parameter_bytes
from goose.bench.methods import HF_METHODS, bench_methods, method_budget, with_baseline
from goose.bench.records import BenchRun, append_runs, load_runs
from goose.bench.report import write_report
from goose.bench.suites import BenchPrompt, format_prompt, load_suite
from goose.bench.summary import summarize, write_summary_csv
from goose.bench.what_if import CHECK_FILE, append_rows, check_prompt, load_rows, summarize_checks
from goose.costs import choose_head
from goose.decode import WARM_UP_TOKENS, generate, warm_up
from goose.heads.factory import HEAD_CHOICES, known_head
from goose.metrics import BASELINE, MethodMetrics
from goose.model import GooseModel
from goose.packed import body_linears
from goose.parallel import is_main_process, rank
from goose.target import eos_ids
from goose.trace import RunRecord, RunTotals

WHAT_IF_FOLDER = "what-if"  # beside runs.jsonl: one recorded trace of goose per prompt (--what-if)


@dataclass
class BenchSettings:
    """Everything a benchmark run depends on; stored beside the results."""

    suite: str
    methods: tuple[str, ...] = field(default_factory=bench_methods)
    limit: int | None = None
    budget: int | str | None = None  # None: each method's default budget (goose.Drafter.default_budget); or "auto"
    max_new_tokens: int = 128
    model: str | None = None
    threads: int = 2
    temperature: float = 0.0  # 0 = greedy; above, every method samples (seeded per prompt)
    what_if: bool = False  # also one untimed goose run per prompt recorded with its sources, for the what-if curves
    head: str = "auto"  # the LM head of every Goose method, the baseline too (goose.heads.factory.HEAD_CHOICES)
    tensor_parallel: bool = False  # the model split over the ranks of a torchrun launch (goose.parallel)
    diagnose: bool = False  # also one untimed run per prompt and tree method, recorded and diagnosed (greedy only)

    def __post_init__(self) -> None:
        if not known_head(self.head):
            raise ValueError(f"unknown head {self.head!r}; choose one of {', '.join(HEAD_CHOICES)}")


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
                     budget: int | str | None, temperature: float = 0.0, head: str = "auto") -> BenchRun:
    """One generation with a Goose method (greedy, or sampled with a per-prompt seed), timed by the library."""
    run = generate(goose_model, text, method, max_new_tokens, budget, temperature=temperature,
                   seed=sum(map(ord, prompt.id)) if temperature else None, head=head)
    return BenchRun.from_record(run, prompt.id, prompt.category)


def run_transformers(goose_model: GooseModel, prompt: BenchPrompt, text: str, method: str, max_new_tokens: int,
                     temperature: float = 0.0) -> BenchRun:
    """transformers' own `generate` (hf-generate), or its prompt lookup decoding (hf-pld), timed the same way:
    from the call, encoding included, to the last token. Its own float32 head, whatever the bench's head.

    Forward passes are counted with a hook, so tau is known too; the per-step
    accepted lengths and the prefill time are not.
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
    tokens = output[0, len(prompt_tokens):].tolist()
    wall = time.perf_counter() - start
    totals = metrics.with_rates(RunTotals(new_tokens=len(tokens), forward_passes=counter.calls, wall_s=wall,
                                          prefill_s=None))
    return BenchRun(prompt.id, prompt.category, method, len(prompt_tokens), tokens, goose_model.decode(tokens),
                    totals)


def run_one(goose_model: GooseModel, prompt: BenchPrompt, method: str, max_new_tokens: int,
            budget: int | str | None, temperature: float = 0.0, head: str = "auto") -> BenchRun:
    """One prompt x method, whichever implementation the method lives in, with a stopwatch around the call."""
    text = format_prompt(goose_model.tokenizer, prompt)
    start = time.perf_counter()
    if method in HF_METHODS:
        run = run_transformers(goose_model, prompt, text, method, max_new_tokens, temperature)
    else:
        name, budget = method_budget(method, budget)
        run = run_goose_method(goose_model, prompt, text, name, max_new_tokens, budget, temperature, head)
        run.method = method
    run.stopwatch_s = time.perf_counter() - start
    return run


def mark_lossless(runs: Iterable[BenchRun]) -> None:
    """Set `matches_autoregressive` on each run: its tokens equal autoregressive's on the same prompt."""
    runs = list(runs)
    reference = {run.prompt_id: run.tokens for run in runs if run.method == BASELINE}
    for run in runs:
        if run.prompt_id in reference:
            run.matches_autoregressive = metrics.lossless(run.tokens, reference[run.prompt_id])


# --- the whole benchmark ----------------------------------------------------------------------------------------

def default_out_dir(suite: str) -> Path:
    """bench-out/<suite>-<timestamp>."""
    return Path("bench-out") / f"{Path(suite).stem}-{datetime.now():%Y%m%d-%H%M%S}"


def machine_info(goose_model: GooseModel, settings: BenchSettings) -> dict[str, Any]:
    """What the numbers depend on: settings, model size, threads, versions, memory bandwidth, load."""
    import transformers

    return {"settings": asdict(settings), "model": goose_model.name,
            "parameter_bytes": parameter_bytes(goose_model.model), "device": str(goose_model.model.device),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "transformers": transformers.__version__, "memory_bandwidth_gb_s": measure_memory_bandwidth(),
            "load_average_start": os.getloadavg(), "started": datetime.now().isoformat(timespec="seconds"),
            "parallel": goose_model.parallel.to_dict() if goose_model.parallel else None}


def check_what_if(goose_model: GooseModel, prompt: BenchPrompt, settings: BenchSettings, out_dir: Path) -> None:
    """One goose run of `prompt` recorded with its sources (saved for the report's curves), replayed at every
    setting of goose.bench.what_if beside a real run at it; the rows go to what-if-check.jsonl."""
    text = format_prompt(goose_model.tokenizer, prompt)
    rows = check_prompt(goose_model, prompt.id, text, settings.max_new_tokens, settings.head,
                        out_dir / WHAT_IF_FOLDER, budget=settings.budget)
    append_rows(out_dir / CHECK_FILE, rows)


def diagnose_runs(goose_model: GooseModel, prompt: BenchPrompt, timed: Sequence[BenchRun], settings: BenchSettings,
                  out_dir: Path) -> None:
    """Each tree method of `prompt` once more, untimed, recorded with its sources and diagnosed (diagnose.jsonl)."""
    text = format_prompt(goose_model.tokenizer, prompt)
    append_diagnoses(out_dir / DIAGNOSE_FILE, diagnose_prompt(goose_model, prompt.id, text, timed,
                                                               settings.max_new_tokens, settings.budget, settings.head))


def warm_up_methods(goose_model: GooseModel, prompt: BenchPrompt, methods: Sequence[str], budget: int | str | None,
            temperature: float = 0.0, head: str = "auto") -> None:
    """One short untimed generation per method on the first prompt, so that no timed run pays for once-per-model
    set-up: Goose's methods through the library's warm-up (goose.decode.warm_up), transformers' through its own."""
    text = format_prompt(goose_model.tokenizer, prompt)
    for method in methods:
        if method in HF_METHODS:
            run_one(goose_model, prompt, method, WARM_UP_TOKENS, budget, temperature, head)
        else:
            name, own_budget = method_budget(method, budget)
            warm_up(goose_model, name, own_budget, head, temperature, text, WARM_UP_TOKENS)


def run_prompt(goose_model: GooseModel, prompt: BenchPrompt, methods: Sequence[str], max_new_tokens: int,
               budget: int | str | None, on_run: Callable[[BenchRun], None] = lambda run: None,
               temperature: float = 0.0, head: str = "auto") -> list[BenchRun]:
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


def write_results(out_dir: Path, runs: Sequence[BenchRun], meta: dict[str, Any]) -> list[MethodMetrics]:
    """summary.csv, meta.json and report.html from the runs; returns the per-method metrics."""
    summaries = summarize(runs, meta["parameter_bytes"], greedy=not meta.get("settings", {}).get("temperature"))
    write_summary_csv(out_dir / "summary.csv", summaries)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    traces = [RunRecord.load(path) for path in sorted((out_dir / WHAT_IF_FOLDER).glob("*.json"))]
    checks = summarize_checks(load_rows(out_dir / CHECK_FILE))
    diagnosed = load_diagnoses(out_dir / DIAGNOSE_FILE)
    if diagnosed:
        write_pooled(out_dir / POOLED_FILE, diagnosed)
    write_report(out_dir / "report.html", runs, summaries, meta, traces, checks, diagnosed)
    return summaries


def rebuild_results(out_dir: Path) -> list[MethodMetrics]:
    """Summary and report again from a benchmark folder's runs.jsonl and meta.json (also a partial one)."""
    meta = json.loads((out_dir / "meta.json").read_text(encoding="utf-8"))
    return write_results(out_dir, load_runs(out_dir / "runs.jsonl"), meta)


def run_bench(settings: BenchSettings, out_dir: Path, goose_model: GooseModel | None = None,
              progress: bool = True) -> tuple[list[MethodMetrics], dict[str, Any]]:
    """Run the suite, methods interleaved per prompt; write runs.jsonl (as it goes), summary.csv, meta.json
    and report.html under `out_dir`. Returns the per-method metrics and the machine info.
    """
    from tqdm import tqdm

    from goose.model import load_model

    prompts = load_suite(settings.suite, settings.limit)
    methods = with_baseline(settings.methods)
    torch.set_num_threads(settings.threads)
    goose_model = goose_model or load_model(settings.model, tensor_parallel=settings.tensor_parallel)
    if not is_main_process():  # the other ranks of a tensor-parallel run do the same work; rank 0 keeps the files
        out_dir = Path(tempfile.mkdtemp(prefix=f"goose-bench-rank{rank()}-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_path = out_dir / "runs.jsonl"
    runs_path.write_text("", encoding="utf-8")
    (out_dir / DIAGNOSE_FILE).unlink(missing_ok=True)
    meta = machine_info(goose_model, settings)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    warm_up_methods(goose_model, prompts[0], methods, settings.budget, settings.temperature, settings.head)
    meta["head_used"] = choose_head(goose_model, settings.head)  # what "auto" picked on this machine
    meta["body_linears"] = body_linears(goose_model.model)  # every method's verification pass (goose.packed)

    runs: list[BenchRun] = []
    with tqdm(total=len(prompts) * len(methods), desc="bench", unit="run", disable=not progress) as bar:
        def advance(run: BenchRun) -> None:
            bar.set_postfix_str(f"{run.prompt_id} {run.method} {metrics.tokens_per_s(run.totals):.1f} tok/s")
            bar.update()

        for prompt in prompts:
            prompt_runs = run_prompt(goose_model, prompt, methods, settings.max_new_tokens, settings.budget, advance,
                                     settings.temperature, settings.head)
            append_runs(runs_path, prompt_runs)
            runs.extend(prompt_runs)
            if settings.what_if and not settings.temperature:
                check_what_if(goose_model, prompt, settings, out_dir)
            if settings.diagnose and not settings.temperature:  # after the timed runs, off their clocks
                diagnose_runs(goose_model, prompt, prompt_runs, settings, out_dir)
    meta["load_average_end"] = os.getloadavg()
    summaries = write_results(out_dir, runs, meta)
    if not is_main_process():
        shutil.rmtree(out_dir)
    return summaries, meta
