"""Where the shipped assets live: example prompts, example traces, the MT-Bench questions."""

from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
