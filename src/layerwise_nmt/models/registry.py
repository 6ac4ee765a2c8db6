"""Config model names → model classes. Each model module registers its class with `@register("name")`;
`models/__init__.py` imports every model module explicitly (no directory scanning)."""

from __future__ import annotations

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
    return cls(cls.config_class.from_dict(settings))
