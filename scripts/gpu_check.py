"""Everything worth checking when a GPU is at hand, in one table (issue: GPU-ready by construction).

    python scripts/gpu_check.py                      # CUDA when present: tiny lossless checks, then a
                                                     # randomly initialised ~1B Llama (no download)
    python scripts/gpu_check.py --size tiny --device cpu --new-tokens 8   # the same, small, on a CPU

Three parts, one table:
  lossless  every method and both heads on the tiny test models, token for token against
            transformers' own greedy `generate` (the process exits 1 if any differs);
  cost      seconds of one tree verification per node count on the big model (the budget tuner's
            cost curve): on a GPU it stays flat far longer than on a CPU;
  speed     each method and head on the big model, on prompts that hold the model's own earlier
            continuation (so drafts have a chance), every wall time from the call to the last token; speed-up over
            autoregressive with the same head, and over transformers' `generate`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run from a checkout: the library, and the tests' tiny models

from tiny import tiny_gemma3, tiny_llama  # noqa: E402  (the test suite's tiny models, not a copy)

import goose  # noqa: E402
from goose import metrics  # noqa: E402
from goose.bench import HF_GENERATE, BenchPrompt, BenchRun, run_one  # noqa: E402
from goose.budget import cost_table  # noqa: E402
from goose.head import heads_here  # noqa: E402

# A Llama-3.2-1B-like shape, and a tiny one for CPU smoke runs.
SIZES = {
    "1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8),
    "tiny": dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
}
LOSSLESS_PROMPTS = ("the cat sat on the mat. the cat sat on the mat. the cat sat on the",
                    "def f(x):\n    return x + 1\n\ndef g(x):\n    return f(x) +")
LOSSLESS_BUDGETS = (7, 40)


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """One word per token id ("t0", "t1", ...): a tokenizer for a model that has none."""
    vocab = {"<unk>": 0, "<bos>": 1, **{f"t{i}": i for i in range(2, vocab_size)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", unk_token="<unk>")


def random_llama(size: str, device: str) -> goose.GooseModel:
    """A randomly initialised Llama of the given size, float32, built from a config (nothing downloaded)."""
    tokenizer = word_tokenizer(SIZES[size]["vocab_size"])
    torch.manual_seed(0)
    config = LlamaConfig(**SIZES[size], max_position_embeddings=4096, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=None, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(device).eval()
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return goose.GooseModel(model, tokenizer, f"random-llama-{size}")


def echo_prompts(model: goose.GooseModel, count: int, new_tokens: int) -> list[str]:
    """A random start, the model's own greedy continuation of it, the start again: a random model writes
    little a draft could guess, but here the context holds what it said after the same start before."""
    generator = torch.Generator().manual_seed(1)
    prompts = []
    for _ in range(count):
        ids = torch.randint(2, model.vocab_size, (24,), generator=generator).tolist()
        start = " ".join(f"t{i}" for i in ids)
        continuation = goose.generate(model, start, "autoregressive", new_tokens).text
        prompts.append(f"{start} {continuation} {start}")
    return prompts


def lossless_rows(device: str, new_tokens: int) -> tuple[list[list[str]], bool]:
    """Every method x head x budget on the tiny models against transformers' greedy generate."""
    rows, ok = [], True
    for name, maker in (("tiny-llama", lambda: tiny_llama(0)), ("tiny-gemma3", lambda: tiny_gemma3(0, 8))):
        model = maker()
        model.model.to(device)
        references = [run_one(model, BenchPrompt(str(i), text), HF_GENERATE, new_tokens, None).tokens
                      for i, text in enumerate(LOSSLESS_PROMPTS)]
        for head in heads_here(model):
            for method in goose.METHODS:
                same = total = 0
                for text, reference in zip(LOSSLESS_PROMPTS, references):
                    for budget in LOSSLESS_BUDGETS:
                        run = goose.generate(model, text, method, new_tokens, budget, head=head)
                        same, total = same + (run.tokens == reference), total + 1
                ok &= same == total
                rows.append(["lossless", f"{name} {method} {head}", f"{same}/{total} identical"])
    return rows, ok


def cost_rows(model: goose.GooseModel) -> list[list[str]]:
    """The verification cost per node count the budget tuner reads (measured once, cached)."""
    costs = cost_table(model)
    first = costs[min(costs)]
    return [["cost", f"{model.name} n={n}", f"{seconds * 1e3:.2f} ms ({seconds / first:.2f}x n={min(costs)})"]
            for n, seconds in costs.items()]


def speed_rows(model: goose.GooseModel, prompts: list[str], new_tokens: int) -> list[list[str]]:
    """Pooled tokens/s per method and head, interleaved per prompt, speed-ups over AR (same head) and
    over transformers' generate (goose.metrics); every method's tokens checked against autoregressive's."""
    methods = ("autoregressive", "pld", "balanced", "goose")
    runs = [(HF_GENERATE, "-")] + [(m, h) for h in heads_here(model) for m in methods]
    for method, head in runs:  # untimed: the head, the cost table and transformers' first call are set up once
        run_one(model, BenchPrompt("warm-up", prompts[0]), method, 4, None, head=head if head != "-" else "screened")
    suite: dict[tuple[str, str], dict[str, BenchRun]] = {key: {} for key in runs}
    for index, text in enumerate(prompts):
        prompt = BenchPrompt(str(index), text)
        for method, head in runs:
            suite[method, head][prompt.id] = run_one(model, prompt, method, new_tokens, None,
                                                     head=head if head != "-" else "screened")
    rows = []
    for (method, head), by_prompt in suite.items():
        baseline = suite[("autoregressive", head) if head != "-" else (HF_GENERATE, "-")]
        m = metrics.method_metrics(method, by_prompt, baseline, outside=suite[HF_GENERATE, "-"])
        rows.append(["speed", f"{model.name} {method} {head} head",
                     f"{m.tokens_per_s:.1f} tok/s, tau {m.tau:.2f}, {m.speedup_pooled:.2f}x AR same head, "
                     f"{m.speedup_outside:.2f}x hf-generate, "
                     f"{'same tokens' if m.lossless else 'TOKENS DIFFER'}"])
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=SIZES, default="1b", help="the randomly initialised model (default: 1b)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: CUDA when present)")
    parser.add_argument("--new-tokens", type=int, default=64, help="new tokens per run (default: 64)")
    parser.add_argument("--prompts", type=int, default=3, help="prompts of the speed comparison (default: 3)")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    rows, ok = lossless_rows(device, args.new_tokens)
    model = random_llama(args.size, device)
    rows += cost_rows(model)
    rows += speed_rows(model, echo_prompts(model, args.prompts, args.new_tokens), args.new_tokens)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    rows.append(["total", f"{name}, torch {torch.__version__}", f"{time.perf_counter() - start:.0f} s"])
    print_table([["part", "what", "result"], *rows])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
