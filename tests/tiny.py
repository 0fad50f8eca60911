"""Tiny randomly initialised target models for fast tests (losslessness must hold for any weights)."""

from __future__ import annotations

import string
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from goose.model import GooseModel

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character, plus <pad> <bos> <eos> <unk>."""
    vocab = {token: i for i, token in enumerate(SPECIALS + list(string.printable))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", add_bos_token=True)


def _finish(model, tokenizer, name: str, eos: bool) -> GooseModel:
    model.eval()
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id if eos else None,
                                               bos_token_id=tokenizer.bos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    if not eos:  # let random weights run to max_new_tokens
        tokenizer.eos_token = None
    return GooseModel(model, tokenizer, name)


def tiny_llama(seed: int = 0, attn: str = "sdpa", eos: bool = False) -> GooseModel:
    tokenizer = char_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         initializer_range=0.2, attn_implementation=attn)
    return _finish(LlamaForCausalLM(config), tokenizer, f"tiny-llama-{seed}", eos)


def tiny_gemma3(seed: int = 0, sliding_window: int = 8, attn: str = "sdpa", eos: bool = False) -> GooseModel:
    """A tiny Gemma 3 with sliding-window layers (and full ones), window `sliding_window`."""
    tokenizer = char_tokenizer()
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                              sliding_window=sliding_window,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                              max_position_embeddings=1024, initializer_range=0.2, attn_implementation=attn,
                              # tied embeddings make a random Gemma echo its last input token forever
                              tie_word_embeddings=False)
    return _finish(Gemma3ForCausalLM(config), tokenizer, f"tiny-gemma3-{seed}", eos)


def slow_tiny_gemma3(delay_s: float = 0.02) -> GooseModel:
    """tiny_gemma3(0) whose every forward pass first sleeps `delay_s`: long enough runs to stop half-way."""
    goose_model = tiny_gemma3(0)
    goose_model.model.get_decoder().register_forward_pre_hook(lambda *_: time.sleep(delay_s))
    return goose_model


def echo_gemma3() -> GooseModel:
    """tiny_gemma3(0) with its output embedding tied to its input one: a random Gemma then echoes its last input
    token forever, so its greedy continuation is known before it runs (its anchor, again and again)."""
    goose_model = tiny_gemma3(0)
    goose_model.model.lm_head.weight = goose_model.model.get_input_embeddings().weight
    return goose_model
