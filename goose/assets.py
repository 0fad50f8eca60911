"""Where Goose's files live: the shipped assets (example prompts, example traces, the MT-Bench questions) and
the user cache (converted models, measured costs, learnt tuner starts, built priors), and how a measurement is
kept there."""

import json
import os
from collections.abc import Callable
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def cache_dir() -> Path:
    """The user cache: $GOOSE_CACHE, else the user cache folder."""
    root = os.environ.get("GOOSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "goose")
    return Path(root)


def kept_on_disk(path: os.PathLike, key: str, measure: Callable[[], object]):
    """`measure()` kept on disk under `key` in the JSON file `path`: measured once per machine, so that every
    process agrees (a choice timed anew in each process follows the noise of the moment), written atomically
    (several processes may measure at once)."""
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        table = {}
    if key not in table:
        table[key] = measure()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        staging = f"{path}.{os.getpid()}.tmp"
        with open(staging, "w") as file:
            json.dump(table, file, indent=1)
        os.replace(staging, path)
    return table[key]
