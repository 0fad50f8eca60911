"""The screened LM head returns exactly the float32 argmax, for any hidden state."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_gemma3, tiny_llama

from goose.head import FullHead, ScreenedHead, make_head


def _check_same_argmax(lm_head: torch.nn.Linear, hidden: torch.Tensor) -> ScreenedHead:
    screened = ScreenedHead(lm_head, None)
    full_argmax, full_top = FullHead(lm_head, None).greedy(hidden, 5)
    argmax, top = screened.greedy(hidden, 5)
    assert torch.equal(argmax, full_argmax)
    assert top.indices.shape == full_top.indices.shape == (hidden.shape[0], 5)
    return screened


@pytest.mark.parametrize("seed", range(5))
def test_screened_argmax_equals_full_argmax_on_random_heads(seed):
    generator = torch.Generator().manual_seed(seed)
    lm_head = torch.nn.Linear(64, 5000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(torch.randn(5000, 64, generator=generator) * 0.05)
    hidden = torch.randn(40, 64, generator=generator) * (1 + seed)
    _check_same_argmax(lm_head, hidden)


def test_near_ties_are_recomputed_in_float32():
    """Two rows a hair apart: bf16 cannot tell them apart, the screen must still pick the float32 winner."""
    weight = torch.randn(1000, 32) * 0.1
    weight[7] = weight[3] + 1e-4  # row 7 beats row 3 by far less than bf16 resolution
    hidden = weight[3].clone() * 50 + 1e-3
    lm_head = torch.nn.Linear(32, 1000, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(weight)
    screened = _check_same_argmax(lm_head, hidden[None])
    assert screened.screened_rows >= 2


def test_make_head_uses_the_screen_only_where_it_is_exact():
    assert isinstance(make_head(tiny_llama(0).model, screened=True), ScreenedHead)
    assert type(make_head(tiny_llama(0).model, screened=False)) is FullHead
    capped = tiny_gemma3(0)
    capped.model.config.final_logit_softcapping = 30.0
    assert isinstance(make_head(capped.model, screened=True), ScreenedHead)
    assert make_head(capped.model, screened=True).cap == 30.0


@pytest.mark.slow
def test_screened_argmax_on_the_real_gemma_head(gemma):
    ids = torch.tensor([gemma.encode("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the")])
    with torch.no_grad():
        hidden = gemma.model.get_decoder()(input_ids=ids).last_hidden_state[0]
    screened = _check_same_argmax(gemma.model.lm_head, hidden)
    assert screened.screened_rows < 10 * hidden.shape[0], "the screen should leave only a few rows to recompute"
