"""Where Goose's files live: the shipped assets (example prompts, example traces, the MT-Bench questions) and
the user cache (converted models, measured costs, built priors)."""

import os
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def cache_dir() -> Path:
    """The user cache: $GOOSE_CACHE, else the user cache folder."""
    root = os.environ.get("GOOSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "goose")
    return Path(root)
