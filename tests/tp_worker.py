"""Run under `torchrun --nproc-per-node N`: every method on a model split over the ranks (tests/test_parallel.py).

Usage: tp_worker.py MODEL_DIR OUT_JSON [--die-on-rank R | --desync]
Rank 0 writes OUT_JSON: per prompt, the single-process reference (transformers' greedy generate on the
unsharded model), the tensor-parallel autoregressive tokens and every speculative method's at each budget,
and the run's parallel record. --die-on-rank R: that rank exits at once after loading (the others must not hang).
--desync: rank 1 asks for another prompt than rank 0 (the lockstep check must stop the run).
"""

from __future__ import annotations

import json
import os
import sys

import torch

import goose
from goose.parallel import is_main_process, rank

PROMPTS = ["the cat sat on the mat. the cat sat on the mat. the cat sat on the",
           "def f(x):\n    return x + 1\n\ndef g(x):\n    return f(x) + 1\n\ndef h(x):\n    return"]
BUDGETS = [3, 40, "auto"]
NEW_TOKENS = 40


def reference(model_dir: str, prompt: str) -> list[int]:
    goose_model = goose.load_model(model_dir, device="cpu")
    ids = torch.tensor([goose_model.encode(prompt)])
    with torch.no_grad():
        out = goose_model.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                         min_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def main(model_dir: str, out_path: str, die_on_rank: int | None, desync: bool) -> None:
    torch.set_num_threads(1)
    goose_model = goose.load_model(model_dir, device="cpu", tensor_parallel=True)
    if die_on_rank == rank():
        os._exit(3)
    if desync:
        goose.generate(goose_model, "ab" * (1 + rank()), "goose", NEW_TOKENS)
    results, parallel = [], None
    # a prompt holding the model's own continuation of its start: context matches get accepted
    echo = "xy" + goose_model.decode(goose.generate(goose_model, "xy", "autoregressive", NEW_TOKENS).tokens) + " xy"
    for prompt in [*PROMPTS, echo]:
        ar = goose.generate(goose_model, prompt, "autoregressive", NEW_TOKENS)
        parallel = ar.parallel
        runs = {f"{method}@{budget}": goose.generate(goose_model, prompt, method, NEW_TOKENS, budget)
                for method in goose.METHODS if method != "autoregressive" for budget in BUDGETS}
        results.append({"prompt": prompt, "autoregressive": ar.tokens,
                        "runs": {key: run.tokens for key, run in runs.items()},
                        "accepted": {key: sum(run.accepted_lengths) for key, run in runs.items()}})
    if is_main_process():
        for result in results:
            result["reference"] = reference(model_dir, result["prompt"])
        with open(out_path, "w") as file:
            json.dump({"parallel": parallel, "results": results}, file)


if __name__ == "__main__":
    die = int(sys.argv[sys.argv.index("--die-on-rank") + 1]) if "--die-on-rank" in sys.argv else None
    main(sys.argv[1], sys.argv[2], die, "--desync" in sys.argv)
