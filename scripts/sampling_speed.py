"""Measure goose against autoregressive sampling (issue: lossless sampling), interleaved per prompt.

    python scripts/sampling_speed.py --suite humaneval --limit 10 --temperature 0.7

Prints pooled tau and tokens/s per method. Samples differ between methods (they are draws, not
the greedy path), so no token equality is checked here: tests/test_sampling.py proves the
distributions equal.
"""

from __future__ import annotations

import argparse

import torch

import goose
from goose.bench import format_prompt, load_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="humaneval")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default="autoregressive,goose")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = goose.load_model()
    methods = args.methods.split(",")
    tokens = dict.fromkeys(methods, 0)
    passes = dict.fromkeys(methods, 0)
    wall = dict.fromkeys(methods, 0.0)
    prompts = load_suite(args.suite, args.limit)
    goose.generate(model, format_prompt(model.tokenizer, prompts[0]), "goose", 8)  # warm-up
    for index, prompt in enumerate(prompts):
        text = format_prompt(model.tokenizer, prompt)
        for method in methods:
            run = goose.generate(model, text, method, args.max_new_tokens, temperature=args.temperature,
                                 seed=index)
            tokens[method] += run.totals.new_tokens
            passes[method] += run.totals.forward_passes
            wall[method] += run.totals.wall_s
    base = tokens[methods[0]] / wall[methods[0]]
    for method in methods:
        speed = tokens[method] / wall[method]
        print(f"{method:15s} tau {tokens[method] / passes[method]:.2f}  tokens/s {speed:.2f}  "
              f"speedup {speed / base:.2f}x  ({tokens[method]} tokens)")


if __name__ == "__main__":
    main()
