"""Launch the Goose app: `python app.py` locally or on Hugging Face Spaces.

Honours GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (and PORT) and uses a GPU when
one is present (goose.load_model picks it). The operator's policy comes from
GOOSE_* environment variables (GOOSE_MODELS, GOOSE_ALLOW_ANY_MODEL,
GOOSE_MAX_MODELS, GOOSE_MODEL_FACTORIES; GOOSE_MAX_PROMPT_TOKENS,
GOOSE_MAX_NEW_TOKENS, GOOSE_MAX_BUDGET, GOOSE_MAX_RUN_SECONDS; see the README).
The first offered model starts loading in the background so the first click
does not wait for all of it.
"""

from __future__ import annotations

import os

from app.limits import Limits
from app.models import ModelRegistry
from app.ui import build_app

registry = ModelRegistry.from_env()
demo = build_app(registry, limits=Limits.from_env())

if __name__ == "__main__":
    registry.preload(next(iter(registry.choices), None))
    port = os.environ.get("GRADIO_SERVER_PORT") or os.environ.get("PORT")
    demo.queue(default_concurrency_limit=1).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME"), server_port=int(port) if port else None)
