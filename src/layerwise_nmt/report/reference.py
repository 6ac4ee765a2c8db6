"""The configuration reference generated from the code (`lwnmt docs`; docs/reference/config.md): every key from the
schema and the settings classes (type, default, range, meaning), so that it cannot drift from what the program
accepts. The command-line reference is the CLI's own (cli/reference.py)."""

from __future__ import annotations

import inspect
import re
from dataclasses import MISSING, fields
from importlib.resources import files

import yaml

from ..settings import Settings, describe


def cell(text: object) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


COMMENT = re.compile(r"^\s+(?P<name>\w+):[^#\n]*#\s*(?P<comment>.*)$", re.M)


def field_comments(cls: type) -> dict[str, str]:
    """The comment beside each field in the class's source (its meaning, where the class says it)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        comments.update({m["name"]: m["comment"] for m in COMMENT.finditer(source)})
    return comments


def settings_table(cls: type[Settings]) -> list[str]:
    """A settings class's fields: key, type and range, default, meaning."""
    hints = cls.field_hints()
    comments = field_comments(cls)
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for f in fields(cls):
        if f.name in ("src_vocab", "tgt_vocab"):  # the data's sizes, set by the training job
            continue
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        kind = describe(hints[f.name], f.metadata.get("bounds", {}))
        lines.append(f"| `{f.name}` | {cell(kind)} | `{default!r}` | {cell(comments.get(f.name, ''))} |")
    return lines


def config_block(config: dict) -> str:
    """The config's top-level keys and an experiment's keys (from the schema), then each stage's settings (from the
    classes the jobs read): per model for `arch:`, then `train:`, `decode:`, `score:` and `average:`."""
    from ..inference.config import BeamConfig
    from ..models import MODELS
    from ..scoring.config import ScoreConfig
    from ..training.config import AverageConfig, TrainConfig

    schema = yaml.safe_load((files("layerwise_nmt.grid") / "config.schema.yaml").read_text(encoding="utf-8"))
    lines = ["### Top-level keys", "", "| key | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {cell(v.get('description', ''))} |" for k, v in schema["properties"].items()]
    lines += ["", "### An experiment's keys (`experiments: <name>:`)", "", "| key | meaning |", "|---|---|"]
    experiment = schema["$defs"]["experiment"]["properties"]
    lines += [f"| `{k}` | {cell(v.get('description', ''))} |" for k, v in experiment.items()]
    seen: set[type] = set()
    for spec in MODELS.values():
        if spec.config_class in seen:
            continue
        seen.add(spec.config_class)
        users = [m for m, s in MODELS.items() if s.config_class is spec.config_class]
        lines += ["", f"### `arch:` for model {', '.join(f'`{m}`' for m in users)}", ""]
        lines += settings_table(spec.config_class)
    for stage, cls in (("train", TrainConfig), ("decode", BeamConfig), ("score", ScoreConfig)):
        lines += ["", f"### `{stage}:`", "", *settings_table(cls)]
    lines += ["", "### `average:`", "", *settings_table(AverageConfig)]
    return "\n".join(lines) + "\n"
