"""Tree verification in one forward pass of a stock `transformers` model (docs/METHOD.md, "Verification").

Node i of a flattened tree sits at position prefix + depth(i) and may attend
to the whole cached prefix, its ancestors and itself. The mask is additive and
float (a boolean mask is silently ignored by eager attention). Layers with a
sliding window also hide keys more than `window - 1` positions back: the KV
cache here keeps every position on every layer, so the window lives in the mask.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Protocol

import torch
from transformers import DynamicCache

from goose.packed import pack_linears, packed_linears
from goose.parallel import check_lockstep, is_tensor_parallel


class Flattened(Protocol):
    """What verification reads of a draft tree (goose.tree.DraftTree): its nodes, parents first."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]

# Kernels that apply an arbitrary additive 4-D mask. Flash attention drops it.
MASK_KERNELS = ("sdpa", "eager")


class UnsupportedModelError(ValueError):
    """The model cannot verify trees losslessly (attention kernel or layer type)."""


def attention_layout(config) -> dict[str, int | None] | int | None:
    """How the model wants its mask: a window (or None) for a single mask, or
    a dict of layer type -> window for models that take one mask per layer type."""
    config = config.get_text_config(decoder=True)
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if layer_types is None:
        return window
    windows: dict[str, int | None] = {}
    for layer_type in set(layer_types):
        if layer_type == "full_attention":
            windows[layer_type] = None
        elif layer_type == "sliding_attention":
            windows[layer_type] = window
        else:
            raise UnsupportedModelError(
                f"layer type {layer_type!r} is not supported for tree verification "
                "(only full and sliding-window attention layers are)")
    return windows


def check_attention_kernel(model) -> None:
    kernel = getattr(model.config, "_attn_implementation", None) or "eager"
    if kernel not in MASK_KERNELS:
        raise UnsupportedModelError(
            f"attention kernel {kernel!r} ignores custom tree masks, so verification would not be lossless; "
            f"load the model with attn_implementation='sdpa' or 'eager'")


def ancestor_matrix(parents: list[int]) -> torch.Tensor:
    """[n, n] bool: entry (i, j) is True when j is i or one of i's ancestors."""
    n = len(parents)
    if all(p == i - 1 for i, p in enumerate(parents)):  # a chain (prefill, AR, PLD): plain causal
        return torch.ones(n, n, dtype=torch.bool).tril_()
    visible = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            visible[i] |= visible[parent]
    return visible


def tree_attention_mask(parents: list[int], depths: list[int], prefix_length: int, dtype: torch.dtype,
                        window: int | None = None) -> torch.Tensor:
    """Additive [1, 1, n, prefix + n] mask: 0 where a node may look, finfo.min elsewhere."""
    n = len(parents)
    visible = torch.cat([torch.ones(n, prefix_length, dtype=torch.bool), ancestor_matrix(parents)], dim=1)
    if window is not None:
        query_positions = prefix_length + torch.tensor(depths)
        key_positions = torch.cat([torch.arange(prefix_length), query_positions])
        visible &= (query_positions[:, None] - key_positions[None, :]) < window
    mask = torch.zeros(n, prefix_length + n, dtype=dtype)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


class Verifier:
    """Runs trees through a model against a KV cache it owns.

    The cache holds every committed token except the anchor (the tree root).
    """

    def __init__(self, model) -> None:
        check_attention_kernel(model)
        self.body = model.get_decoder()  # the transformer without its LM head
        self.packed = pack_linears(self.body)  # oneDNN linears on a CPU, once per model (goose.packed)
        self.layout = attention_layout(model.config)
        self.device = model.get_input_embeddings().weight.device
        self.dtype = model.get_input_embeddings().weight.dtype
        self.cache = DynamicCache()
        self.prefix_length = 0
        self.lockstep = is_tensor_parallel(model)  # every pass checks that the ranks verify the same tree

    def _mask(self, parents: list[int], depths: list[int]):
        def build(window):
            return tree_attention_mask(parents, depths, self.prefix_length, self.dtype, window).to(self.device)
        if not isinstance(self.layout, dict):
            return build(self.layout)
        by_window: dict[int | None, torch.Tensor] = {}  # layer types sharing a window share a mask
        for window in self.layout.values():
            if window not in by_window:
                by_window[window] = build(window)
        return {kind: by_window[window] for kind, window in self.layout.items()}

    @torch.inference_mode()
    def forward(self, tokens: list[int], parents: list[int], depths: list[int]) -> torch.Tensor:
        """Append the nodes to the cache; return their final hidden states [n, hidden] (the LM head is
        left to the caller, which knows which rows it needs)."""
        if self.lockstep:
            check_lockstep(self.prefix_length, tokens, parents, depths)
        input_ids = torch.tensor([tokens], device=self.device)
        positions = (self.prefix_length + torch.tensor([depths])).to(self.device)
        with packed_linears() if self.packed else nullcontext():
            output = self.body(input_ids=input_ids, attention_mask=self._mask(parents, depths),
                               position_ids=positions, cache=self.cache, use_cache=True)
        return output.last_hidden_state[0]

    def forward_tree(self, tree: Flattened) -> torch.Tensor:
        return self.forward(tree.tokens, tree.parents, tree.depths)

    def forward_chain(self, tokens: list[int]) -> torch.Tensor:
        n = len(tokens)
        return self.forward(tokens, list(range(-1, n - 1)), list(range(n)))

    @torch.inference_mode()
    def commit(self, path: list[int]) -> None:
        """Keep the prefix plus the `path` nodes (root first) of the nodes just appended; drop the rest."""
        if path != list(range(len(path))):  # the path is not already in place: gather it there
            keep = torch.tensor(path) + self.prefix_length
            end = self.prefix_length + len(path)
            for layer in self.cache.layers:
                index = keep.to(layer.keys.device)
                layer.keys[:, :, self.prefix_length:end] = layer.keys.index_select(2, index)
                layer.values[:, :, self.prefix_length:end] = layer.values.index_select(2, index)
        self.truncate(self.prefix_length + len(path))

    def truncate(self, length: int) -> None:
        """Keep the first `length` cached positions as the committed prefix."""
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[:, :, :length], layer.values[:, :, :length]
        self.prefix_length = length
