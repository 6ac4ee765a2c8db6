"""DAG-time checks of every experiment's stage settings against the classes that will read them, so that a typo
(`max_tokenz`) stops `snakemake -n` and `lwnmt status` in one line instead of a job hours into the run.

The settings classes are the one source of truth: each stage's dict goes through the same `from_dict` (unknown keys
with a did-you-mean, then the value checks) the job itself will call."""

from __future__ import annotations

from . import UserError
from . import config as cfg
from .settings import SettingError

AVERAGE_KEYS = {"num", "by"}


def check_experiments(config: dict) -> None:
    from .decode import BeamConfig
    from .models import MODELS
    from .score import ScoreConfig
    from .train import TrainConfig

    for name in config.get("experiments", {}):
        e = cfg.experiment(config, name)
        stages = [("train", TrainConfig, e["train"]), ("decode", BeamConfig, e["decode"]),
                  ("score", ScoreConfig, e["score"])]
        if e["model"] in MODELS:  # an unknown one is a row "not implemented yet" (`lwnmt status` says so)
            vocab = {"src_vocab": 64, "tgt_vocab": 64}  # the real sizes come from the data; any equal pair will do
            stages.insert(0, ("arch", MODELS[e["model"]].config_class, {**e["arch"], **vocab}))
        for stage, settings, values in stages:
            try:
                settings.from_dict(values)
            except SettingError as err:
                own = err.key in config["experiments"][name].get(stage, {})
                where = f"experiments/{name}/{stage}" if own else f"defaults/{stage} (experiment {name})"
                raise UserError(f"config key {where}/{err.key}: {err.value!r}; expected {err.expected}")
            except (UserError, TypeError, ValueError) as err:
                raise UserError(f"config key experiments/{name}/{stage} (or defaults/{stage}): {err}")
        average = e["average"] or {}
        unknown = sorted(set(average) - AVERAGE_KEYS)
        if unknown or average.get("by", "epoch") not in ("epoch", "update"):
            raise UserError(f"config key experiments/{name}/average: {average}; expected num: N and by: epoch or "
                            f"update")
