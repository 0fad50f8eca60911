"""Goose: training-free speculative decoding with anisotropic (spine) speculation trees."""

from goose.check import run_what_if
from goose.config import GooseConfig
from goose.decode import Generation, generate, is_warm, stream, warm_up
from goose.diagnose import Diagnosis, StepDiagnosis, diagnose
from goose.drafters import METHODS, Drafter, DraftState, available_methods, unavailable_methods
from goose.hf_generate import goose_generate, goose_model_for
from goose.model import DEFAULT_MODEL, GooseModel, ModelLoadError, load_model
from goose.model_threads import ThreadsWarning
from goose.optimal import optimal_tree
from goose.sampling import Sampling
from goose.sources import SuffixStore
from goose.trace import NodeRecord, RunRecord, StepRecord
from goose.tree import DraftTree
from goose.verify import UnsupportedModelError
from goose.whatif import RunWhatIf, WhatIf, what_if

__all__ = ["DEFAULT_MODEL", "METHODS", "Diagnosis", "DraftState", "DraftTree", "Drafter", "Generation", "GooseConfig",
           "GooseModel", "ModelLoadError", "NodeRecord", "RunRecord", "RunWhatIf", "Sampling", "StepDiagnosis",
           "StepRecord", "SuffixStore", "ThreadsWarning", "UnsupportedModelError", "WhatIf", "available_methods",
           "diagnose", "generate", "goose_generate", "goose_model_for", "is_warm", "load_model", "optimal_tree",
           "run_what_if", "stream", "unavailable_methods", "warm_up", "what_if"]
