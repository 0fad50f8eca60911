"""Which heads a run may ask for, and the head of each kind built once per model.

A kind is one of HEADS (goose.heads.screens), a routed pair of them (goose.heads.routing), or "auto", which
the loop resolves to whichever is faster here (goose.costs.choose_head) before it asks for a head.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from goose.heads.protocol import LMHead
from goose.heads.routing import RoutedHead, parse_routed
from goose.heads.screens import HEADS, FullHead, Int8ScreenedHead, ScreenedHead
from goose.parallel import is_sharded


class ModelWithCache(Protocol):
    """What the factory reads of a goose.model.GooseModel: the model, and the cache its heads are kept in (the
    heads stay below the model's module: they are built from a torch model, whatever loaded it)."""

    model: torch.nn.Module
    cache: Any

HEAD_CHOICES = ("auto", *HEADS)  # auto (the default): whichever exact head is faster here (goose.costs.choose_head),
# which may be a routed pair, one head for small calls and one for big (RoutedHead, "int8+screened@8")
HEAD_CLASSES = {"int8": Int8ScreenedHead, "screened": ScreenedHead, "full": FullHead}


def known_head(kind: str) -> bool:
    """A head a run may ask for: one of HEAD_CHOICES, or a routed pair of HEADS (routed_kind)."""
    return kind in HEAD_CHOICES or (isinstance(kind, str) and parse_routed(kind) is not None)


def heads_built(lm_head: torch.nn.Module) -> list[str]:
    """The heads that really exist for this LM head: the screens need a whole float32 Linear head without bias
    (their bounds assume it; a head split over ranks is not whole: goose.parallel), "int8" also fbgemm and a CPU;
    elsewhere they would be the full head."""
    plain = (isinstance(lm_head, torch.nn.Linear) and lm_head.bias is None and lm_head.weight.dtype == torch.float32
             and not is_sharded(lm_head.weight))
    return [kind for kind in HEADS
            if kind == "full" or (plain and (kind != "int8" or Int8ScreenedHead.available(lm_head)))]


def make_head(model: torch.nn.Module, kind: str = "screened") -> FullHead:
    """The head `kind` where it is built for this model (heads_built), else the full one."""
    if kind not in HEADS:
        raise ValueError(f"unknown head {kind!r}; choose one of {', '.join(HEADS)}")
    config = model.config.get_text_config(decoder=True)
    cap = getattr(config, "final_logit_softcapping", None)
    lm_head = model.get_output_embeddings()
    return HEAD_CLASSES[kind if kind in heads_built(lm_head) else "full"](lm_head, cap)


def head_for(goose_model: ModelWithCache, kind: str = "screened") -> LMHead:
    """One head of each kind per model, built on first use and kept on the model: the screened head's
    bfloat16 weight copy and norms cost about a second on the embedded model, once rather than per call."""
    heads = goose_model.cache.heads
    if kind not in heads:
        routed = parse_routed(kind)
        heads[kind] = (RoutedHead(head_for(goose_model, routed[0]), head_for(goose_model, routed[1]), routed[2])
                       if routed else make_head(goose_model.model, kind))
    return heads[kind]


def heads_here(goose_model: ModelWithCache) -> list[str]:
    """The heads really built for this model on its device (gpu_check and auto time only these)."""
    return heads_built(goose_model.model.get_output_embeddings())
