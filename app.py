"""Launch the Goose app: `python app.py` locally or on Hugging Face Spaces.

Honours GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (and PORT) and uses a GPU when
one is present (goose.load_model picks it). The operator's policy comes from
GOOSE_* environment variables (GOOSE_MODELS, GOOSE_ALLOW_ANY_MODEL,
GOOSE_MAX_MODELS, GOOSE_MODEL_FACTORIES; GOOSE_MAX_PROMPT_TOKENS,
GOOSE_MAX_NEW_TOKENS, GOOSE_MAX_BUDGET, GOOSE_MAX_RUN_SECONDS; see docs/SPACE.md).
The server opens only once the first offered model is loaded and warm (head
choice, cost table, a short run of every method), so the first visitor's run
is as fast as the third; it loads on the thread that runs every model call
(app/model_thread.py). On a ZeroGPU Space the main process has no GPU: it
loads every offered model (ZeroGPU moves them to the GPU of each call) and each
GPU call warms its own worker (see app/gpu.py).
"""

from __future__ import annotations

from app import gpu

gpu.import_spaces()  # on ZeroGPU, `spaces` must patch torch before anything touches CUDA

import logging  # noqa: E402
import os  # noqa: E402

from app.limits import Limits  # noqa: E402
from app.model_thread import run_on_model_thread  # noqa: E402
from app.models import ModelRegistry  # noqa: E402
from app.ui import LAUNCH_OPTIONS, build_app  # noqa: E402

registry = ModelRegistry.from_env()
demo = build_app(registry, limits=Limits.from_env())

if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("app").setLevel(logging.INFO)
    run_on_model_thread(registry.before_launch, gpu.on_zero_gpu())  # the thread that will run the model
    port = os.environ.get("GRADIO_SERVER_PORT") or os.environ.get("PORT")
    demo.queue(default_concurrency_limit=1).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME"), server_port=int(port) if port else None, **LAUNCH_OPTIONS)
