"""Tree masks, positions and the KV cache kept after a step."""

from __future__ import annotations

import torch
from tiny import tiny_gemma3, tiny_llama

from goose.verify import Verifier, ancestor_matrix, tree_attention_mask

# root(0) -> 1 -> 3 ; root -> 2
PARENTS, DEPTHS = [-1, 0, 0, 1], [0, 1, 1, 2]


def test_ancestor_matrix_sees_self_and_ancestors_only():
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    assert torch.equal(ancestor_matrix(PARENTS), expected)
    assert torch.equal(ancestor_matrix([-1, 0, 1]), torch.ones(3, 3, dtype=torch.bool).tril())


def test_mask_is_additive_float_with_prefix_and_window():
    mask = tree_attention_mask(PARENTS, DEPTHS, prefix_length=5, dtype=torch.float32)
    assert mask.shape == (1, 1, 4, 9) and mask.dtype == torch.float32
    visible = mask[0, 0] == 0
    assert visible[:, :5].all()
    assert torch.equal(visible[:, 5:], ancestor_matrix(PARENTS))
    assert (mask[0, 0][~visible] == torch.finfo(torch.float32).min).all()
    windowed = tree_attention_mask(PARENTS, DEPTHS, prefix_length=5, dtype=torch.float32, window=3)[0, 0] == 0
    # node 3 sits at position 5 + 2 = 7: with window 3 it sees positions 5..7 only
    assert windowed[3].tolist() == [False] * 5 + [True, True, False, True]
    assert windowed[0].tolist() == [False, False, False, True, True, True, False, False, False]


def _fresh_logits(goose_model, tokens):
    with torch.no_grad():
        return goose_model.model(torch.tensor([tokens])).logits[0, -1]


def test_tree_logits_equal_plain_forward_along_every_path():
    """Each node's logits equal those of a plain causal pass over prefix + its root-to-node path."""
    for goose_model in (tiny_llama(1), tiny_gemma3(1, sliding_window=4)):
        prefix = goose_model.encode("hello there, general")
        tree_tokens = [40, 41, 42, 43]
        verifier = Verifier(goose_model.model)
        verifier.forward_chain(prefix)
        verifier.prefix_length = len(prefix)
        with torch.no_grad():
            logits = goose_model.model.lm_head(verifier.forward(tree_tokens, PARENTS, DEPTHS))
        for node, path in {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3]}.items():
            expected = _fresh_logits(goose_model, prefix + [tree_tokens[n] for n in path])
            torch.testing.assert_close(logits[node], expected, rtol=1e-4, atol=1e-4)


def test_commit_keeps_the_accepted_path_in_the_cache():
    goose_model = tiny_gemma3(2, sliding_window=4)
    prefix = goose_model.encode("abcdefgh")
    tree_tokens = [40, 41, 42, 43]
    verifier = Verifier(goose_model.model)
    verifier.forward_chain(prefix)
    verifier.prefix_length = len(prefix)
    verifier.forward(tree_tokens, PARENTS, DEPTHS)
    verifier.commit([0, 1, 3])  # keep root, node 1, node 3
    assert verifier.prefix_length == len(prefix) + 3
    assert all(layer.keys.shape[2] == verifier.prefix_length for layer in verifier.cache.layers)
    with torch.no_grad():
        after = goose_model.model.lm_head(verifier.forward_chain([44]))[0]
    expected = _fresh_logits(goose_model, prefix + [40, 41, 43, 44])
    torch.testing.assert_close(after, expected, rtol=1e-4, atol=1e-4)
