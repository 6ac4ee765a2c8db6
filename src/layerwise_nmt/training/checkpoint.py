"""Checkpoint files: written durably, read with a fallback, pruned, and picked for averaging.

A training directory (`<run>/checkpoints/`) holds
- `checkpoint_last.pt`: everything a resume needs to continue bit for bit (model, optimizer, scaler, RNG,
  progress, the settings it was made with);
- `checkpoint_previous.pt`: the `checkpoint_last.pt` before it, read when the newest cannot be (truncated copy,
  disk error, a kill between the two renames);
- `checkpoint<E>.pt` (epoch ends) and `checkpoint_<E>_<U>.pt` (every `save_interval_updates`): weights and
  progress only, the candidates for averaging (fairseq's names);
- `checkpoint_best.pt`: the epoch early stopping judged best.

`Writer` writes them on a background thread from a CPU copy of the state (`snapshot`), so that training goes on
while a checkpoint is serialised and fsync'ed; each file still appears by an atomic rename (`save`).

Also here: what a checkpoint must agree with to be resumed (`resume_key`), when a run's checkpoints are not resumed
(`not_to_resume`: other settings, or a finished run run again) and the precision a resume goes on in, the RNG state
it carries, and the warm start that reads a trained model into a larger one.
"""

from __future__ import annotations

import argparse
import copy
import errno
import json
import logging
import os
import pickle
import re
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .. import UserError
from ..job_specs import TrainSpec
from ..data.io import atomic_path
from ..data.vocab import Dictionary
from .precision import Precision, device_name
from .progress import Progress

if TYPE_CHECKING:
    from ..models.transformer import Model

log = logging.getLogger(__name__)
LAST, PREVIOUS, BEST = "checkpoint_last.pt", "checkpoint_previous.pt", "checkpoint_best.pt"
PATTERNS = {"update": r"checkpoint_\d+_(\d+)\.pt", "epoch": r"checkpoint(\d+)\.pt"}


def save(path: Path, state: dict, previous: Path | None = None) -> None:
    """Write `state` to `path` so that a kill, a node failure or a full disk at any moment leaves the old file or
    the new one, never half of one: a temporary file, fsync'ed, then renamed (`atomic_path`; its name ends with
    our process id, so that a later run can tell a dead writer's file: `load_resumable`). With `previous`, the old
    file is renamed there first. A failed write removes its temporary file and raises a one-line UserError."""
    try:
        with atomic_path(path, suffix=f".{os.getpid()}") as tmp:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())  # the rename must not reach the disk before the data does
            if previous is not None and path.exists():
                os.replace(path, previous)
    except (OSError, RuntimeError) as err:  # ENOSPC surfaces as either, depending on where torch's writer is
        raise UserError(
            f"{path}: cannot write the checkpoint ({_first_line(err)}); the previous one is left as it was"
        ) from None
    _fsync_directory(path.parent)


def snapshot(obj, _seen: dict | None = None):
    """A copy of a state (nested dicts, lists and tuples of tensors and plain values) that training can no longer
    change: every tensor copied to the CPU (a tensor appearing twice, a tied embedding, stays one tensor), every
    other value deep-copied. What the writer thread saves while the model's parameters move on."""
    seen = {} if _seen is None else _seen
    if isinstance(obj, torch.Tensor):  # state_dict() returns a tied matrix as two tensors over one storage
        key = (obj.untyped_storage().data_ptr(), obj.device, obj.dtype, obj.storage_offset(), obj.shape, obj.stride())
        if key not in seen:
            seen[key] = obj.detach().to("cpu", copy=True)
        return seen[key]
    if isinstance(obj, dict):
        return {key: snapshot(value, seen) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(snapshot(value, seen) for value in obj)
    return copy.deepcopy(obj)


class Writer:
    """Runs checkpoint writes one at a time on a background thread. `submit` first waits for the write before
    (so that one copy of the state at most is held for writing, and files are written in the order asked), `wait`
    waits for the pending one; either raises, on the training thread, the error a write ended with (a full disk:
    `save`'s UserError). The thread is not a daemon: a process that ends while a write is pending finishes it
    first. A kill (SIGKILL, a node failure) mid-write loses only that write: `save`'s rename is atomic."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, job: Callable[[], None]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(job,), name="checkpoint-writer")
        self._thread.start()

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as err:  # raised on the training thread by the next submit() or wait()
            self._error = err

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems (and Windows) cannot open a directory: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# What a checkpoint may contain besides tensors and plain data (torch's weights-only unpickler refuses anything
# else, so opening a shared model.pt never runs code it pickled): numpy arrays and scalars (our RNG state and
# progress), fairseq's argparse Namespace (its args). Rebuilding these calls no code named by the file.
_multiarray = getattr(np, "_core", None) or np.core  # numpy 2 renamed numpy.core
SAFE_GLOBALS = [np.ndarray, np.dtype, argparse.Namespace, *(getattr(np.dtypes, name) for name in np.dtypes.__all__)]
for _module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # pickled by numpy 2 and by numpy 1
    SAFE_GLOBALS += [
        (_multiarray.multiarray._reconstruct, f"{_module}._reconstruct"),
        (_multiarray.multiarray.scalar, f"{_module}.scalar"),
    ]
# what some checkpoints need that we do not allow: (prefix of the global, what the user can do about it)
NEEDS = (
    (
        "omegaconf.",
        "which needs omegaconf (fairseq 0.10/0.11 pickled its cfg as an omegaconf DictConfig); "
        "re-save it with fairseq 0.12, whose checkpoints keep cfg as plain data",
    ),
)


def load(path: str | Path) -> dict:
    """A checkpoint's contents, read with torch's weights-only unpickler: tensors, plain data and SAFE_GLOBALS.
    A file that needs anything else, or that cannot be read, is a UserError naming it."""
    check_format(path)
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        needed = re.search(r"GLOBAL ([\w.]+)|but got <class '([\w.]+)'>", str(err))
        if needed is None:  # not a pickle torch wrote: an unsupported opcode, garbage
            detail = str(err).split("WeightsUnpickler error:", 1)[-1].strip().splitlines()[0]
            raise UserError(f"{path}: not a readable checkpoint, truncated or corrupt? ({detail})") from None
        name = needed.group(1) or needed.group(2)
        why = next((advice for prefix, advice in NEEDS if name.startswith(prefix)), "which could run code when opened")
        raise UserError(
            f"{path}: refused: it needs {name}, {why}; a checkpoint may hold only tensors, plain data, "
            f"numpy arrays and argparse.Namespace"
        ) from None
    except (RuntimeError, EOFError, ValueError, IndexError, KeyError, OSError, zipfile.BadZipFile) as err:
        disk = isinstance(err, OSError) and err.errno not in (None, errno.EINVAL)  # the disk's failure, not the file's
        why = "could not be read" if disk else "not a readable checkpoint, truncated or corrupt?"
        raise UserError(f"{path}: {why} ({_first_line(err)})") from None


def load_model(path: str | Path, named: bool = True) -> dict:
    """`load` of a file that must be one of our models (a model.pt, an averaged or a training checkpoint): a torch
    file of another kind (a fairseq checkpoint, a bare state_dict) is a UserError naming it. named=False (a warm
    start, which copies tensors by name into a model built from the config): any {"model": weights} will do."""
    state = load(path)
    if isinstance(state, dict) and isinstance(state.get("model"), dict) and (state.get("model_name") or not named):
        return state
    fairseq = isinstance(state, dict) and ("args" in state or "cfg" in state)
    raise UserError(
        f"{path}: not a model of ours (no model_name and weights)"
        + ("; a fairseq checkpoint? convert it with `lwnmt import-fairseq` first" if fairseq else "")
    )


# How torch.save's files begin: a zip archive (torch ≥ 1.6), or a pickle of protocol 2+ (the legacy format)
MAGIC = (b"PK\x03\x04", b"\x80")


def check_format(path: str | Path) -> None:
    """A UserError naming a file that is not a PyTorch file at all (a text file, a log, an HTML error page saved as
    model.pt), which torch's unpickler reads as opcodes and fails on with an IndexError or KeyError."""
    with open(path, "rb") as f:
        head = f.read(32)
    if not head.startswith(MAGIC):
        what = "an empty file" if not head else f"it begins {head[:16].decode('utf-8', 'replace')!r}"
        raise UserError(
            f"{path}: not a readable checkpoint, truncated or corrupt? (not a PyTorch file: {what}; "
            f"expected a model.pt written by lwnmt train, average or import-fairseq)"
        )


def load_resumable(save_dir: Path) -> tuple[dict | None, Path | None]:
    """(state, path) of the newest readable full checkpoint of `save_dir`: checkpoint_last.pt, else
    checkpoint_previous.pt (with a warning naming both); (None, None) when there is none. A UserError when they
    exist and none can be read, so that a run of days is never restarted from scratch without a person deciding.
    Half-written files of a writer that was killed mid-save (SIGKILL, OOM, a node failure) are removed."""
    _remove_stale_temporaries(save_dir)
    unreadable = []
    for path in (save_dir / LAST, save_dir / PREVIOUS):
        if not path.exists():
            continue
        try:
            state = load(path)
        except (UserError, OSError) as err:  # truncated zip, refused pickle, I/O error: all mean "cannot read"
            reason = str(err).removeprefix(f"{path}: ") if isinstance(err, UserError) else _first_line(err)
            unreadable.append(f"{path.name} ({reason})")
            continue
        if path.name != LAST:
            log.warning(
                "%s: %s; resuming from %s (update %d) instead",
                save_dir,
                f"cannot read {unreadable[0]}" if unreadable else f"{LAST} is missing",
                path.name,
                state["progress"]["update"],
            )
        return state, path
    if unreadable:
        raise UserError(
            f"{save_dir}: cannot read {' or '.join(unreadable)}; nothing to resume from — move the "
            f"directory away to train from scratch"
        )
    return None, None


def _remove_stale_temporaries(save_dir: Path) -> None:
    """Delete save()'s .tmp-<name>.<random>.<pid> files whose writing process no longer exists."""
    for tmp in save_dir.glob(".tmp-*"):
        pid = tmp.suffix.lstrip(".")
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            log.info("%s: removed %s, left by a process killed while saving", save_dir, tmp.name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _first_line(err: Exception) -> str:
    """The error's first sentence: torch's zip reader appends a paragraph of advice."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text.split('. ')[0].rstrip('.')}" if text else type(err).__name__


def numbered(save_dir: str | Path, by: str) -> list[tuple[int, Path]]:
    """The (number, path) of the epoch or update checkpoints in `save_dir`, oldest first."""
    if by not in PATTERNS:
        raise UserError(f"average by {by!r}; expected update or epoch")
    return sorted((int(m.group(1)), p) for p in Path(save_dir).iterdir() if (m := re.fullmatch(PATTERNS[by], p.name)))


def prune(save_dir: Path, by: str, keep: int) -> None:
    """Delete all but the `keep` newest epoch or update checkpoints."""
    found = numbered(save_dir, by)
    for _, path in found[: max(0, len(found) - keep)]:
        path.unlink()


def last_checkpoints(save_dir: str | Path, n: int, by: str = "epoch") -> list[Path]:
    """The newest `n` epoch or update checkpoints, the ones fairseq's average_checkpoints.py would take."""
    if n < 1:  # found[-0:] is every checkpoint, found[--1:] all but the oldest
        raise UserError(f"average {n} checkpoints; expected at least 1")
    found = numbered(save_dir, by)
    if not found:
        raise UserError(f"{save_dir}: no {by} checkpoints ({PATTERNS[by]}) to average")
    if len(found) < n:
        log.warning("%s: only %d %s checkpoints, averaging those instead of %d", save_dir, len(found), by, n)
    return [p for _, p in found[-n:]]


# Settings a run may change and still resume its checkpoints: the budget and bookkeeping, not the training itself;
# micro_batch_tokens: how an update's sentences are split into passes, not which ones (float rounding aside);
# valid_bleu: what validation measures, not the weights; compile: how the same model is computed (a compiled run
# draws its dropout masks from Inductor's kernels, so the updates after the change differ as a new seed's would).
RESUMABLE_CHANGES = (
    "max_update",
    "max_epoch",
    "max_minutes",
    "patience",
    "log_interval",
    "keep_last_epochs",
    "keep_interval_updates",
    "save_interval_updates",
    "save_interval_minutes",
    "final_model",
    "max_nonfinite_updates",
    "micro_batch_tokens",
    "validate_interval_updates",
    "valid_bleu",
    "compile",
)


def resume_key(spec: TrainSpec | dict) -> dict:
    """What must match for a checkpoint to be resumed: model, architecture, training (budget aside), warm start."""
    spec = TrainSpec.of(spec)
    train = {k: v for k, v in spec.train.items() if k not in RESUMABLE_CHANGES}
    key = {"model": spec.model, "arch": spec.arch, "train": train, "init_from": spec.init_from}
    return key | ({"model_class": spec.user_model["class"]} if spec.user_model else {})


def not_to_resume(state: dict, spec: TrainSpec, cfg, save_dir: Path) -> str:
    """Why `save_dir`'s checkpoints must not be resumed ("" when they may): the model or training settings they
    were made with differ from `spec`'s (a larger budget aside: that run goes on), or their run is over. A run is
    over when its progress reached `cfg`'s budget (or stopped early) and it wrote its final model, which
    training.json's update count, written after the model, confirms; so a finished training run again (`snakemake
    --forcerun`, new inputs) trains from update 0, while one killed before its end resumes."""
    if state.get("settings") != resume_key(spec):
        return "model or training settings changed since its checkpoints"
    stopped = Progress.from_dict(state["progress"]).stop_reason(cfg)
    if not stopped:
        return ""
    try:
        summary = json.loads((save_dir / "training.json").read_text())
    except (OSError, ValueError):  # killed between its last update and its final model: the resume writes it
        return ""
    if not isinstance(summary, dict) or summary.get("updates") != state["progress"]["update"]:
        return ""
    return (
        f"its run finished at update {summary['updates']} ({stopped}) and wrote its final model; run again, "
        f"it is trained again"
    )


def recorded_precision(state: dict | None, cfg, device: torch.device) -> Precision | None:
    """The precision a resumed checkpoint's run computed in, when it asked for the same `amp` on the same kind of
    device: the run goes on in it, whatever a probe would find now."""
    recorded = (state or {}).get("precision")
    if (
        not isinstance(recorded, dict)
        or recorded.get("requested") != cfg.amp
        or recorded.get("device") != device_name(device)
    ):
        return None
    return Precision.from_dict(recorded)


def misfit(err: Exception) -> str:
    """The first mismatch load_state_dict's many-line error names (a missing key, a shape), cut to one line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    detail = lines[1] if len(lines) > 1 else (lines[0] if lines else type(err).__name__)
    return detail if len(detail) <= 160 else detail[:157] + "..."


def set_aside(save_dir: Path) -> Path:
    """Rename a checkpoint directory to the first free <name>.superseded-<n> and recreate it empty."""
    n = 1
    while (aside := save_dir.with_name(f"{save_dir.name}.superseded-{n}")).exists():
        n += 1
    save_dir.rename(aside)
    save_dir.mkdir(parents=True)
    return aside


def dictionaries(src: Dictionary, tgt: Dictionary) -> dict:
    """What model.pt records of the dictionaries it was trained with, for `check_dictionaries`."""
    return {side: {"size": len(d), "fingerprint": d.fingerprint()} for side, d in (("source", src), ("target", tgt))}


def check_dictionaries(state: dict, path: str | Path, src: Dictionary, tgt: Dictionary) -> None:
    """A UserError naming the dictionary file when `src`/`tgt` are not those the model was trained with: their
    sizes against the model's vocabulary sizes, and their fingerprints where the checkpoint has them (older ones
    do not)."""
    config, recorded = state.get("model_config", {}), state.get("dictionaries") or {}
    for side, given, size in (("source", src, config.get("src_vocab")), ("target", tgt, config.get("tgt_vocab"))):
        name = given.path or f"the {side} dictionary"
        if size is not None and len(given) != size:
            raise UserError(
                f"{name}: {len(given):,} symbols, but {path} has a {size:,}-symbol {side} vocabulary; "
                f"--data must be the data directory the model was trained on"
            )
        theirs = recorded.get(side, {}).get("fingerprint")
        if theirs is not None and theirs != given.fingerprint():
            raise UserError(
                f"{name}: fingerprint {given.fingerprint()}, but {path} was trained with a {side} "
                f"dictionary of fingerprint {theirs} (same size, other symbols); --data must be the "
                f"data directory the model was trained on"
            )


# settings that change what a tensor means without changing its shape: a warm start needs them equal
MEANING = ("sinusoid", "norm", "scale_embedding", "position_embeddings", "pad", "eos")


def warm_start(model: Model, path: str, vocabularies: dict[str, Dictionary] | None = None) -> list[str]:
    """Continued learning (GCA §3.3; Dou et al. §4): copy every tensor of a trained model into `model`, whose extra
    parameters keep their default initialisation. Optimizer and schedule start afresh. Returns the new names.
    vocabularies: the task's, by language; a model with dict.<lang>.txt beside it (trained elsewhere, e.g. imported
    from fairseq) must have been trained with the same ones."""
    state = load_model(path, named=False)
    trained, theirs = state["model"], state.get("model_config", {})
    for key in MEANING:
        if key in theirs and theirs[key] != getattr(model.config, key):
            raise UserError(
                f"{path}: trained with {key}={theirs[key]!r}, but this experiment's arch has "
                f"{key}={getattr(model.config, key)!r}; set arch: {{{key}: {theirs[key]}}} to continue "
                f"from it"
            )
    for lang, ours in (vocabularies or {}).items():
        beside = Path(path).parent / f"dict.{lang}.txt"
        other = Dictionary.load(beside).symbols if beside.exists() else ours.symbols
        if other != ours.symbols:  # the two may differ in size: the None after each marks where the shorter ends
            i = next(i for i, (a, b) in enumerate(zip(other + [None], ours.symbols + [None], strict=False)) if a != b)
            raise UserError(
                f"{beside}: not the task's {lang} vocabulary (symbol {i}: {(other + [None])[i]!r} vs "
                f"the task's {(ours.symbols + [None])[i]!r}); the model must have been "
                f"trained on this task's BPE and dictionary"
            )
    trained = model.warm_start_names(trained)  # a model whose layers moved a baseline tensor says where to
    own = model.state_dict()
    homeless = [k for k in trained if k not in own]
    if homeless:
        raise UserError(
            f"{path}: tensor {homeless[0]!r} (and {len(homeless) - 1} more) has no place in model "
            f"{type(model).__name__}; warm starts need the same backbone"
        )
    wrong = [k for k in trained if trained[k].shape != own[k].shape]
    if wrong:
        raise UserError(
            f"{path}: tensor {wrong[0]!r} has shape {tuple(trained[wrong[0]].shape)}, the model expects "
            f"{tuple(own[wrong[0]].shape)}; warm starts need the same sizes and vocabulary"
        )
    model.load_state_dict(trained, strict=False)
    return [k for k in own if k not in trained]
