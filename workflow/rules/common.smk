# Helpers shared by the rules: everything the rules ask of the config goes through layerwise_nmt.config.

import json
from pathlib import Path
import os
import sys

# Rules call the package as `python -m layerwise_nmt`, found through PYTHONPATH, so the same command works in the
# project's .venv, in the conda envs of envs/ and on SLURM nodes (where Snakemake re-reads this file).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(workflow.basedir) / "src"), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
LWNMT = "python -m layerwise_nmt"

from layerwise_nmt import UserError
from layerwise_nmt import config as cfg

from snakemake.utils import validate

try:
    # One-line errors naming the key, plus the cross-references a schema cannot check (task → dataset, ...).
    cfg.validate(config)
    TARGET_TASKS = cfg.runnable_tasks(config)
except UserError as err:
    raise WorkflowError(str(err))
validate(config, cfg.SCHEMA)  # Snakemake's own pass fills in the schema defaults

if workflow.is_main_process:
    blocked = [s for s in cfg.all_statuses(config) if not s.runnable and s.state == "blocked"]
    if blocked:
        logger.info(f"{len(blocked)} tasks/experiments/table rows cannot run yet (e.g. {blocked[0].name}: "
                    f"{blocked[0].reason}); `lwnmt status` lists them all.")

wildcard_constraints:
    experiment=r"(?!data$)[^/]+",
    seed=r"\d+",
    task=r"[^/]+",
    lang=r"[a-z]{2,3}",
    pair=r"[a-z]{2,3}-[a-z]{2,3}",
    split=r"train|valid|test",
    vocab=r"joint|separate",


def task_of(wildcards):
    return config["tasks"][wildcards.task]


def experiment_of(wildcards):
    """The resolved experiment behind results/{task}/{experiment}/seed{seed}/…, checked against the path."""
    if wildcards.experiment not in config.get("experiments", {}):
        raise WorkflowError(f"no experiment named {wildcards.experiment!r} in the config")
    spec = cfg.experiment(config, wildcards.experiment)
    if spec["task"] != wildcards.task:
        raise WorkflowError(f"experiment {wildcards.experiment} runs on task {spec['task']}, not {wildcards.task}")
    return spec


def run_dir(wildcards):
    return f"results/{wildcards.task}/{wildcards.experiment}/seed{wildcards.seed}"


def table_targets():
    """Every targeted table; each depends on the score.json of its runnable rows (see report.smk)."""
    return [f"results/tables/{paper}/{table}.{ext}" for paper, table in cfg.tables(config) for ext in ("md", "csv")]


def raw_path(dataset, name):
    return f"results/raw/{dataset}/{name}"


def task_data_targets(task_name):
    """Everything `rule all` needs for one task: binarized splits, dictionaries, data statistics."""
    task = config["tasks"][task_name]
    pair, kind = cfg.pair(task), task.get("vocab", {}).get("kind", "joint")
    base = f"results/{task_name}/data"
    reference = [f"{base}/reference-check.json"] if task.get("reference") else []
    vocabs = [f"{base}/vocab/dict.{name}.txt" for name in ("joint", task["src"], task["tgt"])]
    return reference + vocabs + [f"{base}/text/stats.{pair}.json"] + [
        f"{base}/bin-{kind}/{split}.{pair}.{lang}.{ext}.npy"
        for split in cfg.SPLITS
        for lang in (task["src"], task["tgt"])
        for ext in ("tokens", "offsets")
    ]


def checksum_flag(checksum, prefix=""):
    return f"--{prefix}{checksum[0].replace('_', '-')} {checksum[1]}" if checksum else ""
