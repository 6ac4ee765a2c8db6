"""The typed settings of each stage (model, training, decoding, scoring) share one way in from the config."""

from __future__ import annotations

from dataclasses import fields
from difflib import get_close_matches

from . import UserError


class Settings:
    """Mixin for the stage dataclasses: `from_dict` rejects unknown keys by name, then `check()` validates values."""

    kind = "setting"  # what the error calls a key: "model setting", "training setting", ...

    @classmethod
    def from_dict(cls, values: dict):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            close = get_close_matches(unknown[0], known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(sorted(known))}"
            raise UserError(f"unknown {cls.kind}(s) {', '.join(unknown)}; {hint}")
        settings = cls(**cls.prepare(dict(values)))
        settings.check()
        return settings

    @classmethod
    def prepare(cls, values: dict) -> dict:
        """Fill in derived values before construction (e.g. a preset's sizes)."""
        return values

    def check(self) -> None:
        """Raise UserError naming the key whose value is wrong."""
