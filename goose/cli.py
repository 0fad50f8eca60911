"""Command line: `python -m goose generate ...` (and `bench`, see goose.bench)."""

from __future__ import annotations

import argparse
import sys

from goose.decode import METHODS


def _generate(args: argparse.Namespace) -> int:
    import goose
    from goose.decode import Generation, check_request

    request = check_request(args.prompt, args.method, args.max_new_tokens, args.budget, stop=args.stop,
                            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    generation = Generation(goose.load_model(args.model, device=args.device), request)
    for _ in generation:
        pass
    run = generation.run
    if args.json:
        print(run.to_json(indent=1))
        return 0
    print(run.text)
    t = run.totals
    accepted = ", ".join(f"{source} {t.accepted.get(source, 0)}/{n}" for source, n in sorted(t.drafted.items()))
    print(f"\n[{run.method} on {run.model}] {t.new_tokens} tokens in {t.forward_passes} forward passes "
          f"(tau {t.tau:.2f}), {t.tokens_per_s:.1f} tokens/s, {t.wall_s:.2f} s; stop: {run.stop_reason}"
          + (f"; accepted/drafted: {accepted}" if accepted else ""), file=sys.stderr)
    return 0


def budget_arg(text: str) -> int | str:
    """'auto' or a whole number of tree nodes."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget must be 'auto' or a whole number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m goose", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="generate text with one decoding method and print stats")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--model", default=None, help="HF model id or local folder (default: embedded Gemma 3 270M)")
    gen.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: CUDA when present)")
    gen.add_argument("--method", default="goose", choices=METHODS)
    gen.add_argument("--budget", type=budget_arg, default="auto",
                     help="tree node budget, root included, or 'auto' (default: picked per step from this "
                          "device's measured cost and the acceptance seen so far)")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--json", action="store_true", help="print the whole run (steps and trees) as JSON")
    gen.set_defaults(handler=_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, TypeError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
