"""Launch the Goose app: `python app.py` locally or on Hugging Face Spaces.

Honours GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (and PORT) and uses a GPU when
one is present (goose.load_model picks it). The embedded model starts loading
in the background so the first click does not wait for all of it.
"""

from __future__ import annotations

import os

from app.models import ModelRegistry
from app.ui import build_app

registry = ModelRegistry()
demo = build_app(registry)

if __name__ == "__main__":
    registry.preload()
    port = os.environ.get("GRADIO_SERVER_PORT") or os.environ.get("PORT")
    demo.queue(default_concurrency_limit=1).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME"), server_port=int(port) if port else None)
