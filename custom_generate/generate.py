"""Goose (training-free speculative decoding with spine trees) as a `custom_generate` repository.

    model.generate(input_ids, custom_generate="<this repository>", trust_remote_code=True, method="goose")

transformers copies this file into its modules cache and calls `generate(model, **generate's arguments)`,
so it cannot import its neighbours: the decoding lives in the `goose` package, which must be installed
(`pip install <this repository's folder or git URL>`) or importable.
"""

try:
    from goose.hf_generate import hub_generate
except ImportError as error:  # transformers skips imports inside try blocks when it checks a file's requirements
    raise ImportError(
        "custom_generate='<goose repository>' needs the `goose` package: install the repository it comes from "
        "(`pip install <its folder or git URL>`; it ships a pyproject.toml) or put its folder on sys.path. "
        f"Details: {error}") from error


def generate(model, **kwargs):
    """Goose's loop behind the usual `generate` arguments; see goose/hf_generate.py for what carries over."""
    return hub_generate(model, **kwargs)
