"""Command line: `python -m goose generate ...` (and `build-prior`; `bench`, `bench-report`, `what-if-check`: see
goose.bench)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from goose import validate
from goose.bench import (
    SUITES,
    BenchSettings,
    bench_methods,
    default_out_dir,
    format_table,
    parse_methods,
    rebuild_results,
    run_bench,
)
from goose.bench.diagnosis import DIAGNOSE_FILE, format_diagnosis, load_diagnoses
from goose.bench.what_if import add_check_arguments, run_check
from goose.decode import WARM_UP_TOKENS, Generation, Request, check_request, model_target, warm_up
from goose.drafters import available_methods, unavailable_methods
from goose.heads.factory import HEAD_CHOICES
from goose.parallel import ParallelError, agreed_seed, is_main_process, rank
from goose.prior_build import PRIOR_TOKENS
from goose.validate import parse_budget

HEAD_HELP = ("LM head of every method, autoregressive included: auto (default: the fastest exact head on this "
             "device, timed once), int8 (the exact float32 argmax through an int8 screen, CPU), screened (the same "
             "through a bf16 screen) or full (the textbook float32 head)")
TENSOR_PARALLEL_HELP = ("split the model over the processes of `torchrun --nproc-per-node N -m goose ...` (gloo on "
                        "CPUs, NCCL on GPUs); rank 0 prints, the other ranks run the same steps silently")


def _generate(args: argparse.Namespace) -> int:
    import goose

    typed = validate.typed_number  # numbers as typed: each field's rule refuses the rest with its own message

    def request(max_new_tokens: int) -> Request:
        return check_request(args.prompt, args.method, max_new_tokens, args.budget, stop=args.stop,
                             temperature=typed(args.temperature), top_k=typed(args.top_k), top_p=typed(args.top_p),
                             seed=typed(args.seed), head=args.head)

    timed = request(typed(args.max_new_tokens))  # bad input is refused before the model loads
    start = time.perf_counter()
    goose_model = goose.load_model(args.model, device=args.device, tensor_parallel=args.tensor_parallel)
    if args.tensor_parallel and timed.sampling.temperature and timed.sampling.seed is None:  # the ranks must draw alike
        timed = replace(timed, sampling=replace(timed.sampling, seed=agreed_seed()))
    load_s = time.perf_counter() - start
    once = f"model load {load_s:.1f} s"
    if args.warm_up:
        # The one warm-up (goose.decode.warm_up, the bench's and the app's too): a short untimed run of the same
        # method pays what a process pays once per model (the LM head and packed linears built, costs measured or
        # read, the tuner's start, kernels compiled), so the timed run's clock holds what every later run would.
        warm_up_tokens = min(WARM_UP_TOKENS, timed.max_new_tokens)
        start = time.perf_counter()
        warm_up(goose_model, args.method, args.budget, args.head, typed(args.temperature), args.prompt, warm_up_tokens)
        once += f", warm-up {time.perf_counter() - start:.1f} s (an untimed {warm_up_tokens}-token run, as the bench's)"
    else:
        once += "; no warm-up: the run's clock includes the first run's set-up"
    generation = Generation(model_target(goose_model, timed), timed)
    for _ in generation:
        pass
    run = generation.run
    if not is_main_process():
        return 0
    if args.json:
        print(run.to_json(indent=1))
    else:
        print(run.text)
        t = run.totals
        accepted = ", ".join(f"{source} {t.accepted.get(source, 0)}/{n}" for source, n in sorted(t.drafted.items()))
        print(f"\n[{run.method} on {run.model}] {t.new_tokens} tokens in {t.forward_passes} forward passes "
              f"(tau {t.tau:.2f}), {t.tokens_per_s:.1f} tokens/s, {t.wall_s:.2f} s; stop: {run.stop_reason}"
              + (f"; accepted/drafted: {accepted}" if accepted else ""), file=sys.stderr)
    print(f"[once per process, outside the run's clock] {once}", file=sys.stderr)
    return 0


def _bench(args: argparse.Namespace) -> int:
    settings = BenchSettings(suite=args.suite, methods=args.methods, limit=args.limit, budget=args.budget,
                             max_new_tokens=args.max_new_tokens, model=args.model, threads=args.threads,
                             temperature=args.temperature, head=args.head, what_if=args.what_if,
                             tensor_parallel=args.tensor_parallel, diagnose=args.diagnose)
    out_dir = Path(args.out) if args.out else default_out_dir(args.suite)
    summaries, meta = run_bench(settings, out_dir, progress=is_main_process())
    if not is_main_process():
        return 0
    print(format_table(summaries) + _diagnosis_table(out_dir))
    bandwidth = ", ".join(f"{name} {value:.1f} GB/s" for name, value in meta["memory_bandwidth_gb_s"].items())
    print(f"\nLM head of every Goose method: {meta['head_used']} ({args.head} asked); body linears: "
          f"{meta['body_linears']}; "
          f"memory bandwidth measured: {bandwidth}; parameters {meta['parameter_bytes'] / 1e6:.0f} MB; "
          f"results in {out_dir}/ (runs.jsonl, summary.csv, meta.json, report.html"
          f"{', diagnose.jsonl, diagnosis.json' if args.diagnose else ''})")
    return 0


def _diagnosis_table(folder: Path) -> str:
    """The bench folder's pooled split per tree method, after a blank line ("" when it was not diagnosed)."""
    table = format_diagnosis(load_diagnoses(folder / DIAGNOSE_FILE))
    return f"\n\nWhere the tokens went (goose.diagnose, pooled over prompts):\n{table}" if table else ""


def _bench_report(args: argparse.Namespace) -> int:
    print(format_table(rebuild_results(Path(args.folder))) + _diagnosis_table(Path(args.folder)))
    return 0


def _build_prior(args: argparse.Namespace) -> int:
    import goose
    from goose.prior_build import build_prior
    from goose.sources.prior import SHIPPED, prior_path

    goose_model = goose.load_model(args.model, device=args.device)
    prior = build_prior(goose_model, new_tokens=args.new_tokens, progress=True)
    path = prior.save(args.out or prior_path(goose_model.name, SHIPPED if args.ship else None))
    print(f"prior {prior.name}: rows for {len(prior.rows)} tokens in {path}")
    return 0


def _argument(parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse type that reports the parser's own ValueError message instead of a generic one."""
    def convert(text: str) -> object:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from error
    return convert


def _add_bench_parsers(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="benchmark methods on a prompt suite, interleaved per prompt")
    bench.add_argument("--suite", required=True, help=f"{' or '.join(SUITES)}, or a JSONL file "
                       "(Spec-Bench/FastChat form: first of `turns`; or a `prompt` field)")
    bench.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    bench.add_argument("--methods", type=_argument(parse_methods), default=bench_methods(),
                       help=f"comma-separated, from {','.join(bench_methods())} (default: all); "
                       "autoregressive is added when missing: it is the reference")
    bench.add_argument("--budget", type=_argument(parse_budget), default=None,
                       help="tree node budget, or auto (the tuner's pick every step, for every method); default: "
                            "each method's own (auto; suffix and suffix-path: 25 nodes, vLLM's)")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    bench.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    bench.add_argument("--temperature", type=float, default=0.0,
                       help="0 = greedy (default, lossless check against autoregressive); above, every method "
                            "samples with a per-prompt seed")
    bench.add_argument("--head", default="auto", choices=HEAD_CHOICES, help=HEAD_HELP)
    bench.add_argument("--what-if", action="store_true",
                       help="also one untimed goose run per prompt recorded with its sources: report.html then shows "
                            "counterfactual tau vs budget and vs spine share (goose, balanced), checked against "
                            "the real runs (greedy only)")
    bench.add_argument("--diagnose", action="store_true",
                       help="also one untimed run per prompt of each tree method, recorded with its sources and "
                            "diagnosed: the pooled split of its tokens (taken / lost to the tree's shape / lost to "
                            "its sources) per method, in the table, report.html and diagnosis.json (greedy only)")
    bench.add_argument("--tensor-parallel", action="store_true", help=TENSOR_PARALLEL_HELP)
    bench.add_argument("--out", default=None, help="output folder (default: bench-out/<suite>-<timestamp>)")
    bench.set_defaults(handler=_bench)
    report = commands.add_parser("bench-report", help="rebuild summary.csv and report.html of a benchmark folder "
                                 "from its runs.jsonl (also of an unfinished run)")
    report.add_argument("folder")
    report.set_defaults(handler=_bench_report)
    check = commands.add_parser("what-if-check", help="replay runs recorded with goose at other settings and check "
                                "every estimate (tau, speed-up) against a real run at that setting")
    add_check_arguments(check)
    check.set_defaults(handler=run_check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m goose", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="generate text with one decoding method and print stats")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    gen.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: CUDA when present)")
    # Every value is taken as typed and checked by the library's request rules (goose.validate), so that a bad
    # one gets the same one-line message here as in the library and the app.
    gen.add_argument("--method", default="goose", help=f"one of {', '.join(available_methods())} (default: goose)"
                     + "".join(f"; {reason}" for reason in unavailable_methods().values()))
    gen.add_argument("--budget", default=None,
                     help="tree node budget, root included, or 'auto' (picked per step from this device's measured "
                          "cost and the acceptance seen so far); default: the method's own, auto for every method "
                          "but suffix and suffix-path, which take vLLM's 24 speculative tokens (25 nodes)")
    gen.add_argument("--max-new-tokens", default="128")
    gen.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    gen.add_argument("--temperature", default="0", help="0 = greedy (default)")
    gen.add_argument("--top-k", default="0", help="0 = off (default)")
    gen.add_argument("--top-p", default="1")
    gen.add_argument("--seed", default=None)
    gen.add_argument("--head", default="auto", help=HEAD_HELP)
    gen.add_argument("--json", action="store_true", help="print the whole run (steps and trees) as JSON")
    gen.add_argument("--tensor-parallel", action="store_true", help=TENSOR_PARALLEL_HELP)
    gen.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                     help=f"skip the untimed {WARM_UP_TOKENS}-token warm-up run: the run's clock then also holds "
                          "what the process pays once (LM head and linears built, costs measured, kernels compiled)")
    gen.set_defaults(handler=_generate)
    prior = commands.add_parser("build-prior", help="build the model's prior rows for the adjacency table (its "
                                "warm start; the embedded model's ships with the package)")
    prior.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    prior.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: CUDA when present)")
    prior.add_argument("--new-tokens", type=int, default=PRIOR_TOKENS,
                       help=f"tokens the model writes after each neutral opening (default {PRIOR_TOKENS})")
    prior.add_argument("--ship", action="store_true", help="write it into the package (goose/priors/), not the "
                       "user cache: for a model whose prior ships")
    prior.add_argument("--out", default=None, help="write it here instead (runs look in the cache and the package)")
    prior.set_defaults(handler=_build_prior)
    _add_bench_parsers(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, TypeError, RuntimeError) as error:
        # Under torchrun every rank meets the same ParallelError: rank 0 tells it; any other error is the
        # failing rank's own
        if is_main_process() or not isinstance(error, ParallelError):
            print(f"error: {error}" if is_main_process() else f"error on rank {rank()}: {error}", file=sys.stderr)
        return 2
