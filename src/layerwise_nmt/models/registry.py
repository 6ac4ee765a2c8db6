"""Models by config name (the table: MODELS; a model of the config's own `models:` section: user.py): `build`
makes one and initialises it as its config says.

Torch-free until a model is built: a model's module is imported by the first `build` or `model_class` that names it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import UserError
from .config import ContextGateConfig, CoordinationConfig, CrossViewConfig, DeepConfig, FusionConfig, ModelConfig
from .user import UserModel

if TYPE_CHECKING:  # torch-free at run time: a model's module is imported when it is built
    from .transformer import Model


@dataclass(frozen=True)
class ModelSpec:
    """One model: the settings it is built from, and its class as "module:Class", the module's full name spelt out
    so that a reader (and the layout test) sees which module each name imports."""

    config_class: type[ModelConfig]
    implementation: str

    def model_class(self) -> type[Model]:
        module, name = self.implementation.split(":")
        return getattr(importlib.import_module(module), name)


MODELS: dict[str, ModelSpec] = {
    "transformer": ModelSpec(ModelConfig, "layerwise_nmt.models.transformer:Seq2Seq"),
    "lwc": ModelSpec(CoordinationConfig, "layerwise_nmt.models.coordination:LayerWiseCoordination"),
    "context_gate": ModelSpec(ContextGateConfig, "layerwise_nmt.models.context_gate:ContextGateTransformer"),
    "cross_view": ModelSpec(CrossViewConfig, "layerwise_nmt.models.cross_view:CrossViewTransformer"),
    "deep": ModelSpec(DeepConfig, "layerwise_nmt.models.deep_repr:DeepTransformer"),
    "mlrf": ModelSpec(FusionConfig, "layerwise_nmt.models.fusion:FusionTransformer"),
}


def model_class(name: str, user: UserModel | None = None) -> type[Model]:
    if user is not None:
        return user.load()
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS)) or 'none yet'}")
    return MODELS[name].model_class()


def config_class(name: str, user: UserModel | None = None) -> type[ModelConfig]:
    """The settings class of model `name` (a user model's `config_class`: imports its module)."""
    if user is None:
        return MODELS[name].config_class
    cls: Any = model_class(name, user)  # a user's class: its config_class is part of the contract (contract_gap)
    return cls.config_class


def settings_of(name: str, settings: dict, user: UserModel | None = None, where: str | None = None):
    """`settings` through the model's settings class; a user model's errors say where the settings come from
    (`where`, e.g. the config key; else the model): its class is not ours."""
    cls = config_class(name, user)
    try:
        return cls.from_dict(settings)
    except UserError as err:
        if user is None:
            raise
        place = f"{where}: {err} (model {name}, {user.target})" if where else f"{user.where}: {err}"
        raise UserError(place) from None


def build(name: str, settings: dict, user: UserModel | None = None):
    """The model `name` (`user`: a model from outside the package) with its config built from `settings` (unknown
    keys are an error naming them), its weights drawn by its config's `init` scheme (`Model.initialise`)."""
    cls = model_class(name, user)
    model = cls(settings_of(name, settings, user))
    model.initialise()
    return model


def count_built(name: str, settings: dict, user: UserModel | None = None, where: str | None = None) -> int:
    """The parameter count of the model as built, on the meta device: counted, never allocated (for a model with
    no closed form in sizes.py)."""
    import torch

    from .transformer import count_parameters

    cls = model_class(name, user)
    config = settings_of(name, settings, user, where)
    with torch.device("meta"):
        return count_parameters(cls(config))
