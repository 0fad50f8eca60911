"""The what-if check of the bench (`--what-if`): each prompt's goose run replayed at other settings, beside
real runs at those settings, so that every estimate is shown with its measured error.

Per prompt: one goose run at the bench's settings recorded with its sources (saved for the
report's curves), then for every setting of `WHAT_IF_SETTINGS` the replay's tau and estimated
speed-up (goose.check.run_what_if) and a real run at that setting, against the autoregressive run
(run once per prompt). Errors are pooled as goose.metrics pools: tokens over passes, tokens/s
over the baseline's tokens/s.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from goose import metrics
from goose.check import run_what_if
from goose.decode import generate, warm_up
from goose.drafters import Balanced, SpineTree
from goose.model import GooseModel
from goose.trace import RunTotals
from goose.whatif import Estimated, relative_error

# The settings the check replays and runs: budgets, the spine's two extremes, the isotropic control.
WHAT_IF_SETTINGS: tuple[dict[str, Any], ...] = (
    *({"method": SpineTree.name, "budget": b} for b in (4, 8, 16, 32, 64)),
    {"method": SpineTree.name, "budget": 16, "spine_share": 0.0},
    {"method": SpineTree.name, "budget": 16, "spine_share": 1.0},
    *({"method": Balanced.name, "budget": b} for b in (8, 16)),
)
CHECK_FILE = "what-if-check.jsonl"


def setting_name(settings: dict[str, Any]) -> str:
    """A setting as one short label: 'goose budget 16 spine_share 0.0'."""
    return " ".join([str(settings.get("method", "")), *(f"{k} {v}" for k, v in settings.items() if k != "method")])


@dataclass
class CheckRow:
    """One prompt at one setting: the replay's estimate and the real run's measurement."""

    prompt_id: str
    setting: str
    tokens: int
    estimated_passes: int
    real_passes: int
    estimated_s: float
    real_s: float
    estimated_baseline_s: float
    real_baseline_s: float
    same_tokens: bool


def check_prompt(goose_model: GooseModel, prompt_id: str, text: str, max_new_tokens: int, head: str,
                 folder: Path, settings_grid: Sequence[dict[str, Any]] = WHAT_IF_SETTINGS,
                 budget: int | str | None = None, shadow: int = 0) -> list[CheckRow]:
    """Record goose on `text` (at `budget`, auto when None; saved under `folder`) as the app's Explore records it,
    or with a shadow tree of `shadow` nodes (rows for the replays' own rejected nodes: goose.decode.Recorder),
    replay it at every setting and run each for real."""
    folder.mkdir(parents=True, exist_ok=True)
    recorded = generate(goose_model, text, SpineTree.name, max_new_tokens, budget, record_sources=True, head=head,
                        shadow_budget=shadow)
    recorded.save(folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', prompt_id)}.json")
    rows = []
    for settings in settings_grid:
        result = run_what_if(recorded, check=True, model=goose_model, **settings)
        real = result.measured
        rows.append(CheckRow(prompt_id, setting_name(settings), result.tokens, result.passes,
                             real.run.totals.forward_passes, result.totals.wall_s, real.wall_s,
                             result.baseline.wall_s, real.baseline.totals.wall_s,
                             real.same_tokens and real.run.tokens == recorded.tokens))
    return rows


def append_rows(path: Path, rows: Iterable[CheckRow]) -> None:
    with path.open("a", encoding="utf-8") as file:
        for row in rows:
            file.write(json.dumps(asdict(row)) + "\n")


def load_rows(path: Path) -> list[CheckRow]:
    if not path.exists():
        return []
    return [CheckRow(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _timed(tokens: int, passes: int, seconds: float) -> Estimated:
    return Estimated("", RunTotals(new_tokens=tokens, forward_passes=passes, wall_s=seconds))


def summarize_checks(rows: Sequence[CheckRow]) -> list[dict[str, Any]]:
    """Per setting, pooled over prompts: estimated and real tau and speed-up, their errors, the worst prompt's
    tau error, and whether every real run produced the recorded tokens."""
    table = []
    for setting in dict.fromkeys(row.setting for row in rows):
        chosen = [row for row in rows if row.setting == setting]
        estimated = {r.prompt_id: _timed(r.tokens, r.estimated_passes, r.estimated_s) for r in chosen}
        real = {r.prompt_id: _timed(r.tokens, r.real_passes, r.real_s) for r in chosen}
        estimated_base = {r.prompt_id: _timed(r.tokens, r.tokens, r.estimated_baseline_s) for r in chosen}
        real_base = {r.prompt_id: _timed(r.tokens, r.tokens, r.real_baseline_s) for r in chosen}
        tau_estimate, tau_real = metrics.pooled_tau(estimated.values()), metrics.pooled_tau(real.values())
        speedup_estimate = metrics.pooled_speedup(estimated, estimated_base)
        speedup_real = metrics.pooled_speedup(real, real_base)
        worst = max((abs(relative_error(metrics.tau(estimated[p].totals), metrics.tau(real[p].totals)) or 0.0)
                     for p in estimated), default=0.0)
        table.append({"setting": setting, "prompts": len(chosen), "tau_estimate": tau_estimate, "tau_real": tau_real,
                      "tau_error": relative_error(tau_estimate, tau_real), "worst_prompt_tau_error": worst,
                      "speedup_estimate": speedup_estimate, "speedup_real": speedup_real,
                      "speedup_error": relative_error(speedup_estimate, speedup_real),
                      "same_tokens": all(r.same_tokens for r in chosen)})
    return table


CHECK_HEADER = ["setting", "prompts", "τ replayed", "τ real", "error", "worst prompt", "speed-up estimated",
                "speed-up measured", "error", "same tokens"]


def check_cells(summary: dict[str, Any]) -> list[str]:
    """One setting's summary as the cells of CHECK_HEADER."""
    return [summary["setting"], str(summary["prompts"]), f"{summary['tau_estimate']:.2f}",
            f"{summary['tau_real']:.2f}", f"{100 * summary['tau_error']:+.1f}%",
            f"{100 * summary['worst_prompt_tau_error']:.1f}%", f"{summary['speedup_estimate']:.2f}x",
            f"{summary['speedup_real']:.2f}x", f"{100 * summary['speedup_error']:+.1f}%",
            "yes" if summary["same_tokens"] else "no"]


def markdown_table(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as a Markdown table (for docs/WHAT_IF.md and closing notes)."""
    rows = [CHECK_HEADER, ["---"] * len(CHECK_HEADER), *(check_cells(s) for s in summary)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    """The check's options (`python -m goose what-if-check`)."""
    parser.add_argument("--suite", action="append", required=True, help="humaneval, mtbench or a .jsonl (repeat)")
    parser.add_argument("--limit", type=int, default=10, help="the first N prompts of each suite (default: 10)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    parser.add_argument("--head", default="auto")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shadow-budget", type=int, default=0,
                        help="record a shadow tree of this many nodes at every step (default 0: as Explore records)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/what-if-check"),
                        help="folder of what-if-check.jsonl and the recorded traces (a rerun resumes it)")


def run_check(args: argparse.Namespace) -> int:
    """Record each prompt with goose at its defaults, replay it at every setting of WHAT_IF_SETTINGS, run each setting
    for real, and print the table of estimate against measurement."""
    import torch

    from goose.bench.suites import format_prompt, load_suite
    from goose.model import load_model

    torch.set_num_threads(args.threads)
    goose_model = load_model(args.model) if args.model else load_model()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / CHECK_FILE
    done = {row.prompt_id for row in load_rows(path)}
    for method in (metrics.BASELINE, SpineTree.name, Balanced.name):  # once-per-model set-up outside the clocks
        warm_up(goose_model, method, head=args.head)
    for suite in args.suite:
        for prompt in load_suite(suite, args.limit):
            if prompt.id in done:
                continue
            text = format_prompt(goose_model.tokenizer, prompt)
            rows = check_prompt(goose_model, prompt.id, text, args.max_new_tokens, args.head, args.out / "traces",
                                shadow=args.shadow_budget)
            append_rows(path, rows)
            print(prompt.id, " ".join(f"{r.setting}: {r.estimated_passes}/{r.real_passes}" for r in rows), flush=True)
    print(markdown_table(summarize_checks(load_rows(path))))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m goose what-if-check --suite humaneval --limit 10 --max-new-tokens 96`: the check alone."""
    parser = argparse.ArgumentParser(prog="python -m goose what-if-check", description=run_check.__doc__)
    add_check_arguments(parser)
    return run_check(parser.parse_args(argv))


if __name__ == "__main__":
    main()
