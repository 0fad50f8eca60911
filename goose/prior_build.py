"""Building a model's prior for the adjacency table's warm start (goose.sources.prior): the model continues
neutral openings, one pass over each text, each token's successors averaged over its occurrences."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

import torch

from goose.decode import generate
from goose.model import GooseModel
from goose.sources.prior import Prior, average_rows, model_slug

PRIOR_TOKENS = 192  # new tokens the model writes after each opening
PRIOR_TEMPERATURE = 0.8  # sampled: a base model's greedy text loops, and loops teach one successor per token

# Neutral openings for the model to continue: many genres, none a benchmark's prompt.
OPENINGS = (
    "def main():\n", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n",
    "# Utility functions for working with dates\n", "function debounce(fn, wait) {\n",
    "#include <stdio.h>\n\nint main(void) {\n", "SELECT name, COUNT(*)\nFROM", "public class Main {\n",
    "fn main() {\n", "<!DOCTYPE html>\n<html>\n<head>\n", "#!/usr/bin/env bash\nset -e\n",
    "    for i in range(len(items)):\n", "    if not data:\n        return None\n", "## Installation\n\n",
    "The history of", "Once upon a time,", "In this article, we will", "Dear Sir or Madam,\n\n",
    "Here are some tips for", "The main difference between", "Ingredients:\n-", "Step 1:",
    "There are three reasons why", "Yesterday I went to", "The city is known for", "Q: What is\nA:",
    "Abstract\n\nWe present", "Chapter 1\n\nThe morning", "To whom it may concern,", "Thank you for your email.",
    "The weather today", "Scientists have discovered", "In conclusion,", "For example, if you",
    "1. Introduction\n\n", "The following table shows", "My favourite book is", "How to write a good",
    "The company announced", "Travel guide:", "Summary of the meeting:\n", "A poem about the sea\n\n",
    "The first step is to", "Many people believe that", "Product description:", "Let me explain how",
    "Note: this function", "Example:\n\n", "The results show that", "Hello everyone, welcome to",
)


@torch.inference_mode()
def build_prior(goose_model: GooseModel, openings: Iterable[str] = OPENINGS, top_k: int = 10,
                new_tokens: int = PRIOR_TOKENS, progress: bool = False) -> Prior:
    """The model continues each opening (sampled, seeded: the same model gives the same prior), then one pass
    over each text gives every position's exact top-K successors; their softmax scores, averaged per token."""
    tokens, ids, scores = [], [], []
    openings = list(openings)
    for number, opening in enumerate(openings):
        run = generate(goose_model, opening, "goose", new_tokens, temperature=PRIOR_TEMPERATURE, seed=number,
                       warm_start=False)  # the same text as without speculation (one draw per token), any prior
        text = goose_model.encode(opening) + run.tokens
        logits = goose_model.model(torch.tensor([text], device=goose_model.model.device)).logits[0].float()
        top = torch.topk(logits, top_k, dim=-1)
        tokens += text
        ids.append(top.indices.cpu())
        scores.append(torch.softmax(top.values, -1).cpu())
        if progress:
            print(f"prior: {number + 1}/{len(openings)} texts, {len(tokens)} tokens", flush=True)
    rows = average_rows(tokens, torch.cat(ids), torch.cat(scores), top_k)
    digest = hashlib.sha256(json.dumps(sorted(rows.items())).encode()).hexdigest()[:12]
    return Prior(f"{model_slug(goose_model.name)}@{digest}", rows)
