"""The training commands: train (with fairseq-train's flags over --spec) and average."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .. import CONFIG_ERROR
from ..job_specs import TrainSpec
from ..settings import json_object
from ..training.config import AVERAGE_DEFAULTS, AverageConfig
from .common import command, copy_to_console, integer

# fairseq-train flags `lwnmt train` takes as overrides of --spec: flag → (spec section, key, type)
TRAIN_FLAGS = {
    "--arch": ("arch", "preset", str),
    "--dropout": ("arch", "dropout", float),
    "--max-tokens": ("train", "max_tokens", int),
    "--batch-size": ("train", "max_sentences", int),
    "--update-freq": ("train", "update_freq", int),
    "--lr": ("train", "lr", float),
    "--lr-scheduler": ("train", "lr_scheduler", str),
    "--warmup-updates": ("train", "warmup_updates", int),
    "--max-update": ("train", "max_update", int),
    "--max-epoch": ("train", "max_epoch", int),
    "--clip-norm": ("train", "clip_norm", float),
    "--label-smoothing": ("train", "label_smoothing", float),
    "--patience": ("train", "patience", int),
    "--seed": ("train", "seed", int),
}


def add_commands(sub) -> None:
    p = command(sub, "train", "train (resumes from SAVE_DIR/checkpoint_last.pt if present)", cmd_train)
    p.add_argument(
        "--spec",
        default="{}",
        help='JSON {"model": name, "arch": {...}, "train": {...}}, a train job spec (default: '
        "the transformer with default settings); a budget is needed, as fairseq-train runs until one: "
        "--max-update or --max-epoch (config.yaml's grid: --max-epoch 100 --patience 10), or the "
        "spec's max_minutes",
    )
    add_fairseq_train_flags(p)
    p.add_argument("--data", required=True, help="binarized data directory (bin-joint or bin-separate)")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument(
        "--save-dir",
        required=True,
        help="everything the run writes: checkpoints, metrics.csv, training.json, tensorboard/",
    )
    p.add_argument("--final", help="where to write the final model (the rule's output)")
    p.add_argument(
        "--threads",
        type=integer(0),
        default=0,
        help="torch intra-op threads (0 = PyTorch's default)",
    )
    p.add_argument(
        "--gpus",
        type=integer(0),
        default=0,
        help="GPUs for this job: claimed on a shared machine (CUDA_VISIBLE_DEVICES); >1 runs torchrun",
    )
    p.add_argument("--ranks", type=integer(0), default=0, help="data-parallel ranks (default: --gpus); on CPU: gloo")
    p.add_argument("--gpu-locks", help="lock files of the GPU allocator (default: results/.gpu-locks)")
    p.set_defaults(error_status=CONFIG_ERROR)

    p = command(sub, "average", "average the last N checkpoints (fairseq average_checkpoints.py)", cmd_average)
    p.add_argument("save_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--num", "-n", type=int, default=AVERAGE_DEFAULTS.num)
    p.add_argument("--by", choices=AverageConfig.BY, default=AVERAGE_DEFAULTS.by)


def add_fairseq_train_flags(parser: argparse.ArgumentParser) -> None:
    for flag, (section, key, kind) in TRAIN_FLAGS.items():
        parser.add_argument(flag, type=kind, help=f"as fairseq-train's; overrides the spec's {section}.{key}")


def train_spec(a) -> TrainSpec:
    """--spec with the fairseq-style flags given on the command line laid over it (--arch: a fairseq arch name or
    one of our presets)."""
    from ..models.transformer import FAIRSEQ_ARCHS

    spec = json_object(a.spec, "--spec")
    for flag, (section, key, _) in TRAIN_FLAGS.items():
        value = getattr(a, flag[2:].replace("-", "_"))
        if value is not None:
            spec.setdefault(section, {})[key] = FAIRSEQ_ARCHS.get(value, value) if flag == "--arch" else value
    return TrainSpec.of(spec, "--spec")


# beside the checkpoints: the workflow run whose attempt met a config error, and its line
CONFIG_ERROR_FILE = "config_error.txt"


def cmd_train(a) -> None:
    from .. import UserError

    _not_again(Path(a.save_dir))
    try:
        _train(a)
    except UserError as err:
        _remember(Path(a.save_dir), str(err))
        raise


def _not_again(save_dir: Path) -> None:
    """Under the workflow, the retry of an attempt that met a config error exits at once: Snakemake retries every
    failed training (`retries:`, for preemption), and a config error is met again by each retry. A later run of the
    workflow (another WORKFLOW_RUN) trains again."""
    from ..snakemake_glue.job_env import WORKFLOW_RUN

    marker = save_dir / CONFIG_ERROR_FILE
    try:
        run, line = marker.read_text().split("\n", 1)
    except (OSError, ValueError):
        return
    if run and run == os.environ.get(WORKFLOW_RUN):
        print(f"lwnmt train: error: {line.strip()} (not retried: the attempt before met it)", file=sys.stderr)
        copy_to_console("lwnmt train: not retried: the config error above")
        sys.exit(CONFIG_ERROR)
    marker.unlink(missing_ok=True)


def _remember(save_dir: Path, line: str) -> None:
    from ..snakemake_glue.job_env import WORKFLOW_RUN

    run = os.environ.get(WORKFLOW_RUN)
    if not run:
        return
    try:
        save_dir.mkdir(parents=True, exist_ok=True)
        (save_dir / CONFIG_ERROR_FILE).write_text(f"{run}\n{line}\n")
    except OSError:  # unwritable: the retry runs and meets the error again
        pass


def _train(a) -> None:
    from ..grid.layout import GPU_LOCKS
    from ..training.gpu_lock import claim, run_ranks, under_torchrun
    from ..training.threads import set_threads

    ranks = a.ranks or a.gpus
    if not under_torchrun():
        locks = claim(a.gpus, a.gpu_locks or GPU_LOCKS)  # noqa: F841  (held until this process ends)
        if ranks > 1:  # data-parallel: this process becomes torchrun's parent and waits for the ranks
            sys.exit(run_ranks(ranks, sys.argv[1:]))
    set_threads(a.threads)  # before torch is imported: how OpenMP's threads wait is read once, when it loads
    from ..training.loop import Stopped, train
    from ..inference.decode import validation_search

    try:
        train(train_spec(a), a.data, a.src, a.tgt, a.save_dir, a.final, validation_search)
    except Stopped as stopped:
        _stopped(stopped)
        raise


def _stopped(stopped) -> None:
    """Under the workflow, the stop's one line (logged to the job's log) goes to Snakemake's console too, once per
    job; a Ctrl-C also stops the Snakemake that runs the job, so that it starts no retry of what the user stopped
    (it stops by itself when it got the Ctrl-C too; not when it runs where SIGINT is ignored)."""
    from ..training.distributed import world
    from ..snakemake_glue.job_env import stop_the_workflow

    # a second stop request (the terminal's Ctrl-C and Snakemake's forwarded one) must not cut the exit short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if world()[0] != 0:
        return
    copy_to_console(f"lwnmt train: {stopped.line}")
    if stopped.interrupted:
        stop_the_workflow()


def cmd_average(a) -> None:
    from ..training.average import average
    from ..training.checkpoint import last_checkpoints

    average(last_checkpoints(a.save_dir, a.num, a.by), a.out)
