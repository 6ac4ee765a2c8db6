"""Models by config name (the table: configs.MODELS): `build` makes one and initialises it as its config says.

Torch-free until a model is built: a model's module is imported by the first `build` or `model_class` that names it.
"""

from __future__ import annotations

from .. import UserError
from .configs import MODELS


def model_class(name: str) -> type:
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS)) or 'none yet'}")
    return MODELS[name].model_class()


def build(name: str, settings: dict):
    """The model `name` with its config built from `settings` (unknown keys are an error naming them), its weights
    drawn by its config's `init` scheme (`Model.initialise`)."""
    cls = model_class(name)
    model = cls(MODELS[name].config_class.from_dict(settings))
    model.initialise()
    return model
