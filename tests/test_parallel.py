"""Tensor parallelism (goose.parallel): every method on a model split over 2 gloo processes under torchrun
reproduces tensor-parallel autoregressive decoding token for token, which reproduces the unsharded model's;
bad launches end with one error line, never a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny import char_tokenizer, tiny_gemma3, tiny_llama
from transformers import Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig

import goose
from goose.parallel import REPLICATE, ParallelError, shard_plan

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_TIMEOUT_S = 300  # a hang fails the test instead of the CI job


def save(goose_model: goose.GooseModel, folder: Path) -> str:
    goose_model.model.save_pretrained(folder)
    goose_model.tokenizer.save_pretrained(folder)
    return str(folder)


def torchrun(processes: int, *args: str, cache: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m torch.distributed.run --nproc-per-node N ARGS` from the repository root; (result, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOOSE_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                             *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    return result, time.perf_counter() - start


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3], ids=["llama", "gemma3-one-kv-head"])
def test_every_method_on_two_ranks_equals_autoregressive(build, tmp_path):
    folder = save(build(0), tmp_path / "model")
    result, _ = torchrun(2, "tests/tp_worker.py", folder, str(tmp_path / "out.json"), cache=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["parallel"]["world_size"] == 2 and out["parallel"]["backend"] == "gloo"
    assert {"body_linears", "head"} <= out["parallel"]["reasons"].keys()
    assert bool(out["parallel"]["replicated"]) == (build is tiny_gemma3)  # 1 KV head over 2 ranks
    for prompt in out["results"]:
        assert prompt["autoregressive"] == prompt["reference"], prompt["prompt"]
        for key, tokens in prompt["runs"].items():
            assert tokens == prompt["autoregressive"], (prompt["prompt"], key)
    assert sum(sum(prompt["accepted"].values()) for prompt in out["results"]) > 0  # speculation happened


def test_tensor_parallel_without_torchrun_is_one_error_line(tmp_path):
    folder = save(tiny_llama(0), tmp_path / "model")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    result = subprocess.run([sys.executable, "-m", "goose", "generate", "--model", folder, "--prompt", "ab",
                             "--tensor-parallel"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert error_lines(result.stderr) == [
        "error: tensor parallelism needs a process group: launch with "
        "`torchrun --nproc-per-node N -m goose ... --tensor-parallel`"]


def test_model_without_a_plan_is_one_error_line(tmp_path):
    tokenizer = char_tokenizer()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=4, n_positions=64))
    folder = save(goose.GooseModel(model, tokenizer, "tiny-gpt2"), tmp_path / "model")
    result, _ = torchrun(2, "-m", "goose", "generate", "--model", folder, "--prompt", "ab", "--tensor-parallel",
                         cache=tmp_path)
    assert result.returncode != 0
    [line] = error_lines(result.stderr)
    assert "has no tensor-parallel plan" in line


def test_three_ranks_on_four_query_heads_is_one_error_line(tmp_path):
    folder = save(tiny_llama(0), tmp_path / "model")
    result, _ = torchrun(3, "-m", "goose", "generate", "--model", folder, "--prompt", "ab", "--tensor-parallel",
                         cache=tmp_path)
    assert result.returncode != 0
    [line] = error_lines(result.stderr)
    assert "3 processes cannot split the 4 query heads" in line and "[2, 4]" in line


def test_a_rank_that_dies_takes_the_others_down(tmp_path):
    folder = save(tiny_llama(0), tmp_path / "model")
    result, seconds = torchrun(2, "tests/tp_worker.py", folder, str(tmp_path / "out.json"), "--die-on-rank", "1",
                               cache=tmp_path)
    assert result.returncode != 0
    assert not (tmp_path / "out.json").exists()
    assert seconds < 60  # rank 0 waits in a collective: torchrun stops it, no hang until COLLECTIVE_TIMEOUT


def test_ranks_that_verify_different_trees_are_stopped(tmp_path):
    folder = save(tiny_llama(0), tmp_path / "model")
    result, _ = torchrun(2, "tests/tp_worker.py", folder, str(tmp_path / "out.json"), "--desync", cache=tmp_path)
    assert result.returncode != 0
    assert "the ranks lost lockstep" in result.stderr


def test_one_kv_head_is_replicated_where_the_ranks_outnumber_it():
    config = Gemma3TextConfig(num_attention_heads=4, num_key_value_heads=1)
    parallel = shard_plan(config, 2, "gemma")
    assert parallel.replicated and all(key.rsplit(".", 1)[-1] in ("k_proj", "v_proj", "k_norm")
                                       for key in parallel.replicated)
    assert all(config.base_model_tp_plan[key] == REPLICATE for key in parallel.replicated)
    assert config.base_model_tp_plan["layers.*.self_attn.q_proj"] == "colwise"


def test_several_kv_heads_that_the_ranks_do_not_divide_are_refused():
    """Replicated KV heads would pair with the wrong query heads unless there is only one."""
    config = LlamaConfig(num_attention_heads=8, num_key_value_heads=2)
    with pytest.raises(ParallelError, match="cannot split the 2 key/value heads"):
        shard_plan(config, 4, "llama")
    assert not shard_plan(LlamaConfig(num_attention_heads=8, num_key_value_heads=2), 2, "llama").replicated
