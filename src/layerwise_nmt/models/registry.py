"""Config model names → model classes. Each model module registers its class with `@register("name")`;
`models/__init__.py` imports every model module explicitly (no directory scanning)."""

from __future__ import annotations

from torch import nn

from .. import UserError

MODELS: dict[str, type] = {}


def register(name: str):
    def wrap(cls: type) -> type:
        if name in MODELS:
            raise ValueError(f"model {name!r} registered twice")
        MODELS[name] = cls
        cls.model_name = name
        return cls

    return wrap


def model_class(name: str) -> type:
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS)) or 'none yet'}")
    return MODELS[name]


def build(name: str, settings: dict):
    """The model `name` with its config built from `settings` (unknown keys are an error naming them)."""
    cls = model_class(name)
    model = cls(cls.config_class.from_dict(settings))
    if model.config.init == "fan_in":
        fan_in_init(model)
    return model


def fan_in_init(model: nn.Module) -> None:
    """Every Linear's weight and bias ~ U(±1/sqrt(fan_in)) (PyTorch's own Linear default); an output projection
    tied to a token embedding keeps the embedding's N(0, d^-0.5)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            bound = module.in_features**-0.5
            if id(module.weight) not in embeddings:
                nn.init.uniform_(module.weight, -bound, bound)
            if module.bias is not None:
                nn.init.uniform_(module.bias, -bound, bound)
