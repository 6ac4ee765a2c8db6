"""What the training loop works on (`Run`): the model and its optimiser, how far they got, where they are saved, and
the checkpoint writes that record them."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import checkpoint
from .checkpoint import LAST, PREVIOUS
from .config import TrainConfig
from .deferred import Pending
from .graphs import UpdateGraphs
from .precision import Precision
from .progress import Progress
from .rng import rng_state
from ..models.transformer import Model
from ..job_specs import TrainSpec
from ..models.user import recorded


@dataclass
class Run:
    """What the loop works on: the model and its optimiser, how far they got, and where they are saved."""

    spec: TrainSpec
    cfg: TrainConfig
    model: Model
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    progress: Progress
    save_dir: Path
    rank: int
    precision: Precision
    saved_time: float = field(default_factory=time.time)
    saved_update: int | None = None  # of the newest checkpoint_last.pt this process wrote
    dictionaries: dict = field(default_factory=dict)  # checkpoint.dictionaries: translate checks them
    languages: dict = field(default_factory=dict)  # {"src": "de", "tgt": "en"}: translate checks --src/--tgt
    # the longest training source and target (tokens with </s>): translate warns of inputs beyond what was learnt
    trained_lengths: dict = field(default_factory=dict)
    writer: checkpoint.Writer = field(default_factory=checkpoint.Writer)
    pending: Pending | None = None  # the newest update, queued and not yet counted into `progress`
    lr: float = 0.0  # the learning rate of the newest update counted (or skipped): what the reports show
    graphs: UpdateGraphs | None = None  # the updates' CUDA graphs (`cuda_graphs`), where they are used

    def save(self, *names: str, background: bool = False) -> None:
        """Rank 0 writes checkpoint_last.pt (all a resume needs; the only one resumed from) and weights-only
        checkpoints (the averaging candidates), then prunes the oldest, from a CPU copy of the state taken now.
        background=True (the training loop's saves): on the writer thread while training goes on, an error of the
        write raised by the next save or `flush`; else here, before returning (the save of a stopping process)."""
        assert self.pending is None, "a checkpoint's progress counts every update whose weights it holds"
        if self.rank != 0:
            return
        self.writer.wait()  # the write before first: files in order, one copy of the state held at a time
        weights = {
            "model": self.model.state_dict(),
            "model_name": self.spec.model,
            **recorded(self.spec),
            "model_config": self.model.config.to_dict(),
            "settings": checkpoint.resume_key(self.spec),
            "train_config": asdict(self.cfg),
            "progress": self.progress.to_dict(),
            "precision": self.precision.to_dict(),
            "dictionaries": self.dictionaries,
            "languages": self.languages,
            "trained_lengths": self.trained_lengths,
        }
        states = {
            name: weights
            if name != LAST
            else {
                **weights,
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": rng_state(),
            }
            for name in names
        }
        states = checkpoint.snapshot(states)  # one copy of the weights, shared by the files that hold them
        if background:
            self.writer.submit(lambda: self._write(states))
        else:
            self._write(states)
        self.saved_time, self.saved_update = time.time(), self.progress.update

    def _write(self, states: dict[str, dict]) -> None:
        for name, state in states.items():
            checkpoint.save(self.save_dir / name, state, previous=self.save_dir / PREVIOUS if name == LAST else None)
        checkpoint.prune(self.save_dir, "update", self.cfg.keep_interval_updates)
        checkpoint.prune(self.save_dir, "epoch", self.cfg.keep_last_epochs)

    def flush(self) -> None:
        """Wait for the pending checkpoint write; raise its error, if it failed."""
        self.writer.wait()
