"""The typed settings of each stage (model, training, decoding, scoring) share one way in from the config.

Every field is checked against its annotation (int, float, bool, str, None, tuples) and, where declared with
`setting(default, ge=…, gt=…, lt=…)`, its range, before the dataclass is built: a wrong value stops `snakemake -n`
and `lwnmt status` (grid/stage_checks.py) in one line instead of failing a job, or a budget estimate, with a
traceback."""

from __future__ import annotations

import operator
import re
import types
from dataclasses import Field, field, fields
from difflib import get_close_matches
from functools import cache
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

from . import UserError

# `amp:` in training and decoding alike (training/precision.py): auto | none (fp32) | bf16 (autocast) | bf16-weights
# (the model's parameters in bf16, fp32 master weights for the optimizer: training/master_weights.py) | fp16
AMP_CHOICES = ("auto", "none", "bf16", "bf16-weights", "fp16")
BOUNDS = {"ge": (operator.ge, "≥"), "gt": (operator.gt, ">"), "le": (operator.le, "≤"), "lt": (operator.lt, "<")}
TYPE_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    type(None): "null",
    dict: "a mapping ({...})",
    list: "a list",
}


def json_object(text: str, option: str) -> dict:
    """A command-line option's JSON object (--options, --spec, ...), or a one-line UserError naming the option."""
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{option} {text!r}: not valid JSON ({err.msg}, column {err.colno}); expected an object "
            f'such as {{"key": 1}}'
        ) from None
    if not isinstance(value, dict):
        raise UserError(f"{option} {text!r}: a JSON {type(value).__name__}; expected an object ({{...}})")
    return value


class SettingError(UserError):
    """A value of the wrong type or out of range, with the key, the value and what was expected."""

    def __init__(self, key: str, value: Any, expected: str):
        super().__init__(f"{key}={value!r}; expected {expected}")
        self.key, self.value, self.expected = key, value, expected


def setting(default: Any, **bounds: float):
    """A dataclass field with a range (ge, gt, le, lt; for a tuple, of each element): `beam: int = setting(5, ge=1)`."""
    unknown = set(bounds) - set(BOUNDS)
    if unknown:
        raise TypeError(f"unknown bound(s) {unknown}; expected {', '.join(BOUNDS)}")
    kind = dict(default_factory=lambda: default) if isinstance(default, (list, dict)) else dict(default=default)
    return field(metadata={"bounds": bounds}, **kind)


def type_matches(value: Any, hint: Any) -> bool:
    """isinstance against an annotation; bool is not a number, an int is a float, a list is a tuple (YAML, JSON)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(type_matches(value, h) for h in get_args(hint))
    if origin is tuple:
        items = get_args(hint)
        if not isinstance(value, (list, tuple)):
            return False
        if len(items) == 2 and items[1] is Ellipsis:
            return all(type_matches(v, items[0]) for v in value)
        return len(value) == len(items) and all(type_matches(v, h) for v, h in zip(value, items, strict=True))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def describe(hint: Any, bounds: dict) -> str:
    """What a field expects, in words: "an integer ≥ 1", "a number ≥ 0 and < 1 or null", "a list of numbers"."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(h, bounds if h is not type(None) else {}) for h in get_args(hint))
    if origin is tuple:
        items = get_args(hint)
        count = "" if len(items) == 2 and items[1] is Ellipsis else f"{len(items)} "
        each = describe(items[0], bounds).removeprefix("an ").removeprefix("a ")
        return f"a list of {count}{each.replace('integer', 'integers').replace('number', 'numbers', 1)}"
    name = TYPE_NAMES.get(hint, getattr(hint, "__name__", str(hint)))
    return " ".join([name, " and ".join(f"{BOUNDS[b][1]} {v:g}" for b, v in bounds.items())]) if bounds else name


# What YAML 1.1 (PyYAML, Snakemake) reads as a number in scientific notation: a dot in the mantissa and a signed
# exponent. 5e-4, 1e3 and 1.0e3 are read as text, where a researcher (and YAML 1.2, and JSON) sees a number.
YAML_TEXT_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?[eE]([-+]?)(\d+)")


def read_as_text(value: Any, hint: Any) -> str:
    """Why a number may have arrived as a string, and how to write it so that YAML reads a number."""
    found = YAML_TEXT_NUMBER.fullmatch(value) if isinstance(value, str) else None
    if found is None or not type_matches(float(value), hint):
        return ""
    mantissa, exponent = value.lower().split("e")
    written = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent if found[2] else '+' + exponent}"
    return f" (YAML reads {value} as text: write {written} or {float(value)!r})"


def in_range(value: Any, bounds: dict) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    return all(v is None or BOUNDS[b][0](v, limit) for v in values for b, limit in bounds.items())


class Settings:
    """Mixin for the stage dataclasses: `from_dict` rejects unknown keys by name, checks every value's type and
    range, then `check()` validates what a single field cannot (choices, combinations)."""

    key_noun = "setting"  # what the error calls a key: "model setting", "training setting", ...
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # every subclass is a @dataclass (annotation only)

    @classmethod
    def from_dict(cls, values: dict):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            close = get_close_matches(unknown[0], known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(sorted(known))}"
            raise UserError(f"unknown {cls.key_noun}(s) {', '.join(unknown)}; {hint}")
        cls.check_types(values)
        settings = cls(**cls.prepare(dict(values)))
        settings.check()
        return settings

    @classmethod
    def check_types(cls, values: dict) -> None:
        """Raise SettingError for the first value whose type or range does not match its field."""
        hints = cls.field_hints()
        for f in fields(cls):
            if f.name in values:
                value, bounds = values[f.name], f.metadata.get("bounds", {})
                hint = hints[f.name]
                if not type_matches(value, hint) or not in_range(value, bounds):
                    raise SettingError(f.name, value, describe(hint, bounds) + read_as_text(value, hint))

    @classmethod
    @cache
    def field_hints(cls) -> dict:
        return get_type_hints(cls)

    @classmethod
    def prepare(cls, values: dict) -> dict:
        """Fill in derived values before construction (e.g. a preset's sizes)."""
        return values

    def check(self) -> None:
        """Raise UserError naming the key whose value is wrong."""
