"""The config's own models (`models:`, a name → the module and class that implement it, docs/usage.md "Your own
method") as the grid reads them: names and paths only. Nothing here imports the user's module or torch: the jobs
that build a model do (models/user.py), so that `snakemake -n` and `--lint` run with Snakemake alone."""

from __future__ import annotations

import os
from pathlib import Path

from .. import UserError
from ..models.registry import MODELS


def check_models(config: dict) -> None:
    """Each `models:` entry: a name of its own (not a built-in model's), and its user_dir a folder that exists."""
    for name, entry in (config.get("models") or {}).items():
        if name in MODELS:
            raise UserError(
                f"config key models/{name}: shadows the built-in model {name!r}; give yours another name "
                f"(built-in: {', '.join(sorted(MODELS))})"
            )
        folder = entry.get("user_dir")
        if folder is not None and not Path(folder).expanduser().is_dir():
            raise UserError(
                f"config key models/{name}/user_dir: {folder}: no such folder (relative paths are read "
                f"from the working directory, {os.getcwd()})"
            )


def known_models(config: dict) -> list[str]:
    return sorted(MODELS) + sorted(config.get("models") or {})


def user_model(config: dict, model: str) -> dict | None:
    """What a job needs to import model `model` when it is one of the config's own: {class, user_dir}; None for a
    built-in one. The folder stays as the config gives it: jobs run in the workflow's working directory."""
    entry = (config.get("models") or {}).get(model)
    if entry is None:
        return None
    return {"class": entry["class"], **({"user_dir": entry["user_dir"]} if entry.get("user_dir") else {})}


def user_code_of(entry: dict | None) -> dict:
    """The code that loading a model file of a user model (`user_model`'s {class, user_dir}; None: a built-in one)
    imports: its folder (--user-dir), else its class's module as installed (--user-module)."""
    if entry is None:
        return {}
    return {"user_dir": entry["user_dir"]} if "user_dir" in entry else {"user_module": entry["class"].split(":")[0]}
