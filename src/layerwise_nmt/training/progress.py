"""How far a training run got, when it must stop, and how it tells: log lines, metrics.csv, TensorBoard,
training.json.

`Progress` is the run's position and bookkeeping. It goes into every checkpoint as a plain dict (`to_dict`), so
that a checkpoint stays readable without this class and older checkpoints load with defaults for newer fields.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..data.io import atomic_path

log = logging.getLogger(__name__)


@dataclass
class Progress:
    update: int = 0  # updates taken (skipped non-finite ones excluded)
    epoch: int = 1  # the epoch in progress (1-based)
    next_batch: int = 0  # position in the epoch's batch order: a resume continues here
    elapsed: float = 0.0  # training seconds, across resumes
    epoch_stats: list[float] = field(default_factory=lambda: [0.0] * 4)  # Σ loss, Σ nll, correct, target tokens
    # the same sums and the updates counted, since the last log line and since the last metrics.csv row: each
    # reports the mean of its own updates (fairseq's train_inner), not a running mean that restarts every epoch
    interval_stats: list[float] = field(default_factory=lambda: [0.0] * 5)
    row_stats: list[float] = field(default_factory=lambda: [0.0] * 5)
    restarted: bool = False  # RestartAdam's second stage began
    restart_epoch: int = 0
    best_valid: float = -math.inf  # higher is better: −loss or BLEU
    bad_epochs: int = 0
    early_stopped: bool = False
    skipped_updates: int = 0
    nonfinite_in_a_row: int = 0
    history: list[dict] = field(default_factory=list)  # one metrics.csv row per (possibly partial) epoch
    stopped_by: str = ""
    # the run's budget as the tables show it: target tokens and sentence pairs trained on, across resumes (0 in
    # checkpoints from before these were counted; sentences only once an update reports its `nsentences`)
    target_tokens: float = 0.0
    sentences: int = 0

    @classmethod
    def from_dict(cls, state: dict) -> "Progress":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in known})

    def to_dict(self) -> dict:
        return asdict(self)

    def add(self, result: dict, elapsed: float) -> None:
        """Count one update's loss sums into the epoch."""
        self.update += 1
        self.elapsed = elapsed
        self.nonfinite_in_a_row = 0
        sums = (result["loss"], result["nll"], result["correct"], result["ntokens"], 1)
        self.epoch_stats = [a + b for a, b in zip(self.epoch_stats, sums)]
        self.interval_stats = [a + b for a, b in zip(self.interval_stats, sums)]
        self.row_stats = [a + b for a, b in zip(self.row_stats, sums)]
        self.target_tokens += float(result["ntokens"])
        self.sentences += int(result.get("nsentences", 0))

    def next_epoch(self) -> None:
        self.epoch, self.next_batch, self.epoch_stats = self.epoch + 1, 0, [0.0] * 4

    def stop_reason(self, cfg) -> str:
        """Which budget is spent ("" while none is): recomputed from the config, so a resumed run may be given a
        larger one. The final model records it, and a table row cut by the clock says so."""
        last_epoch = cfg.max_epoch
        if self.restarted and cfg.restart_epochs:
            last_epoch = self.restart_epoch + cfg.restart_epochs
        if self.early_stopped:
            return "early stopping"
        if cfg.max_update and self.update >= cfg.max_update:
            return "max_update"
        if last_epoch and self.epoch > last_epoch:
            return "restart_epochs" if self.restarted and cfg.restart_epochs else "max_epoch"
        if cfg.max_minutes and self.elapsed >= cfg.max_minutes * 60:
            return "max_minutes"
        return ""

    def judge(self, cfg, valid: dict) -> bool:
        """Early stopping's bookkeeping after an epoch; returns whether it is the best so far."""
        score = -valid["loss"] if cfg.early_stop_metric == "loss" else valid["bleu"]
        improved = score > self.best_valid
        self.best_valid, self.bad_epochs = (score, 0) if improved else (self.best_valid, self.bad_epochs + 1)
        if cfg.patience and self.bad_epochs >= cfg.patience:
            log.info("early stop: no better validation %s for %d epochs", cfg.early_stop_metric, cfg.patience)
            self.early_stopped = True
        return improved

    def eta_seconds(self, cfg, updates_per_epoch: int) -> float | None:
        remaining = []
        if cfg.max_update:
            remaining.append((cfg.max_update - self.update) * self.elapsed / max(self.update, 1))
        if cfg.max_minutes:
            remaining.append(cfg.max_minutes * 60 - self.elapsed)
        if cfg.max_epoch:
            done = (self.epoch - 1) * updates_per_epoch + self.next_batch / max(1, cfg.update_freq)
            remaining.append((cfg.max_epoch * updates_per_epoch - done) * self.elapsed / max(done, 1))
        return min(remaining) if remaining else None


def means(stats: list[float]) -> dict:
    """Per target token, from summed stats (Σ loss, Σ nll in nats, correct, tokens, …): loss and nll in bits,
    perplexity, accuracy."""
    loss, nll, correct, ntokens = stats[:4]
    ntokens = max(ntokens, 1.0)
    nll = nll / ntokens / math.log(2)
    return {"loss": loss / ntokens / math.log(2), "nll": nll, "ppl": 2**nll, "accuracy": correct / ntokens}


class Reporter:
    """Tells how training goes: a log line every `log_interval` updates (the mean loss, nll, perplexity and accuracy
    of those updates, lr, gradient norm, tokens/s, ETA), a metrics.csv row per epoch (and per
    `validate_interval_updates`; its train columns the mean of the updates since the row before), and both as
    TensorBoard event files to watch runs live (`tensorboard --logdir results/`), written by tensorboardX, which
    needs only numpy and protobuf; nothing at all on ranks other than 0 (`run_dir` None)."""

    def __init__(self, run_dir: Path | None, cfg):
        self.run_dir, self.cfg, self.writer = run_dir, cfg, None
        self.tokens, self.since = 0.0, time.time()
        if run_dir is None:
            return
        try:
            from tensorboardX import SummaryWriter
        except ImportError as err:  # a dependency: only a broken install lacks it, and then the log says so
            log.warning("no TensorBoard event files: tensorboardX cannot be imported (%s); metrics.csv has the "
                        "curves (pip install -c constraints.txt tensorboardX)", err)
            return
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), flush_secs=30)
        log.info("TensorBoard event files: %s", run_dir / "tensorboard")

    def update(self, progress: Progress, ntokens: float, lr: float, grad_norm: float, updates_per_epoch: int):
        self.tokens += ntokens
        if progress.update % self.cfg.log_interval:
            return
        interval, progress.interval_stats = progress.interval_stats, [0.0] * 5  # every rank: checkpointed state
        if self.run_dir is None:
            return
        now = time.time()
        tps, self.tokens, self.since = self.tokens / max(now - self.since, 1e-9), 0.0, now
        mean = means(interval)
        eta = progress.eta_seconds(self.cfg, updates_per_epoch)
        self._board(progress.update, "train", **mean, lr=lr, grad_norm=grad_norm, target_tokens_per_second=tps)
        log.info("epoch %d update %d: loss %.3f, nll %.3f, ppl %.2f, acc %.3f, lr %.2e, gnorm %.3f, %.0f target "
                 "tokens/s, %.1f min elapsed, ETA %s", progress.epoch, progress.update, mean["loss"], mean["nll"],
                 mean["ppl"], mean["accuracy"], lr, grad_norm, tps, progress.elapsed / 60,
                 "?" if eta is None else f"{eta / 60:.1f} min")

    def epoch(self, progress: Progress, valid: dict, lr: float, partial: bool) -> None:
        """Add the row of the updates since the last one to the history (every rank: it is part of the checkpointed
        state) and report it; an epoch's end also logs the epoch's mean training loss."""
        since, progress.row_stats = progress.row_stats, [0.0] * 5
        train = means(since)
        row = {"epoch": progress.epoch, "partial": partial, "update": progress.update,
               "minutes": round(progress.elapsed / 60, 3), "lr": lr, "train_loss": train["loss"],
               "train_nll": train["nll"], "train_accuracy": train["accuracy"], "train_updates": int(since[4]),
               "valid_loss": valid["loss"], "valid_nll": valid["nll"], "valid_accuracy": valid["accuracy"],
               "valid_bleu": valid.get("bleu", ""), "skipped_updates": progress.skipped_updates}
        progress.history.append(row)
        if self.run_dir is None:
            return
        self._board(row["update"], "epoch", **{k: v for k, v in row.items() if k not in ("epoch", "partial", "update")})
        self.write_history(progress)
        trained = (f"train loss {means(progress.epoch_stats)['loss']:.3f} (epoch mean)" if not partial else
                   f"train loss {train['loss']:.3f} (its last {int(since[4])} updates)")
        bleu = f", valid BLEU {valid['bleu']:.2f}" if "bleu" in valid else ""
        log.info("epoch %d%s: update %d, %s, valid loss %.3f (nll %.3f, ppl %.2f), valid acc %.3f%s",
                 row["epoch"], " (mid-epoch)" if partial else " done", row["update"], trained, valid["loss"],
                 valid["nll"], 2 ** valid["nll"], valid["accuracy"], bleu)

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
        summary = {"updates": progress.update, "epochs_completed": progress.epoch - 1, "precision": precision,
                   "target_tokens": int(progress.target_tokens), "sentences": progress.sentences or None,
                   "stopped_by": progress.stopped_by, "skipped_updates": progress.skipped_updates,
                   "minutes": round(progress.elapsed / 60, 2), "peak_gpu_memory_gib": _peak_gpu_memory(),
                   "budget": {k: getattr(self.cfg, k) for k in ("max_update", "max_epoch", "max_minutes")}}
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

    def __enter__(self) -> "RunLog":
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
        self.handler.handle(logging.LogRecord(__name__, level, __file__, 0, message, None, None))


class _RunLogHandler(logging.FileHandler):
    pass


def reopen_run_logs() -> None:
    """After the save dir was moved aside (`checkpoint.set_aside`): the next line goes to a train.log in the new
    one, the moved one keeps the lines before."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _RunLogHandler):
            handler.close()
