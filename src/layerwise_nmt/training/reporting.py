"""How a training run tells how it goes: a log line every `log_interval` updates, metrics.csv, TensorBoard event
files and training.json (`Reporter`), and every attempt's log kept beside its checkpoints (`RunLog`)."""

from __future__ import annotations

import csv
import json
import logging
import os
import socket
import time
import traceback
from pathlib import Path

from ..data.io import atomic_path
from .progress import Progress, means

log = logging.getLogger(__name__)


class Reporter:
    """Tells how training goes: a log line every `log_interval` updates (the mean loss, nll, perplexity and accuracy
    of those updates, lr, gradient norm, tokens/s, ETA), a metrics.csv row per epoch (and per
    `validate_interval_updates`; its train columns the mean of the updates since the row before), and both as
    TensorBoard event files to watch runs live (`tensorboard --logdir results/`), written by tensorboardX, which
    needs only numpy and protobuf; nothing at all on ranks other than 0 (`run_dir` None)."""

    def __init__(self, run_dir: Path | None, cfg):
        self.run_dir, self.cfg, self.writer = run_dir, cfg, None
        self.tokens, self.since = 0.0, time.time()
        # (update, elapsed) at this attempt's first update: the ETA's pace is this attempt's, since a resumed run's
        # elapsed time includes whatever slowed the attempts before it
        self.paced_from: tuple[int, float] | None = None
        if run_dir is None:
            return
        try:
            from tensorboardX import SummaryWriter
        except ImportError as err:  # a dependency: only a broken install lacks it, and then the log says so
            log.warning(
                "no TensorBoard event files: tensorboardX cannot be imported (%s); metrics.csv has the "
                "curves (pip install -c constraints.txt tensorboardX)",
                err,
            )
            return
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), flush_secs=30)
        log.info("TensorBoard event files: %s", run_dir / "tensorboard")

    def update(self, progress: Progress, ntokens: float, lr: float, grad_norm: float, updates_per_epoch: int):
        self.tokens += ntokens
        if self.paced_from is None:
            self.paced_from = (progress.update, progress.elapsed)
        if progress.update % self.cfg.log_interval:
            return
        interval, progress.interval_stats = progress.interval_stats, [0.0] * 5  # every rank: checkpointed state
        if self.run_dir is None:
            return
        now = time.time()
        tps, self.tokens, self.since = self.tokens / max(now - self.since, 1e-9), 0.0, now
        mean = means(interval)
        first_update, first_elapsed = self.paced_from
        pace = (
            (progress.elapsed - first_elapsed) / (progress.update - first_update)
            if progress.update > first_update
            else None
        )
        eta = progress.eta_seconds(self.cfg, updates_per_epoch, pace)
        self._board(progress.update, "train", **mean, lr=lr, grad_norm=grad_norm, target_tokens_per_second=tps)
        log.info(
            "epoch %d update %d: loss %.3f, nll %.3f, ppl %.2f, acc %.3f, lr %.2e, gnorm %.3f, %.0f target "
            "tokens/s, %.1f min elapsed, ETA %s",
            progress.epoch,
            progress.update,
            mean["loss"],
            mean["nll"],
            mean["ppl"],
            mean["accuracy"],
            lr,
            grad_norm,
            tps,
            progress.elapsed / 60,
            "?" if eta is None else f"{eta / 60:.1f} min",
        )

    def epoch(self, progress: Progress, valid: dict, lr: float, partial: bool) -> None:
        """Add the row of the updates since the last one to the history (every rank: it is part of the checkpointed
        state) and report it; an epoch's end also logs the epoch's mean training loss."""
        since, progress.row_stats = progress.row_stats, [0.0] * 5
        train = means(since)
        row = {
            "epoch": progress.epoch,
            "partial": partial,
            "update": progress.update,
            "minutes": round(progress.elapsed / 60, 3),
            "lr": lr,
            "train_loss": train["loss"],
            "train_nll": train["nll"],
            "train_accuracy": train["accuracy"],
            "train_updates": int(since[4]),
            "valid_loss": valid["loss"],
            "valid_nll": valid["nll"],
            "valid_accuracy": valid["accuracy"],
            "valid_bleu": valid.get("bleu", ""),
            "skipped_updates": progress.skipped_updates,
        }
        progress.history.append(row)
        if self.run_dir is None:
            return
        self._board(row["update"], "epoch", **{k: v for k, v in row.items() if k not in ("epoch", "partial", "update")})
        self.write_history(progress)
        trained = (
            f"train loss {means(progress.epoch_stats)['loss']:.3f} (epoch mean)"
            if not partial
            else f"train loss {train['loss']:.3f} (its last {int(since[4])} updates)"
        )
        bleu = f", valid BLEU {valid['bleu']:.2f}" if "bleu" in valid else ""
        log.info(
            "epoch %d%s: update %d, %s, valid loss %.3f (nll %.3f, ppl %.2f), valid acc %.3f%s",
            row["epoch"],
            " (mid-epoch)" if partial else " done",
            row["update"],
            trained,
            valid["loss"],
            valid["nll"],
            2 ** valid["nll"],
            valid["accuracy"],
            bleu,
        )

    def write_history(self, progress: Progress) -> None:
        if self.run_dir is None or not progress.history:
            return
        # a resumed older run's rows lack the newer columns: empty there
        columns = list(dict.fromkeys(key for row in progress.history for key in row))
        with atomic_path(self.run_dir / "metrics.csv") as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows(progress.history)

    def summary(self, progress: Progress, precision: dict | None = None) -> None:
        """training.json, how the run ended, for the tables: a row cut short by the clock must say so, and what it
        computed in (precision: amp, requested, reason, device)."""
        summary = {
            "updates": progress.update,
            "epochs_completed": progress.epoch - 1,
            "precision": precision,
            "target_tokens": int(progress.target_tokens),
            "sentences": progress.sentences or None,
            "stopped_by": progress.stopped_by,
            "skipped_updates": progress.skipped_updates,
            "minutes": round(progress.elapsed / 60, 2),
            "seconds": round(progress.elapsed, 3),
            "peak_gpu_memory_gib": _peak_gpu_memory(),
            "budget": {k: getattr(self.cfg, k) for k in ("max_update", "max_epoch", "max_minutes")},
            # the batches it trained on: fairseq's (0) or fixed shapes (`auto` decided per run and device)
            "bucket_growth_factor": self.cfg.bucket_growth_factor,
        }
        assert self.run_dir is not None  # rank 0's reporter, the one that writes the summary
        with atomic_path(self.run_dir / "training.json") as tmp:
            Path(tmp).write_text(json.dumps(summary, indent=1))

    def _board(self, step: int, group: str, **scalars) -> None:
        if self.writer is None:
            return
        for name, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):  # valid_bleu is "" without BLEU
                self.writer.add_scalar(f"{group}/{name}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def trained_seconds(summary: dict) -> float:
    """A training.json's training time in seconds, what a throughput divides by: its minutes are rounded for
    people (a toy run's 0.2 s is 0.0 minutes), and a summary written before it kept seconds has only those."""
    seconds = summary.get("seconds")
    return float(seconds) if seconds is not None else float(summary.get("minutes") or 0) * 60


def _peak_gpu_memory() -> float | None:
    """This process's peak CUDA allocation (several trainings share one GPU: each says what it took)."""
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_initialized() else None


class RunLog:
    """Every attempt's log, appended to SAVE_DIR/train.log (rank 0's), from its first line to its error's traceback:
    Snakemake deletes a job's log file before each attempt and each rerun, so the rule's log holds the last attempt
    only; this one stays beside the checkpoints whose story it tells, across retries, requeues and reruns. A context
    manager; without a save dir (the other ranks) it does nothing."""

    NAME = "train.log"
    FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

    def __init__(self, save_dir: Path | None):
        self.handler = None
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            self.handler = _RunLogHandler(save_dir / self.NAME, encoding="utf-8", delay=True)
            self.handler.setFormatter(logging.Formatter(self.FORMAT))

    def __enter__(self) -> RunLog:
        if self.handler is not None:
            logging.getLogger().addHandler(self.handler)
            slurm = os.environ.get("SLURM_JOB_ID")
            where = f"{socket.gethostname()}, SLURM job {slurm}" if slurm else socket.gethostname()
            self._file_only(logging.INFO, f"started (pid {os.getpid()} on {where})")
        return self

    def __exit__(self, kind, error, tb) -> None:
        if self.handler is None:
            return
        if error is not None and not isinstance(error, SystemExit):  # a stop on a signal logs its own line
            self._file_only(logging.ERROR, "".join(traceback.format_exception(kind, error, tb)).rstrip())
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()

    def _file_only(self, level: int, message: str) -> None:
        assert self.handler is not None  # called only where a save dir gave the run a log
        self.handler.handle(logging.LogRecord(__name__, level, __file__, 0, message, None, None))


class _RunLogHandler(logging.FileHandler):
    pass


def reopen_run_logs() -> None:
    """After the save dir was moved aside (`checkpoint.set_aside`): the next line goes to a train.log in the new
    one, the moved one keeps the lines before."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _RunLogHandler):
            handler.close()
