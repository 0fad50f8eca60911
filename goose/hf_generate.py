"""Goose inside `transformers`' `generate`: the bridge from its conventions to Goose's decoding loop.

`model.generate(ids, custom_generate=goose_generate, method="goose")`: transformers prepares the call as
usual (generation config and its defaults, stopping criteria, logits processors, the prompt already put
into the streamer) and hands the decoding loop to `goose_generate`, which runs `goose.stream` on the
prompt's token ids and gives back what `generate` would: the sequences, or a GenerateDecoderOnlyOutput.
`model.generate(ids, custom_generate="<this repository>", trust_remote_code=True)` runs
custom_generate/generate.py, which calls `hub_generate` here and ends in the same place.

What carries over: max_new_tokens / max_length, eos_token_id, do_sample with temperature, top_k and
top_p (Goose's lossless tree sampling, seeded from torch's generator unless `seed=` is given), a streamer
(one put() per new token, in order, then end()), stopping criteria (called once per new token with the
sequence so far, as `generate` calls them, so a run stops exactly where `generate` stops; `scores` is
None: Goose computes no score rows), return_dict_in_generate, an all-ones attention mask. What Goose
cannot do losslessly raises a ValueError naming the option.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import fields
from weakref import WeakKeyDictionary

import torch
from transformers import AutoTokenizer, GenerationConfig, GenerationMixin
from transformers.generation import (
    GenerateDecoderOnlyOutput,
    LogitsProcessorList,
    StoppingCriteriaList,
    StopStringCriteria,
)
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from goose import validate
from goose.config import GooseConfig
from goose.decode import Generation, stream
from goose.model import GooseModel
from goose.sources import SuffixStore
from goose.verify import check_attention_kernel

# Goose's own sampling applies these itself, from the generation config's values.
WARPERS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

# The `generate` option behind each logits processor Goose cannot apply losslessly (the first one set, where
# several lead to it; others: `logits_processor`).
PROCESSOR_OPTIONS = {
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "EncoderRepetitionPenaltyLogitsProcessor": "encoder_repetition_penalty",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "MinLengthLogitsProcessor": ("min_new_tokens", "min_length"),  # generate turns min_new_tokens into min_length
    "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "SequenceBiasLogitsProcessor": "sequence_bias",
    "PrefixConstrainedLogitsProcessor": "prefix_allowed_tokens_fn",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
    "ExponentialDecayLengthPenalty": "exponential_decay_length_penalty",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "ClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "MinPLogitsWarper": "min_p",
    "TopHLogitsWarper": "top_h",
    "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff",
    "EtaLogitsWarper": "eta_cutoff",
    "InfNanRemoveLogitsProcessor": "remove_invalid_values",
    "WatermarkLogitsProcessor": "watermarking_config",
    "SynthIDTextWatermarkLogitsProcessor": "watermarking_config",
}

# Generation-config options Goose cannot honour, with the value that means "off".
UNSUPPORTED_CONFIG = {
    "num_beams": 1,
    "num_beam_groups": 1,
    "num_return_sequences": 1,
    "prompt_lookup_num_tokens": None,
    "assistant_early_exit": None,
    "output_scores": False,
    "output_logits": False,
    "output_attentions": False,
    "output_hidden_states": False,
}

# GooseConfig knobs taken as keyword arguments; a knob whose name `generate` already owns (top_k: the
# sampling top-k) is set through goose_config=GooseConfig(...) instead.
KNOBS = tuple(f.name for f in fields(GooseConfig) if f.name != "budget" and not hasattr(GenerationConfig(), f.name))

_GOOSE_MODELS: WeakKeyDictionary = WeakKeyDictionary()


def goose_model_for(model: torch.nn.Module | GooseModel, tokenizer=None) -> GooseModel:
    """The GooseModel `generate` runs for this transformers model: made once per model object and kept, so
    that its heads and verification costs are built once (every run starts its budget tuner afresh).

    Give a GooseModel (from goose.load_model) to have `generate` share it. The tokenizer (Goose needs the
    end-of-sequence id and token texts) is the one given here, else one given before for this model, else
    loaded from the model's `name_or_path`."""
    if isinstance(model, GooseModel):
        _GOOSE_MODELS[model.model] = model
        return model
    goose_model = _GOOSE_MODELS.get(model)
    if goose_model is None:
        check_attention_kernel(model)
        # the name keys the measured verification costs: a model built in memory has no path
        name = getattr(model, "name_or_path", "") or f"{type(model).__name__}-{model.num_parameters()}"
        goose_model = _GOOSE_MODELS[model] = GooseModel(model, tokenizer or _load_tokenizer(model), name)
    elif tokenizer is not None:
        goose_model.tokenizer = tokenizer
    return goose_model


def _load_tokenizer(model: torch.nn.Module):
    source = getattr(model, "name_or_path", "")
    details = "the model has no name_or_path"
    if source:
        try:
            return AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as error:
            details = str(error)
    raise ValueError(f"Goose needs the model's tokenizer (its end-of-sequence id and token texts) and cannot load "
                     f"it from {source!r}: call goose.goose_model_for(model, tokenizer) once before generate "
                     f"(transformers does not pass `tokenizer` on to a custom_generate callable). Details: {details}")


def _unsupported(option: str, why: str = "") -> ValueError:
    return ValueError(f"Goose's generate does not support `{option}`{': ' + why if why else ''}")


# What `streamer` and `assistant_model` default to in goose_generate: not passed on by transformers, which
# (5.x) gives a custom_generate callable only the prepared inputs and the callable's own keywords
# (GenerationMixin._extract_generation_mode_kwargs), though it has already put the prompt into the streamer.
KEPT_BACK = object()
_GENERATE = inspect.unwrap(GenerationMixin.generate).__code__  # the `generate` whose call holds them


def _kept_back(name: str):
    """Argument `name` of the `generate` call that handed its loop to goose_generate, where transformers kept
    it back. Nothing else carries it to a callable, so read it from that call on the stack; where that call
    cannot be found, refuse loudly: a streamer never ended leaves its consumer waiting forever."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_code is not _GENERATE:
        frame = frame.f_back
    if frame is None or name not in frame.f_locals:
        raise RuntimeError(
            f"Goose cannot reach `generate`'s `{name}`: this transformers keeps it from a custom_generate "
            "callable and its `generate` call is not on the stack. Call goose_generate with "
            f"`{name}=` (None for none), or use the repository form (custom_generate=\"<goose repository>\"), "
            "which hands it over as an argument.")
    return frame.f_locals[name]


def _check_supported(input_ids: torch.Tensor, generation_config: GenerationConfig,
                     logits_processor: LogitsProcessorList | None, assistant_model, model_kwargs: dict) -> None:
    """ValueError naming the first option Goose cannot honour exactly."""
    if assistant_model is not None:
        raise _unsupported("assistant_model", "Goose drafts from the context and its own predictions")
    for option, off in UNSUPPORTED_CONFIG.items():
        if getattr(generation_config, option, None) not in (off, None):
            raise _unsupported(option)
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise _unsupported("batch size > 1", f"got input_ids of shape {tuple(input_ids.shape)}; "
                                             "Goose decodes one sequence at a time")
    for processor in logits_processor or ():
        if not isinstance(processor, WARPERS):
            name = type(processor).__name__
            options = PROCESSOR_OPTIONS.get(name, "logits_processor")
            if isinstance(options, tuple):
                options = next((o for o in options if getattr(generation_config, o, None)), options[-1])
            raise _unsupported(options, f"{name} changes the target distribution in a way Goose cannot "
                                        "verify losslessly")
    for name, value in model_kwargs.items():
        if value is None or name in ("use_cache", "logits_to_keep"):
            continue
        if name == "attention_mask" and bool((value == 1).all()):
            continue
        if name == "position_ids" and torch.equal(value.cpu(), torch.arange(input_ids.shape[1])[None]):
            continue
        if name in ("cache", "past_key_values") and value.get_seq_length() == 0:
            continue
        why = ("only an all-ones mask (no padding)" if name == "attention_mask" else
               "Goose starts from the prompt alone" if name in ("cache", "past_key_values", "position_ids") else "")
        raise _unsupported(name, why)


def _sampling(generation_config: GenerationConfig, seed: int | None) -> dict:
    """Goose's sampling options from the generation config: greedy unless do_sample. The seed is checked either
    way: a bad one is refused, not ignored because this call happens to be greedy."""
    seed = validate.seed(seed)
    if not generation_config.do_sample:
        return {"temperature": 0.0}
    if seed is None:  # from torch's generator, so that torch.manual_seed makes a run repeatable, as in generate
        seed = int(torch.randint(0, 2**62, ()))
    temperature, top_p = generation_config.temperature, generation_config.top_p
    return {"temperature": 1.0 if temperature is None else temperature, "top_k": generation_config.top_k or 0,
            "top_p": 1.0 if top_p is None else top_p, "seed": seed}


def _eos_ids(generation_config: GenerationConfig) -> set[int]:
    eos = generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


def goose_generate(model, input_ids: torch.LongTensor, logits_processor: LogitsProcessorList | None = None,
                   stopping_criteria: StoppingCriteriaList | None = None,
                   generation_config: GenerationConfig | None = None, streamer=KEPT_BACK,
                   assistant_model=KEPT_BACK, method: str = "goose", budget: int | str | None = None,
                   head: str = "auto", seed: int | None = None, goose_config: GooseConfig | None = None,
                   store: SuffixStore | None = None, **kwargs):
    """The decoding loop for `model.generate(input_ids, custom_generate=goose_generate, ...)`.

    transformers calls it with the prepared input_ids, logits processors, stopping criteria and generation
    config, plus the model's keyword arguments. Goose's options: method, budget, head, seed (of the sampling;
    default: drawn from torch's generator), goose_config, store (past outputs the suffix methods draft from:
    goose.SuffixStore), and any GooseConfig knob as a keyword (see KNOBS).
    `streamer` and `assistant_model` are generate's: given here (hub_generate does), else read from the
    `generate` call, which transformers 5.x does not pass them on from (KEPT_BACK).
    Returns what `generate` returns: the sequences (prompt + new tokens), or a GenerateDecoderOnlyOutput
    holding them when return_dict_in_generate.
    """
    generation_config = generation_config or model.generation_config
    streamer = _kept_back("streamer") if streamer is KEPT_BACK else streamer
    try:
        if assistant_model is KEPT_BACK:
            assistant_model = _kept_back("assistant_model")
        knobs = {name: kwargs.pop(name) for name in KNOBS if name in kwargs}
        _check_supported(input_ids, generation_config, logits_processor, assistant_model, kwargs)
        prompt = input_ids[0].tolist()
        max_new_tokens = generation_config.max_length - len(prompt)
        if max_new_tokens < 1:
            raise ValueError(f"max_length {generation_config.max_length} leaves no room after the prompt's "
                             f"{len(prompt)} tokens; set max_new_tokens")
        generation = stream(goose_model_for(model), prompt, method, max_new_tokens, budget, head=head,
                            config=goose_config, store=store, **_sampling(generation_config, seed), **knobs)
        generation.target.eos = _eos_ids(generation_config)  # generate's end-of-sequence ids, not the tokenizer's
        sequences = _decode(generation, input_ids, max_new_tokens, stopping_criteria or StoppingCriteriaList(),
                            streamer)
    finally:
        if streamer is not None:
            streamer.end()
    if generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences


# transformers finds a callable's own options by its signature: list the GooseConfig knobs there.
goose_generate.__signature__ = inspect.signature(goose_generate).replace(parameters=[
    *list(inspect.signature(goose_generate).parameters.values())[:-1],
    *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(GooseConfig, name)) for name in KNOBS),
    inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])


def _decode(generation: Generation, input_ids: torch.LongTensor, max_new_tokens: int,
            stopping_criteria: StoppingCriteriaList, streamer) -> torch.LongTensor:
    """Run the generation, passing each new token on as `generate` does: into the sequence, to the streamer,
    then past the stopping criteria; the first token a criterion stops at is the last one kept."""
    prompt_length = input_ids.shape[1]
    sequence = torch.empty((1, prompt_length + max_new_tokens), dtype=torch.long, device=input_ids.device)
    sequence[:, :prompt_length] = input_ids
    length = prompt_length
    tokens = generation.run.tokens
    for _ in _steps_then_end(generation):
        for token in tokens[length - prompt_length:]:
            sequence[0, length] = token
            length += 1
            if streamer is not None:
                streamer.put(torch.tensor([token]))
            if bool(stopping_criteria(sequence[:, :length], None).any()):
                return sequence[:, :length]
    return sequence[:, :length]


def _steps_then_end(generation: Generation):
    """After every step, and once more when the run is over (a run that ends at the prefill's token has no step)."""
    yield from generation
    yield None


def hub_generate(model, *, tokenizer=None, assistant_model=None, stop_strings=None, streamer=None, **arguments):
    """What `custom_generate="<this repository>"` runs (custom_generate/generate.py): `generate`'s own
    arguments, unprepared. transformers prepares them as for any call and hands the loop to goose_generate.

    `generate` would drop `tokenizer` on the way to a callable, and with it the stop strings' criterion: the
    tokenizer goes to the GooseModel and the criterion is made here. It would keep `streamer` back too: it
    still gets the streamer (to put the prompt in, as in any generate call), and goose_generate gets it here."""
    if assistant_model is not None:
        raise _unsupported("assistant_model", "Goose drafts from the context and its own predictions")
    if tokenizer is not None:
        goose_model_for(model, tokenizer)
        if stop_strings:
            criteria = StopStringCriteria(tokenizer, [stop_strings] if isinstance(stop_strings, str) else stop_strings)
            arguments["stopping_criteria"] = StoppingCriteriaList([*(arguments.get("stopping_criteria") or ()),
                                                                   criteria])
            stop_strings = None
    loop = functools.partial(goose_generate, streamer=streamer, assistant_model=None)
    return GenerationMixin.generate(model, custom_generate=loop, tokenizer=tokenizer, stop_strings=stop_strings,
                                    streamer=streamer, **arguments)
