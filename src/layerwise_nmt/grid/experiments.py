"""An experiment resolved against the config's defaults and its task; what translating with its model needs."""

from __future__ import annotations

from .. import UserError
from .layout import bin_dir, data_path, experiment_dir
from .tasks import pair, tokenize_options

STAGES = ("arch", "train", "decode", "score")


def experiment(config: dict, name: str) -> dict:
    """An experiment with the config's `defaults` filled in (the experiment's keys win, key by key)."""
    spec = config["experiments"][name]
    defaults = config.get("defaults", {})
    task = config["tasks"][spec["task"]]
    out = {"name": name, "task": spec["task"], "model": spec["model"], "warm_start": spec.get("warm_start"),
           "vocab": spec.get("vocab", task.get("vocab", {}).get("kind", "joint")),
           "average": spec.get("average", defaults.get("average")),
           "seeds": spec.get("seeds", defaults.get("seeds", [1])),
           "src": task["src"], "tgt": task["tgt"], "pair": pair(task)}
    for stage in STAGES:
        out[stage] = {**defaults.get(stage, {}), **spec.get(stage, {})}
    return out


def trained_model(config: dict, name: str, seed: int | None = None) -> dict:
    """What translating raw text with an experiment's trained model needs: the model the workflow decodes (averaged
    or final), its binarized data directory, languages, the task's tokenization of the source (as for its test set),
    BPE codes (None for word-level tasks), decoding settings, and what the model must match (its name, arch)."""
    if name not in config["experiments"]:
        raise UserError(f"--experiment {name!r}: not an experiment of the config")
    e = experiment(config, name)
    seed = seed if seed is not None else e["seeds"][0]
    task = config["tasks"][e["task"]]
    run = experiment_dir(config, name, seed)
    return {"model": f"{run}/{'averaged.pt' if e['average'] else 'model.pt'}",
            "data": bin_dir(e["task"], e["vocab"]), "src": e["src"], "tgt": e["tgt"],
            "tokenize": tokenize_options(task, e["src"], task["splits"].get("test", {})),
            "codes": data_path(e["task"], "bpe", "code") if task.get("bpe") else None, "decode": e["decode"],
            "experiment": {"name": name, "model": e["model"], "arch": e["arch"], "seed": seed}}
