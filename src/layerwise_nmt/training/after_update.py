"""What follows an update: counting it into the run's progress (or into the skipped ones), and what it makes due:
the end of the run, a checkpoint, a validation, a stop on a signal."""

from __future__ import annotations

import time
from dataclasses import replace

from .. import UserError
from .checkpoint import LAST
from .config import TrainConfig
from .deferred import Pending
from .optim import lr_at
from .reporting import Reporter
from .distributed import Stop
from .run import Run


def count_update(run: Run, update: Pending, elapsed: float, reporter: Reporter, updates_per_epoch: int) -> bool:
    """Count an update into the run's progress (skipped: into the skipped ones) and report it; whether it was taken.
    Its learning rate follows from the updates counted before it, as it did when it was queued."""
    progress, result = run.progress, update.read()
    run.lr = lr_at(progress.update + 1, run.cfg, run.model.config.d_model, progress.restarted)
    if result["skipped"]:
        skip_nonfinite(run, result)
        return False
    progress.add(result, elapsed)
    reporter.update(progress, result["ntokens"], run.lr, result["grad_norm"], updates_per_epoch)
    return True


def due(run: Run, elapsed: float, signalled: bool, epoch_batches: int) -> bool:
    """Whether the pending update, if it was taken, ends the run or is followed by a checkpoint or a validation
    (`decide`): then it is counted before the next update moves the weights those would see."""
    taken = replace(run.progress, update=run.progress.update + 1, elapsed=elapsed)
    return bool(
        signalled
        or taken.stop_reason(run.cfg)
        or save_due(run, taken.update)
        or validate_due(run.cfg, taken.update, taken.next_batch, epoch_batches)
    )


def decide(run: Run, validate, reporter: Reporter, epoch_batches: int, signalled: bool) -> bool:
    """After an update counted with nothing queued behind it: True if the run stops here; else its checkpoint and
    validation when due, and a Stop on a signal."""
    progress = run.progress
    if progress.stop_reason(run.cfg):
        return True
    save_on_schedule(run)
    if validate_due(run.cfg, progress.update, progress.next_batch, epoch_batches):
        reporter.epoch(progress, validate(), run.lr, partial=True)
    if signalled:
        raise Stop()
    return False


def validate_due(cfg: TrainConfig, update: int, next_batch: int, epoch_batches: int) -> bool:
    every = cfg.validate_interval_updates
    return bool(every and not update % every and next_batch < epoch_batches)  # the epoch's end validates anyway


def skip_nonfinite(run: Run, result: dict) -> None:
    """Count a skipped update; too many in a row end the run, its last checkpoint untouched."""
    progress, limit = run.progress, run.cfg.max_nonfinite_updates
    if progress.skip(result) > limit:
        last = (
            f"{LAST} (update {run.saved_update}) is the last good state"
            if run.saved_update is not None
            else "the newest checkpoint on disk is the last good state"
        )
        raise UserError(
            f"{run.save_dir}: training diverged: {progress.nonfinite_in_a_row} updates in a row with a "
            f"non-finite loss or gradient norm after update {progress.update}; {last}. Lower lr, set "
            f"clip_norm, or use amp: none/bf16 (max_nonfinite_updates: {limit})"
        )


def save_on_schedule(run: Run) -> None:
    names = save_due(run, run.progress.update)
    if names:
        run.save(*names, background=True)


def save_due(run: Run, update: int) -> tuple[str, ...]:
    cfg = run.cfg
    if cfg.save_interval_updates and update % cfg.save_interval_updates == 0:
        return f"checkpoint_{run.progress.epoch}_{update}.pt", LAST
    if cfg.save_interval_minutes and time.time() - run.saved_time >= cfg.save_interval_minutes * 60:
        return (LAST,)  # a resume point only: which checkpoints are averaged must not depend on the clock
    return ()
