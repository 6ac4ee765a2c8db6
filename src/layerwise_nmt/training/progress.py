"""How far a training run got and when it must stop (training/reporting.py tells it: log lines, metrics.csv,
TensorBoard, training.json, train.log).

`Progress` is the run's position and bookkeeping. It goes into every checkpoint as a plain dict (`to_dict`), so
that a checkpoint stays readable without this class and older checkpoints load with defaults for newer fields.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, fields

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
    def from_dict(cls, state: dict) -> Progress:
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
        # the epoch's four sums count no updates: `sums`' last item (1) is for the interval's and the row's means
        self.epoch_stats = [a + b for a, b in zip(self.epoch_stats, sums, strict=False)]
        self.interval_stats = [a + b for a, b in zip(self.interval_stats, sums, strict=True)]
        self.row_stats = [a + b for a, b in zip(self.row_stats, sums, strict=True)]
        self.target_tokens += float(result["ntokens"])
        self.sentences += int(result.get("nsentences", 0))

    def skip(self, result: dict) -> int:
        """Count a skipped update (its loss or gradient norm not finite); returns how many in a row."""
        self.skipped_updates += 1
        self.nonfinite_in_a_row += 1
        log.warning(
            "epoch %d, update %d: loss %s, gradient norm %s; update skipped (%d in a row, %d in all)",
            self.epoch,
            self.update + 1,
            result["loss"],
            result["grad_norm"],
            self.nonfinite_in_a_row,
            self.skipped_updates,
        )
        return self.nonfinite_in_a_row

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

    def eta_seconds(self, cfg, updates_per_epoch: int, seconds_per_update: float | None = None) -> float | None:
        """Seconds left until the first budget is spent, at `seconds_per_update` (the current pace) or else at the
        run's mean pace so far."""
        pace = self.elapsed / max(self.update, 1) if seconds_per_update is None else seconds_per_update
        remaining = []
        if cfg.max_update:
            remaining.append((cfg.max_update - self.update) * pace)
        if cfg.max_minutes:
            remaining.append(cfg.max_minutes * 60 - self.elapsed)
        if cfg.max_epoch:
            done = (self.epoch - 1) * updates_per_epoch + self.next_batch / max(1, cfg.update_freq)
            remaining.append((cfg.max_epoch * updates_per_epoch - done) * pace)
        return min(remaining) if remaining else None


def means(stats: list[float]) -> dict:
    """Per target token, from summed stats (Σ loss, Σ nll in nats, correct, tokens, …): loss and nll in bits,
    perplexity, accuracy."""
    loss, nll, correct, ntokens = stats[:4]
    ntokens = max(ntokens, 1.0)
    nll = nll / ntokens / math.log(2)
    return {"loss": loss / ntokens / math.log(2), "nll": nll, "ppl": 2**nll, "accuracy": correct / ntokens}
