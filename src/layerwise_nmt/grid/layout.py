"""Where things are: the results/ paths the package and the workflow's input functions share (rule outputs spell
the same templates as Snakemake patterns)."""

from __future__ import annotations

import os


RESULTS = "results"
DOWNLOADS = f"{RESULTS}/downloads"  # what neither the user's files nor the data mirror hold, fetched here
SUMMARY = f"{RESULTS}/summary.md"
GPU_LOCKS = f"{RESULTS}/.gpu-locks"


def download_file(key: str, name: str) -> str:
    return f"{DOWNLOADS}/{key}/{name}"


def is_download(path: str) -> bool:
    return path.startswith(f"{DOWNLOADS}/")


def is_raw(path: str) -> bool:
    return path.startswith(f"{RESULTS}/raw/")


def table_files(paper: str, table: str) -> list[str]:
    return [f"{RESULTS}/tables/{paper}/{table}.{ext}" for ext in ("md", "csv", "tex", "html")]


def figure_files(paper: str, figure: str) -> list[str]:
    return [f"{RESULTS}/figures/{paper}/{figure}.{ext}" for ext in ("png", "pdf", "csv")]


def raw_path(dataset: str, name: str) -> str:
    return f"{RESULTS}/raw/{dataset}/{name}"


def data_path(task: str, *parts: str) -> str:
    """results/<task>/data[/<parts>]: norm/ tok/ text/ ref/ bpe/ bin-joint/ bin-separate/."""
    return "/".join([f"{RESULTS}/{task}/data", *parts])


def bin_dir(task: str, vocab: str) -> str:
    return data_path(task, f"bin-{vocab}")


def run_dir(task: str, experiment: str, seed: int | str) -> str:
    return f"{RESULTS}/{task}/{experiment}/seed{seed}"


def model_file(run: str | os.PathLike) -> str:
    """A run's final model (the train rule's output): what a warm start continues from and figures inspect."""
    return f"{run}/model.pt"


def decoded_model(run: str | os.PathLike, averaged: bool) -> str:
    """The model a run's translations come from: its checkpoint average (the experiment's `average:`), else the
    final model."""
    return f"{run}/averaged.pt" if averaged else model_file(run)


def save_dir(run: str | os.PathLike) -> str:
    """What `lwnmt train --save-dir` owns in a run: checkpoints, metrics.csv, training.json, tensorboard/ (the final
    model is the train rule's output, beside it)."""
    return f"{run}/checkpoints"


def training_summary(run: str | os.PathLike) -> str:
    """training.json, which the train job writes last: its precision, updates, tokens seen and how it stopped."""
    return f"{save_dir(run)}/training.json"


def score_file(run: str | os.PathLike, split: str) -> str:
    """A run's scores of one split (the score rule's output): what tables, figures and the evidence read."""
    return f"{run}/{split}.score.json"


def tuned_lenpen_file(run: str | os.PathLike) -> str:
    """The length penalty pick-lenpen chose on the validation set, which every later decoding of the run uses."""
    return f"{run}/tuned_lenpen.json"


def heldout_prefix(run: str | os.PathLike, name: str) -> str:
    """Where a run's translation of held-out set `name` goes: PREFIX.txt (tokenized, as test.txt), .detok, .bpe,
    .json."""
    return f"{run}/heldout.{name}"


def experiment_dir(config: dict, name: str, seed: int) -> str:
    return run_dir(config["experiments"][name]["task"], name, seed)
