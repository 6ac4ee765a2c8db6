"""DAG-time checks of every experiment's stage settings against the classes that will read them, so that a typo
(`max_tokenz`) stops `snakemake -n` and `lwnmt status` in one line instead of a job hours into the run.

The settings classes are the one source of truth: each stage's dict goes through the same `from_dict` (unknown keys
with a did-you-mean, then the value checks) the job itself will call. A model of the config's own (`models:`) is
checked the way `lwnmt params` checks it, in a process of its own (`check_own_models`): the workflow's DAG imports
neither torch nor the user's module."""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import CONFIG_ERROR, UserError
from ..data.io import atomic_path
from ..settings import SettingError, Settings
from .experiments import experiment


def check_model_name(config: dict, name: str, model: str, known: dict) -> None:
    """An unknown `model:` is a config error, with the registered names closest to it (the built-in ones and the
    config's own `models:`): otherwise `snakemake -n` silently drops the experiment's jobs (and those warm-started
    from it)."""
    known = {**known, **(config.get("models") or {})}
    if model in known:
        return
    own = "model" in config["experiments"][name]  # else inherited through `extends`
    close = difflib.get_close_matches(model, list(known), n=3)
    hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"known models: {', '.join(sorted(known))}"
    raise UserError(
        f"config key experiments/{name}/model: unknown model {model!r}{'' if own else ' (through extends)'}; {hint}"
    )


def check_experiments(config: dict, cache: Path | None = None) -> None:
    """Every experiment's stages through the settings classes that will read them. With `cache` (a file), a config
    that passed once with the same package source is not checked again."""
    key = _passed_key(config)
    if cache is not None and key in _read_passed(cache):
        return
    _check_experiments(config)
    if cache is not None:
        _write_passed(cache, key)


def own_model_experiments(config: dict) -> list[str]:
    """The experiments whose model is one of the config's own (`models:`)."""
    own = config.get("models") or {}
    return [name for name in config.get("experiments", {}) if experiment(config, name)["model"] in own]


def check_own_models(config: dict, cache: Path | None = None, python: str = sys.executable) -> str | None:
    """Each experiment of an own model imported, checked against the contract and built (on the meta device, as
    `lwnmt params` counts it) by `python` in a process of its own; the first failure is a UserError holding the line
    `lwnmt params` prints for it. None when it passed (or passed before: `cache`), else why it was not checked: an
    environment without torch (a Snakemake-only one) leaves the check to the training job."""
    names = own_model_experiments(config)
    if not names:
        return None
    if python == sys.executable and importlib.util.find_spec("torch") is None:
        return "not checked here (no torch in this environment); the training job imports it"
    files = _code_files(config)
    if files is None:  # an installed module's files are found only by importing it: checked every time
        cache = None
    key = _passed_key(config, files or [])
    if cache is not None and key in _read_passed(cache):
        return None
    sources = str(Path(__file__).parents[2])  # the folder holding this package, however the caller found it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [sources, os.environ.get("PYTHONPATH")])))
    payload = json.dumps({"config": config, "experiments": names}, default=str)
    done = subprocess.run(
        [python, "-m", "layerwise_nmt.grid.parameter_table"], input=payload, env=env, text=True, capture_output=True
    )
    if done.returncode == CONFIG_ERROR:  # its last line is the error
        raise UserError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:  # the user's code raised something else while it was built: its last line, and where
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise UserError(
            f"config key models: building experiment(s) {', '.join(names)} failed: {last} (`lwnmt "
            f"params -v {' '.join(names)}` prints its traceback)"
        )
    if cache is not None:
        _write_passed(cache, key)
    return None


def _code_files(config: dict) -> list[Path] | None:
    """The Python files of the own models' folders (`user_dir`), whose edits make the check run again; None when a
    model has no folder."""
    files = []
    for entry in (config.get("models") or {}).values():
        if not entry.get("user_dir"):
            return None
        files += sorted(Path(entry["user_dir"]).expanduser().rglob("*.py"))
    return files


def _passed_key(config: dict, extra: Sequence[Path] = ()) -> str:
    seen = {k: config.get(k) for k in ("experiments", "defaults", "tasks", "models")}
    digest = hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode())
    for path in extra:
        digest.update(str(path).encode())
        digest.update(path.read_bytes() if path.is_file() else b"")
    for path in sorted(Path(__file__).parents[1].rglob("*.py")):  # the settings classes and what they check
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def _read_passed(cache: Path) -> list[str]:
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        return []


def _write_passed(cache: Path, key: str) -> None:
    try:
        with atomic_path(cache) as tmp:
            tmp.write_text(json.dumps(([key] + [k for k in _read_passed(cache) if k != key])[:20]))
    except OSError:  # a read-only checkout: checked again next time
        pass


def _check_experiments(config: dict) -> None:
    from ..inference.config import BeamConfig
    from ..models import MODELS
    from ..scoring.config import ScoreConfig
    from ..training.config import AverageConfig, TrainConfig

    for name in config.get("experiments", {}):
        e = experiment(config, name)
        stages: list[tuple[str, type[Settings], dict]] = [
            ("train", TrainConfig, e["train"]),
            ("decode", BeamConfig, e["decode"]),
            ("score", ScoreConfig, e["score"]),
        ]
        check_model_name(config, name, e["model"], MODELS)
        vocab = {"src_vocab": 64, "tgt_vocab": 64}  # the real sizes come from the data; any equal pair will do
        if e["model"] in MODELS:  # a model of the config's own: its settings class is in its module, read where
            stages.insert(0, ("arch", MODELS[e["model"]].config_class, {**e["arch"], **vocab}))  # it is built
        for stage, settings, values in stages:
            try:
                settings.from_dict(values)
            except SettingError as err:
                own = err.key in config["experiments"][name].get(stage, {})
                where = f"experiments/{name}/{stage}" if own else f"defaults/{stage} (experiment {name})"
                raise UserError(f"config key {where}/{err.key}: {err.value!r}; expected {err.expected}") from None
            except (UserError, TypeError, ValueError) as err:
                raise UserError(f"config key experiments/{name}/{stage} (or defaults/{stage}): {err}") from None
        if e["average"]:
            try:
                AverageConfig.from_dict(e["average"])
            except UserError as err:
                raise UserError(f"config key experiments/{name}/average: {err}") from None
