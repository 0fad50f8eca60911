"""scripts/gpu_check.py runs on a CPU too: a small smoke run of every part of its table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import goose
from goose.heads.screens import HEADS

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


def test_gpu_check_runs_small_on_a_cpu(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GOOSE_CACHE", str(tmp_path))  # its cost table must not touch the user's
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert gpu_check.main(["--size", "tiny", "--device", "cpu", "--new-tokens", "6", "--prompts", "1",
                           "--speed-model", "random"]) == 0
    lines = capsys.readouterr().out.splitlines()
    parts = [line.split()[0] for line in lines[1:]]
    heads = len(HEADS)  # every head is built on a CPU with fbgemm
    assert parts.count("lossless") == 2 * heads * len(goose.available_methods())
    assert all("4/4 identical" in line for line in lines if line.startswith("lossless"))
    invariance = [line for line in lines if line.startswith("invariance")]
    assert len(invariance) == 2 and all(" tree rows bitwise equal" in line for line in invariance)
    assert parts.count("cost") >= 5 and parts.count("speed") == 1 + 4 * heads and parts[-1] == "total"
    speed = [line for line in lines if line.startswith("speed")]
    assert all("same tokens" in line for line in speed)
    assert all(float(line.split("tau ")[1].split(",")[0]) >= 1.0 for line in speed)
