"""The rate model against real runs: docs/METHOD.md, "A run's own rates", made by goose.optimal.calibration.

    python scripts/calibrate.py          # HumanEval 5-12 and MT-Bench 86-93, goose, auto budget, 128 new tokens

Each prompt is run once on the embedded model; the model is fitted to that run and each step's own tree's
expected accepted length set beside what it took. Per suite: pooled predicted / accepted - 1 and the worst
prompt. The prompts are ones the model was not designed on. Takes a few minutes on a CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import goose  # noqa: E402
from goose.bench.suites import format_prompt, load_suite  # noqa: E402
from goose.optimal import calibration  # noqa: E402

HELD_OUT = {"humaneval": [f"HumanEval/{i}" for i in range(5, 13)], "mtbench": [str(i) for i in range(86, 94)]}
NEW_TOKENS = 128


def main() -> None:
    model = goose.load_model()
    for suite, ids in HELD_OUT.items():
        prompts = {p.id: p for p in load_suite(suite)}
        fits = {}
        for prompt_id in ids:
            run = goose.generate(model, format_prompt(model.tokenizer, prompts[prompt_id]), "goose", NEW_TOKENS)
            fits[prompt_id] = fit = calibration(run)
            predicted, accepted = fit.pooled
            error = "nothing accepted" if fit.error is None else f"{fit.error:+.1%}"
            print(f"  {prompt_id:13s} {len(fit.measured):3d} steps: predicted {predicted:6.1f}, accepted {accepted:4d} "
                  f"({error}), children mass {fit.children_mass:.3f}, worst depth {fit.worst_depth()}", flush=True)
        predicted, accepted = (sum(pooled) for pooled in zip(*(fit.pooled for fit in fits.values())))
        worst = max(fits, key=lambda prompt_id: abs(fits[prompt_id].error or 0.0))
        print(f"{suite}: pooled predicted {predicted:.1f} / accepted {accepted} - 1 = {predicted / accepted - 1:+.1%};"
              f" worst prompt {worst} {fits[worst].error:+.1%}")


if __name__ == "__main__":
    main()
