"""An experiment resolved against the config's defaults and its task; what translating with its model needs."""

from __future__ import annotations

from .. import UserError
from ..job_specs import ExportSpec
from .layout import bin_dir, data_path, decoded_model, experiment_dir, training_summary, tuned_lenpen_file
from .own_models import user_model
from .tasks import pair, tokenize_options, vocab_kind

STAGES = ("arch", "train", "decode", "score")
SEEDS = (1,)  # an experiment's seeds when neither it nor the config's `defaults:` names any


def default_seeds(config: dict) -> list[int]:
    """The seeds of an experiment that names none: the config's `defaults: seeds`, else SEEDS."""
    return list(config.get("defaults", {}).get("seeds", SEEDS))


def experiment(config: dict, name: str) -> dict:
    """An experiment with the config's `defaults` filled in (the experiment's keys win, key by key)."""
    spec = config["experiments"][name]
    defaults = config.get("defaults", {})
    task = config["tasks"][spec["task"]]
    out = {
        "name": name,
        "task": spec["task"],
        "model": spec["model"],
        "warm_start": spec.get("warm_start"),
        "vocab": spec.get("vocab", vocab_kind(task)),
        "average": spec.get("average", defaults.get("average")),
        "seeds": list(spec.get("seeds", default_seeds(config))),
        "src": task["src"],
        "tgt": task["tgt"],
        "pair": pair(task),
    }
    for stage in STAGES:
        out[stage] = {**defaults.get(stage, {}), **spec.get(stage, {})}
    return out


def require_experiment(config: dict, name: str) -> None:
    """A name that is not an experiment of the config: one line, with the closest names."""
    if name not in config["experiments"]:
        from .names import did_you_mean

        hint = did_you_mean(name, config["experiments"], "experiments")
        raise UserError(f"--experiment {name!r}: not an experiment of the config{hint}")


def trained_model(config: dict, name: str, seed: int | None = None) -> dict:
    """What translating raw text with an experiment's trained model needs: the model the workflow decodes (averaged
    or final), its binarized data directory, languages, the task's tokenization of the source (as for its test set),
    BPE codes (None for word-level tasks), decoding settings, and what the model must match (its name, arch; the
    class of a model of the config's own, which loading it may import)."""
    require_experiment(config, name)
    e = experiment(config, name)
    seed = seed if seed is not None else e["seeds"][0]
    task = config["tasks"][e["task"]]
    run = experiment_dir(config, name, seed)
    return {
        "model": decoded_model(run, bool(e["average"])),
        "data": bin_dir(e["task"], e["vocab"]),
        "src": e["src"],
        "tgt": e["tgt"],
        "tokenize": tokenize_options(task, e["src"], task["splits"].get("test", {})),
        "codes": data_path(e["task"], "bpe", "code") if task.get("bpe") else None,
        "decode": e["decode"],
        "experiment": {
            "name": name,
            "model": e["model"],
            "arch": e["arch"],
            "seed": seed,
            **({"user_model": user} if (user := user_model(config, e["model"])) else {}),
        },
    }


def export_spec(config: dict, name: str, seed: int | None = None) -> ExportSpec:
    """What exporting experiment `name`'s trained run needs (`lwnmt export`; the workflow's export rule passes it as
    --spec): languages, dictionaries, BPE codes, the source tokenization, decoding settings, where the tuned length
    penalty and the training summary will be, and the experiment's resolved settings."""
    setup = trained_model(config, name, seed)
    e, seed = experiment(config, name), setup["experiment"]["seed"]
    vocab = data_path(e["task"], "vocab")
    dicts = [f"{vocab}/dict.{'joint' if e['vocab'] == 'joint' else lang}.txt" for lang in (e["src"], e["tgt"])]
    run = experiment_dir(config, name, seed)
    decode = {k: v for k, v in e["decode"].items() if k != "tune_lenpen"}  # a tuned α replaces lenpen
    return ExportSpec(
        model=setup["model"],
        src=e["src"],
        tgt=e["tgt"],
        src_dict=dicts[0],
        tgt_dict=dicts[1],
        codes=setup["codes"],
        tokenize=setup["tokenize"],
        decode=decode,
        tuned_lenpen=tuned_lenpen_file(run) if e["decode"].get("tune_lenpen") else None,
        training=training_summary(run),
        about={"experiment": name, "seed": seed, "task": e["task"], "settings": e},
        user_model=setup["experiment"].get("user_model"),
    )
