"""Lossless sampling: every method draws from exactly the distribution of ordinary sampling.

The reference is not another sampler but the exact distribution: with top-k
warping, the first three tokens after a prompt have a small support whose
probabilities follow from a handful of plain forward passes. Speculative
samples are tested against it with a chi-square goodness-of-fit test at
significance 0.001 per (prompt, method) case; with the fixed seeds below the
outcome is reproducible, and a correct sampler fails a case with probability
0.001 (about 1% for the whole file).
"""

from __future__ import annotations

import functools
import string

import pytest
import torch
from scipy.stats import chi2
from tiny import tiny_gemma3, tiny_llama

import goose
from goose.sampling import Sampling, choose_child

DRAWS = 800
LENGTH = 3
ALPHA = 1e-3
WARP = Sampling(temperature=0.8, top_k=4)
MAKERS = {"llama": functools.partial(tiny_llama, 0), "gemma3-window4": functools.partial(tiny_gemma3, 1, 4)}
# Draft acceptances needed for a case to test the accepting branch of the walk. The random Llama
# never samples what the context copies, so there only rejections are tested for pld and the suffix methods.
MIN_ACCEPTED = {("llama", "pld"): 0, ("llama", "suffix"): 0, ("llama", "suffix-path"): 0}


@functools.cache
def model(case: str) -> goose.GooseModel:
    return MAKERS[case]()


@functools.cache
def prompt_text(case: str) -> str:
    """Whatever the first sampled token is, "xy" + it occurred before: the context matcher always drafts."""
    gm = model(case)
    def own(start: str) -> str:
        return gm.decode(goose.generate(gm, start, method="autoregressive", max_new_tokens=3).tokens)
    return "".join(f"xy{c}{own('xy' + c)} " for c in string.ascii_letters + string.digits) + "xy"


@functools.cache
def exact_distribution(case: str, warp: Sampling = WARP, length: int = LENGTH) -> dict[tuple[int, ...], float]:
    """P(first `length` tokens) under ordinary sampling with `warp`, from plain forward passes."""
    gm, prompt = model(case), gm_prompt(case)
    dist = {(): 1.0}
    for _ in range(length):
        grown = {}
        for prefix, p in dist.items():
            with torch.no_grad():
                logits = gm.model(torch.tensor([prompt + list(prefix)])).logits[0, -1]
            probs = warp.warp(logits)
            for token in probs.nonzero().squeeze(1).tolist():
                grown[prefix + (token,)] = p * float(probs[token])
        dist = grown
    return dist


def gm_prompt(case: str) -> list[int]:
    return model(case).encode(prompt_text(case))


def chi_square_p_value(counts: dict[tuple[int, ...], int], expected: dict[tuple[int, ...], float], n: int) -> float:
    """Goodness of fit, pooling the least likely outcomes until every cell expects >= 5 draws."""
    cells = sorted(expected, key=expected.get, reverse=True)
    observed, wanted, pool_o, pool_e = [], [], 0, 0.0
    for cell in cells:
        e = expected[cell] * n
        if e >= 5:
            observed.append(counts.get(cell, 0))
            wanted.append(e)
        else:
            pool_o, pool_e = pool_o + counts.get(cell, 0), pool_e + e
    if pool_e > 0:
        observed.append(pool_o)
        wanted.append(pool_e)
    assert sum(counts.values()) == sum(observed), "a sample fell outside the support of the warped distribution"
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, wanted))
    return float(chi2.sf(statistic, len(wanted) - 1))


@pytest.mark.parametrize("case", MAKERS)
@pytest.mark.parametrize("method", list(goose.METHODS))
def test_speculative_sampling_matches_ordinary_sampling(case, method):
    counts: dict[tuple[int, ...], int] = {}
    accepted = rejected = 0
    for draw in range(DRAWS):
        run = goose.generate(model(case), prompt_text(case), method=method, max_new_tokens=LENGTH, budget=12,
                             temperature=WARP.temperature, top_k=WARP.top_k, seed=draw)
        key = tuple(run.tokens)
        counts[key] = counts.get(key, 0) + 1
        for step in run.steps:
            statuses = [node.status for node in step.nodes]
            accepted += statuses.count("accepted")
            rejected += statuses.count("rejected")
    p_value = chi_square_p_value(counts, exact_distribution(case), DRAWS)
    assert p_value > ALPHA, f"{method}: samples do not follow the target distribution (p = {p_value:.2e})"
    if method != "autoregressive":
        assert rejected >= 50, "the walk must reject drafts to be tested"
        assert accepted >= MIN_ACCEPTED.get((case, method), 10), "the walk must accept drafts to be tested"


# Temperature alone: each visited row is one Gumbel-max draw through the screened head
# (goose.walk.SamplingWalker); two tokens keep the exact distribution's support small.
TEMPERATURE_ONLY = Sampling(temperature=0.5)


def _temperature_only_p_value(case: str, method: str) -> float:
    counts: dict[tuple[int, ...], int] = {}
    for draw in range(DRAWS):
        run = goose.generate(model(case), prompt_text(case), method=method, max_new_tokens=2, budget=12,
                             temperature=TEMPERATURE_ONLY.temperature, seed=draw, head="int8")
        counts[tuple(run.tokens)] = counts.get(tuple(run.tokens), 0) + 1
    return chi_square_p_value(counts, exact_distribution(case, TEMPERATURE_ONLY, 2), DRAWS)


@pytest.mark.parametrize("method", ["autoregressive", "goose"])
def test_gumbel_draws_through_the_screen_match_ordinary_sampling(method):
    p_value = _temperature_only_p_value("gemma3-window4", method)
    assert p_value > ALPHA, f"{method}: samples do not follow the target distribution (p = {p_value:.2e})"


def test_the_test_catches_a_biased_gumbel_draw(monkeypatch):
    """Drawing at a lower temperature than asked must fail the same check."""
    from goose.heads.rows import ScreenedRows

    original = ScreenedRows.draw
    monkeypatch.setattr(ScreenedRows, "draw", lambda self, i, t, g: original(self, i, 0.6 * t, g))
    assert _temperature_only_p_value("gemma3-window4", "goose") < ALPHA


def test_the_test_catches_a_biased_sampler(monkeypatch):
    """Accepting drafts too eagerly (probability sqrt(p)) must fail the same check."""
    import goose.sampling as sampling_module

    def eager(probs, children, generator):
        biased = probs.clone()
        for node, token in children:
            p = float(biased[token] / biased.sum())
            if torch.rand((), generator=generator).item() < p ** 0.5:
                return node, None, {node: sampling_module.Verdict("accepted", p, "")}
            biased[token] = 0.0
        return None, int(torch.multinomial(biased / biased.sum(), 1, generator=generator)), {}

    monkeypatch.setattr("goose.walk.choose_child", eager)
    case = "llama"
    counts: dict[tuple[int, ...], int] = {}
    for draw in range(DRAWS):
        run = goose.generate(model(case), prompt_text(case), method="goose", max_new_tokens=LENGTH, budget=12,
                             temperature=WARP.temperature, top_k=WARP.top_k, seed=draw)
        counts[tuple(run.tokens)] = counts.get(tuple(run.tokens), 0) + 1
    assert chi_square_p_value(counts, exact_distribution(case), DRAWS) < ALPHA


def test_same_seed_same_output_and_records_say_why():
    gm, prompt = model("llama"), "the cat sat on the mat. the cat sat on the"
    kwargs = dict(method="goose", max_new_tokens=30, budget=12, temperature=0.9, top_p=0.9, seed=11)
    first, again = goose.generate(gm, prompt, **kwargs), goose.generate(gm, prompt, **kwargs)
    assert first.tokens == again.tokens
    others = {tuple(goose.generate(gm, prompt, **{**kwargs, "seed": s}).tokens) for s in range(5)}
    assert len(others) > 1, "different seeds give different samples"
    tried = [n for step in first.steps for n in step.nodes if n.status in ("accepted", "rejected")]
    assert tried and all(n.accept_prob is not None and 0.0 <= n.accept_prob <= 1.0 and n.reason for n in tried)
    assert first.sampling == {"temperature": 0.9, "top_k": 0, "top_p": 0.9, "seed": 11}


def test_temperature_zero_is_greedy():
    gm, prompt = model("llama"), "the cat sat on the mat. the cat sat on the"
    greedy = goose.generate(gm, prompt, method="goose", max_new_tokens=30, budget=12)
    zero = goose.generate(gm, prompt, method="goose", max_new_tokens=30, budget=12, temperature=0.0, seed=3)
    assert zero.tokens == greedy.tokens


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8), (0.5, 20, 0.6)])
def test_warp_matches_transformers_warpers(temperature, top_k, top_p):
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = torch.randn(3, 200, generator=torch.Generator().manual_seed(0)) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)]
                                  + ([TopKLogitsWarper(top_k)] if top_k else [])
                                  + ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    expected = warpers(None, logits.clone()).softmax(-1)
    ours = Sampling(temperature, top_k, top_p).warp(logits)
    torch.testing.assert_close(ours, expected)


def test_rejection_rule_keeps_the_residual_distribution():
    """Exhaustively: P(child1) = p1, P(child2) = p2, P(bonus = x) = p(x) for every other x."""
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    children = [(1, 2), (2, 3)]  # nodes 1, 2 carry tokens 2, 3
    outcomes = torch.zeros(4)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20000):
        node, bonus, _ = choose_child(probs, children, generator)
        outcomes[{1: 2, 2: 3}[node] if node is not None else bonus] += 1
    torch.testing.assert_close(outcomes / outcomes.sum(), probs, atol=0.015, rtol=0)
