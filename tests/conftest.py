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
