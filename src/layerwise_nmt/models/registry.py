"""Config model names → builders. Filled by `@register("name")` in each model module."""

from __future__ import annotations

from typing import Callable

from .. import UserError

MODELS: dict[str, Callable] = {}


def register(name: str):
    def wrap(builder: Callable) -> Callable:
        if name in MODELS:
            raise ValueError(f"model {name!r} registered twice")
        MODELS[name] = builder
        return builder

    return wrap


def get(name: str) -> Callable:
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS)) or 'none yet'}")
    return MODELS[name]
