import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
torch.set_num_threads(int(os.environ.get("GOOSE_TEST_THREADS", "2")))


@pytest.fixture(scope="session")
def gemma():
    """The real embedded Gemma 3 270M (float32), loaded once per session."""
    import goose

    return goose.load_model(device="cpu")


@pytest.fixture(scope="module", autouse=True)
def no_model_thread_left():
    """After each test file, the app's model thread (app.model_thread) ends: left alive, its OpenMP team beside the
    main thread's would slow every later test's model runs (libgomp stops spinning once two teams share 2 cores)."""
    yield
    if "app.model_thread" in sys.modules:
        sys.modules["app.model_thread"].stop_model_thread()


FLAT_COSTS = {1: 1.0, 4: 1.01, 16: 1.05}


@pytest.fixture
def flat_costs(monkeypatch):
    """A flat verification cost table for tiny models in place of the measured one: a tiny model's measured
    costs follow the machine's load, and a steep table makes the root alone the tuner's pick for whole runs;
    flat, every auto-budget run drafts trees."""
    import goose.decode

    monkeypatch.setattr(goose.decode, "cost_table", lambda model, head="screened": dict(FLAT_COSTS))
