"""Training: one linear loop (nanoGPT's shape) with fairseq's semantics.

- batches of `max_tokens` (and/or `max_sentences`), gradient accumulation over `update_freq` batches;
  gradients are normalised by the number of target tokens of the whole update, across DDP ranks
  (tokens per update = max_tokens × GPUs × update_freq); `micro_batch_tokens` merges an update's batches into
  fewer, larger passes (the same sentences, the same gradient up to float rounding: `accumulate`); the next
  updates' batches are collated on a background thread while the current one computes (`Prefetcher`);
- Adam(0.9, 0.98, 1e-9); learning rate a pure function of the update number (`lr_at`): fairseq's inverse_sqrt
  with linear warmup, or Vaswani et al.'s noam schedule; optional RestartAdam (MLRF §4.1, after Denkowski & Neubig
  2017): after `restart_after_epochs`, fresh Adam moments, a fixed lr and a new batch size;
- label-smoothed cross-entropy as fairseq computes it; gradient clipping;
- stops at max_update / max_epoch / a wall-clock budget / early stopping on validation loss;
- checkpoints every N updates, every M minutes and at each epoch end, written atomically (`checkpoint.py`) by a
  background thread from a CPU copy of the state (the final save on a signal is synchronous), the last K kept;
  `checkpoint_last.pt` holds everything needed to resume bit for bit (model, optimizer, schedule position, RNG,
  data position);
- an update whose loss or gradient norm is not finite is skipped (fp16: with a smaller loss scale); too many in a
  row stop the run with an error, its last checkpoint untouched.
"""

from __future__ import annotations

import logging
import math
import random
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import UserError, checkpoint
from .checkpoint import BEST, LAST, PREVIOUS
from .data.batching import Batch, ParallelData, Prefetcher, collate, epoch_order, make_batches, merge_batches
from .data.vocab import Dictionary, load_pair
from .distributed import StopSignals, all_reduce_sum, barrier, init_distributed, per_rank_update_freq, world
from .models import build
from .models.transformer import count_parameters
from .precision import AMP_CHOICES, Precision, fp32_matmuls, resolve
from .progress import Progress, Reporter
from .settings import Settings, setting

log = logging.getLogger(__name__)


@dataclass
class TrainConfig(Settings):
    kind = "training setting"

    max_tokens: int | None = setting(4096, ge=1)
    max_sentences: int | None = setting(None, ge=1)
    update_freq: int = setting(1, ge=1)
    # merge each update's batches into passes of up to this many padded tokens (fewer, larger forward/backward
    # passes on a GPU that holds more than max_tokens; the update's sentences and tokens unchanged); 0 = off, one
    # pass per batch as the papers' GPUs ran them
    micro_batch_tokens: int = setting(0, ge=0)
    # leave out training pairs with more subword units on either side (0 = keep all)
    skip_longer_than: int = setting(0, ge=0)
    lr: float = setting(5e-4, gt=0)  # peak lr (inverse_sqrt) or the scale in front of d^-0.5 (noam)
    lr_scheduler: str = "inverse_sqrt"  # inverse_sqrt | noam | polynomial_decay | cosine | fixed
    total_num_update: int = setting(0, ge=0)  # polynomial_decay: lr reaches end_learning_rate here (fairseq's name)
    end_learning_rate: float = setting(0.0, ge=0)
    min_lr: float = setting(0.0, ge=0)  # cosine: the floor of each period (fairseq's --min-lr)
    lr_period_updates: int = setting(0, ge=0)  # cosine: period after warm-up (fairseq's name; Wu et al. 2019: 20,000)
    warmup_updates: int = setting(4000, ge=0)
    warmup_init_lr: float = setting(1e-7, ge=0)
    adam_betas: tuple[float, float] = setting((0.9, 0.98), ge=0, lt=1)
    adam_eps: float = setting(1e-9, gt=0)
    weight_decay: float = setting(0.0, ge=0)
    clip_norm: float = setting(0.0, ge=0)  # 0 = no clipping
    label_smoothing: float = setting(0.1, ge=0, lt=1)
    max_update: int = setting(0, ge=0)  # 0 = no limit
    max_epoch: int = setting(0, ge=0)
    max_minutes: float = setting(0.0, ge=0)  # wall-clock training budget (resumes keep counting)
    patience: int = setting(0, ge=0)  # epochs without a better validation score before stopping; 0 = off
    early_stop_metric: str = "loss"  # loss | bleu (beam search on the validation set each epoch: slower)
    # last | best: which weights become model.pt. best = the epoch early stopping judged best (fairseq's
    # checkpoint_best.pt), so that a run stopped by patience decodes the model it selected, not the one after it
    final_model: str = "last"
    valid_beam: int = setting(1, ge=1)  # beam size for validation BLEU
    restart_after_epochs: int = setting(0, ge=0)  # RestartAdam: 0 = off
    restart_lr: float = setting(5e-5, gt=0)
    restart_max_sentences: int | None = setting(None, ge=1)
    restart_max_tokens: int | None = setting(None, ge=1)
    restart_epochs: int = setting(0, ge=0)
    save_interval_updates: int = setting(0, ge=0)  # 0 = only at epoch ends
    # also refresh checkpoint_last.pt (the resume point, not an averaging candidate) after this many minutes, so
    # that a hard kill (node failure, OOM, SIGKILL after SLURM's grace period) loses at most this; 0 = off
    save_interval_minutes: float = setting(30.0, ge=0)
    keep_interval_updates: int = setting(10, ge=0)
    keep_last_epochs: int = setting(10, ge=0)
    # auto | none | bf16 | fp16: auto = bf16 on GPUs and CPUs that run it natively, fp16 + loss scaling on older
    # GPUs, fp32 elsewhere (precision.py); none = fp32
    amp: str = "auto"
    tf32: bool = True  # fp32 on CUDA: TF32 tensor-core matmuls (fairseq's and PyTorch's Ampere+ practice)
    # updates in a row with a non-finite loss or gradient norm that are skipped before the run stops with an error
    max_nonfinite_updates: int = setting(8, ge=1)
    log_interval: int = setting(50, ge=1)
    seed: int = setting(1, ge=0)

    def check(self) -> None:
        if self.lr_scheduler not in ("inverse_sqrt", "noam", "polynomial_decay", "cosine", "fixed"):
            raise UserError(f"lr_scheduler={self.lr_scheduler!r}; expected inverse_sqrt, noam, polynomial_decay, "
                            f"cosine or fixed")
        if self.lr_scheduler == "cosine" and not self.lr_period_updates:
            raise UserError("lr_scheduler=cosine needs lr_period_updates")
        if self.lr_scheduler == "polynomial_decay" and not self.total_num_update:
            raise UserError("lr_scheduler=polynomial_decay needs total_num_update")
        if self.early_stop_metric not in ("loss", "bleu"):
            raise UserError(f"early_stop_metric={self.early_stop_metric!r}; expected loss or bleu")
        if self.final_model not in ("last", "best"):
            raise UserError(f"final_model={self.final_model!r}; expected last or best")
        if self.amp not in AMP_CHOICES:
            raise UserError(f"amp={self.amp!r}; expected {', '.join(AMP_CHOICES)}")
        if not (self.max_update or self.max_epoch or self.max_minutes):
            raise UserError("set at least one of max_update, max_epoch, max_minutes")


def lr_at(update: int, cfg: TrainConfig, d_model: int, restarted: bool = False) -> float:
    """Learning rate for update number `update` (1-based)."""
    if restarted:
        return cfg.restart_lr  # RestartAdam's second stage: fixed lr
    if cfg.lr_scheduler == "fixed":
        return cfg.lr
    if cfg.lr_scheduler == "noam":  # lr = scale · d^-0.5 · min(t^-0.5, t · warmup^-1.5)  (Vaswani et al. Eq. 3)
        return cfg.lr * d_model**-0.5 * min(update**-0.5, update * cfg.warmup_updates**-1.5)
    if update < cfg.warmup_updates:  # linear warmup (fairseq's inverse_sqrt, polynomial_decay and cosine)
        return cfg.warmup_init_lr + (cfg.lr - cfg.warmup_init_lr) * update / cfg.warmup_updates
    if cfg.lr_scheduler == "cosine":  # fairseq's cosine (t_mult 1, no shrink): min_lr + ½Δ(1 + cos(π t / period))
        # t counts completed post-warm-up updates, so the budget's last update (warmup + period) is at min_lr
        t = max(0, update - 1 - cfg.warmup_updates) % cfg.lr_period_updates
        return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * t / cfg.lr_period_updates))
    if cfg.lr_scheduler == "polynomial_decay":  # then linearly down to end_learning_rate (fairseq, power 1)
        left = max(0.0, 1 - (update - cfg.warmup_updates) / max(1, cfg.total_num_update - cfg.warmup_updates))
        return cfg.end_learning_rate + (cfg.lr - cfg.end_learning_rate) * left
    return cfg.lr * math.sqrt(cfg.warmup_updates / update)  # inverse_sqrt: ∝ 1/sqrt(update)


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int):
    """fairseq's label_smoothed_cross_entropy, summed over non-pad tokens → (loss, nll, correct tokens)."""
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    keep = target != pad  # masked, not indexed: boolean indexing costs an index_put in backward
    nll = -lprobs.gather(-1, target[..., None]).squeeze(-1) * keep
    smooth = -lprobs.sum(dim=-1) * keep
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    correct = ((lprobs.argmax(dim=-1) == target) & keep).sum()
    return loss.sum(), nll.sum().detach(), correct


# ---------------------------------------------------------------------------------------------------------------
# One update


STATS = ("loss", "nll", "correct", "ntokens", "nsentences")  # an update's sums, on the device until _update reads them


def accumulate(model, micro_batches, cfg: TrainConfig, device, autocast, scaler=None) -> dict[str, torch.Tensor]:
    """Forward/backward over the update's batches; leaves gradients normalised by the update's target tokens
    (all ranks): grad = Σ_ranks Σ_batches ∇loss_sum / ntokens_total, the same as one process with the union.

    Merged batches (`micro_batch_tokens`, `merge_batches`) give the same gradient: the loss is a sum over target
    tokens, each token's term depends only on its own sentence (padding is masked in attention, convolutions and
    the loss; positions restart in every sentence), and the normalisation is by the update's total tokens whatever
    the passes, so Σ_passes ∇Σ_tokens = Σ_batches ∇Σ_tokens; only the order of float additions differs. A model's
    auxiliary loss is the exception: Dou et al.'s diversity term is a mean over a pass's positions, weighted by the
    pass's tokens, which merging would change: refused here, and at the start by `check_merging`.

    fp16: each loss is multiplied by the scaler's loss scale before backward, so that small gradients survive in
    fp16; `_update` unscales. The sums stay on the device (no host sync here): `_update` reads them once."""
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    inner = model.module if ddp else model
    sums = torch.zeros(len(STATS), dtype=torch.float64, device=device)
    for i, batch in enumerate(micro_batches):
        batch = batch.to(device)  # non_blocking: from pinned memory, queued behind the running kernels
        sync = nullcontext() if (not ddp or i == len(micro_batches) - 1) else model.no_sync()
        with sync:
            with autocast():
                logits = model(batch.src, batch.prev)
            loss, nll, ok = smoothed_loss(logits, batch.tgt, cfg.label_smoothing, inner.config.pad)
            extra = getattr(inner, "auxiliary_loss", None)  # a per-token term the model asks for (Dou's −λ·L_div)
            if extra is not None and batch.parts > 1:
                raise UserError(f"micro_batch_tokens={cfg.micro_batch_tokens}: model {type(inner).__name__} adds "
                                f"a per-pass auxiliary loss, which merged batches would change; set "
                                f"micro_batch_tokens: 0")
            total = loss if extra is None else loss + extra * batch.ntokens
            (total if scaler is None else scaler.scale(total)).backward()
        sums[:3] += torch.stack([loss.detach().double(), nll.double(), ok.double()])
        sums[3] += batch.ntokens  # Python numbers: no host-to-device copy, which would wait for the stream
        sums[4] += len(batch.ids)
    sums = all_reduce_sum(sums)
    grads = [p.grad for p in inner.parameters() if p.grad is not None]
    if grads:  # DDP averaged over ranks; undo that, then divide by all tokens (on the device: no sync)
        torch._foreach_mul_(grads, (world()[1] / sums[3].clamp(min=1.0)).float())
    return dict(zip(STATS, sums.unbind()))


@torch.no_grad()
def evaluate(model, data: ParallelData, cfg: TrainConfig, device, autocast) -> dict:
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    inner.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # summed on the device, read once
    ntokens = 0
    for ids in make_batches(data.src.sizes, data.tgt.sizes, cfg.max_tokens or 4096, None, cfg.seed):
        batch = collate(data, ids).to(device)
        with autocast():
            logits = inner(batch.src, batch.prev)
        loss, nll, ok = smoothed_loss(logits, batch.tgt, cfg.label_smoothing, inner.config.pad)
        totals += torch.stack([loss.double(), nll.double(), ok.double()])
        ntokens += batch.ntokens
    loss, nll, correct = totals.tolist()
    result = {"loss": loss / ntokens / math.log(2), "nll": nll / ntokens / math.log(2), "accuracy": correct / ntokens}
    if cfg.early_stop_metric == "bleu":
        result["bleu"] = valid_bleu(inner, data, cfg, device, autocast)
    inner.train()
    return result


def valid_bleu(model, data: ParallelData, cfg: TrainConfig, device, autocast) -> float:
    """Tokenized BLEU of beam search on the validation set, BPE removed on both sides (sacrebleu)."""
    from .decode import BeamConfig, beam_search
    from .score import ScoreConfig, bleu

    beam = BeamConfig(beam=cfg.valid_beam)
    hyps, refs = [], []
    for ids in make_batches(data.src.sizes, data.tgt.sizes, None, 64, cfg.seed):
        batch = collate(data, ids).to(device)
        with autocast():
            results = beam_search(model, batch.src, beam, eos=model.config.eos, pad=model.config.pad)
        hyps += [" ".join(map(str, r[0].tokens[:-1])) for r in results]
        refs += [" ".join(map(str, data.tgt[i][:-1])) for i in ids]
    return bleu(hyps, [refs], ScoreConfig())["bleu"]  # on token ids: BLEU over BPE units, enough to rank epochs


# ---------------------------------------------------------------------------------------------------------------
# The run


class Stop(Exception):
    """A SIGTERM/SIGUSR1 (preemption) arrived: checkpoint, then exit non-zero."""


@dataclass
class Run:
    """What the loop works on: the model and its optimiser, how far they got, and where they are saved."""

    spec: dict
    cfg: TrainConfig
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    progress: Progress
    save_dir: Path
    rank: int
    saved_time: float = field(default_factory=time.time)
    saved_update: int | None = None  # of the newest checkpoint_last.pt this process wrote
    dictionaries: dict = field(default_factory=dict)  # checkpoint.dictionaries: translate checks them
    languages: dict = field(default_factory=dict)  # {"src": "de", "tgt": "en"}: translate checks --src/--tgt
    writer: checkpoint.Writer = field(default_factory=checkpoint.Writer)

    def save(self, *names: str, background: bool = False) -> None:
        """Rank 0 writes checkpoint_last.pt (all a resume needs; the only one resumed from) and weights-only
        checkpoints (the averaging candidates), then prunes the oldest, from a CPU copy of the state taken now.
        background=True (the training loop's saves): on the writer thread while training goes on, an error of the
        write raised by the next save or `flush`; else here, before returning (the save of a stopping process)."""
        if self.rank != 0:
            return
        self.writer.wait()  # the write before first: files in order, one copy of the state held at a time
        weights = {"model": self.model.state_dict(), "model_name": self.spec["model"],
                   "model_config": self.model.config.to_dict(), "settings": checkpoint.resume_key(self.spec),
                   "train_config": asdict(self.cfg), "progress": self.progress.to_dict(),
                   "dictionaries": self.dictionaries, "languages": self.languages}
        states = {name: weights if name != LAST else
                  {**weights, "optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
                   "rng": checkpoint.rng_state()} for name in names}
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


def train(spec: dict, data_dir: str, src: str, tgt: str, save_dir: str, final: str | None = None) -> dict:
    """Train spec = {model: name, arch: {...}, train: {...}} on data_dir (bin-joint or bin-separate); returns the
    final progress. Resumes from save_dir's checkpoint_last.pt when it was made with the same settings."""
    device = init_distributed()
    rank, world_size = world()
    cfg = TrainConfig.from_dict(spec.get("train", {}))
    cfg = replace(cfg, update_freq=per_rank_update_freq(cfg.update_freq))
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    precision = resolve(cfg.amp, device)
    if rank == 0:
        log.info("precision: %s", precision)
    train_data, valid_data = ParallelData(data_dir, "train", src, tgt), ParallelData(data_dir, "valid", src, tgt)
    run = _start(spec, cfg, dict(zip((src, tgt), load_pair(data_dir, src, tgt))), Path(save_dir), device, precision)
    progress, autocast = run.progress, lambda: precision.autocast(device)
    net = torch.nn.parallel.DistributedDataParallel(run.model) if world_size > 1 else run.model
    run.model.train()
    per_update = world_size * cfg.update_freq  # batches per update, over all ranks
    reporter = Reporter(run.save_dir if rank == 0 else None, cfg)
    started = time.time() - progress.elapsed
    with StopSignals(device) as signals, fp32_matmuls(device, cfg.tf32):
        try:
            while not progress.stop_reason(cfg):
                order = _epoch_order(train_data, cfg, progress, per_update, data_dir)
                batches = partial(rank_batches, train_data, order, per_update, cfg.micro_batch_tokens, device)
                with Prefetcher(batches, range(progress.next_batch, len(order), per_update)) as ahead:
                    for position, micro in ahead:
                        progress.next_batch = position + per_update  # a checkpoint resumes after this update
                        result = _update(run, net, micro, device, autocast)
                        if result is None:  # a non-finite loss or gradient: skipped
                            continue
                        progress.add(result, elapsed=time.time() - started)
                        reporter.update(progress, result["ntokens"], _lr(run), result["grad_norm"],
                                        updates_per_epoch=len(order) // per_update)
                        if progress.stop_reason(cfg):
                            break
                        _save_on_schedule(run)
                        if signals.received():
                            raise Stop()
                valid = evaluate(net, valid_data, cfg, device, autocast)
                if progress.next_batch < len(order):  # the budget ran out mid-epoch: keep the position, so that
                    reporter.epoch(progress, valid, _lr(run), partial=True)  # a larger budget continues right here
                    run.save(f"checkpoint_{progress.epoch}_{progress.update}.pt", LAST, background=True)
                    break
                _end_epoch(run, valid, reporter)
                if signals.received() and not progress.stop_reason(cfg):
                    raise Stop()
        except Stop:
            run.save(LAST)  # synchronous, after the pending write: the process exits next
            log.warning("signal %s: saved checkpoint_last.pt at update %d; exiting so the job can be resumed",
                        signals.hit, progress.update)
            raise SystemExit(75)  # EX_TEMPFAIL: Snakemake's retries restart the job, which resumes
        except BaseException:
            _flush_quietly(run)  # the pending write finishes; the error that stopped the loop is the one raised
            raise
        finally:
            reporter.close()
    run.flush()
    return _finish(run, final, reporter, precision)


def _flush_quietly(run: Run) -> None:
    try:
        run.flush()
    except BaseException as err:
        log.error("a checkpoint write failed too: %s", err)


def rank_batches(data: ParallelData, order: list[np.ndarray], per_update: int, micro_batch_tokens: int,
                 device: torch.device, position: int) -> list[Batch]:
    """This rank's share of the update that starts at batch `position` of the epoch's `order`, collated: merged
    into passes of up to `micro_batch_tokens` padded tokens when set (`merge_batches`), else one per batch in
    their order; pinned when the model is on a GPU, so that `Batch.to` copies them asynchronously. Runs on the
    `Prefetcher` thread."""
    rank, world_size = world()
    batches = order[position:position + per_update][rank::world_size]
    if micro_batch_tokens:
        merged = merge_batches(batches, data.sizes, micro_batch_tokens)
        collated = [replace(collate(data, ids), parts=parts) for ids, parts in merged]
    else:
        collated = [collate(data, ids) for ids in batches]
    return [batch.pin_memory() for batch in collated] if device.type == "cuda" else collated


def _start(spec: dict, cfg: TrainConfig, vocabs: dict[str, Dictionary], save_dir: Path, device,
           precision: Precision) -> Run:
    """The model to train, on vocabularies {source language: …, target language: …}: resumed from
    checkpoint_last.pt when it was made with these settings, else warm-started (`init_from`) or freshly
    initialised."""
    rank, world_size = world()
    save_dir.mkdir(parents=True, exist_ok=True)
    src_vocab, tgt_vocab = vocabs.values()
    arch = {**spec.get("arch", {}), "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}
    model = build(spec["model"], arch).to(device)
    if rank == 0:
        log.info("model %s: %s parameters; %s", spec["model"], f"{count_parameters(model):,}", model.config)
    state, resumed_from = checkpoint.load_resumable(save_dir)
    if state is not None and state.get("settings") != checkpoint.resume_key(spec):
        state = None
        if rank == 0:  # the config changed since these checkpoints: keep them, but do not resume from them
            aside = checkpoint.set_aside(save_dir)
            log.warning("%s: model or training settings changed since its checkpoints; moved them to %s and "
                        "starting afresh", save_dir, aside)
        barrier()
    if spec.get("init_from") and state is None:
        new = checkpoint.warm_start(model, spec["init_from"], vocabs)
        if rank == 0:
            log.info("warm start from %s: every tensor copied; default-initialised new ones: %s", spec["init_from"],
                     ", ".join(new) or "none")
    check_merging(model, cfg)
    scaler = loss_scaler(precision, device, cfg.update_freq * world_size)
    run = Run(spec, cfg, model, _adam(model, cfg), scaler, Progress(), save_dir, rank,
              dictionaries=checkpoint.dictionaries(src_vocab, tgt_vocab),
              languages=dict(zip(("src", "tgt"), vocabs)))
    if state is not None:
        model.load_state_dict(state["model"])
        run.optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        run.progress = Progress.from_dict(state["progress"])
        checkpoint.set_rng_state(state["rng"])
        log.info("resumed from %s: epoch %d, update %d, batch %d of the epoch", resumed_from, run.progress.epoch,
                 run.progress.update, run.progress.next_batch)
    return run


def check_merging(model: torch.nn.Module, cfg: TrainConfig) -> None:
    """Refuse micro_batch_tokens for a model whose loss has a term per pass rather than per token (`accumulate`):
    Dou et al.'s layer diversity (deep, diversity > 0) is a mean over the pass's positions."""
    if cfg.micro_batch_tokens and hasattr(model, "auxiliary_loss") and getattr(model.config, "diversity", 0):
        raise UserError(f"micro_batch_tokens={cfg.micro_batch_tokens}: model {type(model).__name__} with diversity="
                        f"{model.config.diversity} adds a mean over each pass's positions to the loss, which merged "
                        f"batches would change; set micro_batch_tokens: 0")


def _epoch_order(data: ParallelData, cfg: TrainConfig, progress: Progress, per_update: int, data_dir: str) -> list:
    """The epoch's batches in their seeded order, cut to a whole number of updates: every rank takes the same
    number of updates."""
    batches = make_batches(data.src.sizes, data.tgt.sizes, *_batch_limits(cfg, progress.restarted), cfg.seed,
                           skip_longer_than=cfg.skip_longer_than)
    order = epoch_order(batches, cfg.seed, progress.epoch)
    order = order[: len(order) // per_update * per_update]
    if not order:  # else an update-bounded run would loop over empty epochs forever
        raise UserError(f"{data_dir}: an epoch has {len(batches)} batches, fewer than the {per_update} one update "
                        f"takes (update_freq {cfg.update_freq} × {world()[1]} ranks); lower max_tokens or "
                        f"update_freq")
    return order


def _update(run: Run, net, micro_batches, device, autocast) -> dict | None:
    """One optimiser step on the update's batches: the loss sums and the gradient norm, read from the device once;
    None when either is not finite, and the update is skipped (fp16: the scaler halves the loss scale)."""
    progress, optimizer, scaler = run.progress, run.optimizer, run.scaler
    for group in optimizer.param_groups:
        group["lr"] = lr_at(progress.update + 1, run.cfg, run.model.config.d_model, progress.restarted)
    sums = accumulate(net, micro_batches, run.cfg, device, autocast, scaler if scaler.is_enabled() else None)
    norm = _unscale_and_clip(run.model, optimizer, scaler, run.cfg.clip_norm)
    values = torch.stack([torch.as_tensor(sums[k], dtype=torch.float64, device=norm.device) for k in STATS]
                         + [norm.double()]).tolist()  # the update's one host-device sync
    result = dict(zip((*STATS, "grad_norm"), values))
    finite = math.isfinite(result["loss"]) and math.isfinite(result["grad_norm"])
    if finite:
        scaler.step(optimizer)  # fp16: skipped by the scaler itself if unscale_ found an inf; else optimizer.step()
    scaler.update()  # fp16: an overflow halves the scale, 2^14 / update_freq clean updates double it (fairseq)
    optimizer.zero_grad(set_to_none=True)
    if not finite:
        _skip_nonfinite(run, result)
        return None
    return result


def _unscale_and_clip(model, optimizer, scaler, clip_norm: float) -> torch.Tensor:
    """Unscale fp16 gradients (divide by the loss scale), clip them to `clip_norm` if set; returns their total norm
    as a device tensor (inf or nan if the update overflowed or diverged: then `_update` skips the step and what the
    clipping did to the gradients does not matter). DDP ranks hold the same reduced gradients, so they all take the
    same decision."""
    if scaler.is_enabled():
        scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if clip_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), clip_norm, norm)
    return norm


def _skip_nonfinite(run: Run, result: dict) -> None:
    """Count a skipped update; too many in a row end the run, its last checkpoint untouched."""
    progress, limit = run.progress, run.cfg.max_nonfinite_updates
    progress.skipped_updates += 1
    progress.nonfinite_in_a_row += 1
    log.warning("epoch %d, update %d: loss %s, gradient norm %s; update skipped (%d in a row, %d in all)",
                progress.epoch, progress.update + 1, result["loss"], result["grad_norm"], progress.nonfinite_in_a_row,
                progress.skipped_updates)
    if progress.nonfinite_in_a_row > limit:
        last = (f"{LAST} (update {run.saved_update}) is the last good state" if run.saved_update is not None else
                "the newest checkpoint on disk is the last good state")
        raise UserError(f"{run.save_dir}: training diverged: {progress.nonfinite_in_a_row} updates in a row with a "
                        f"non-finite loss or gradient norm after update {progress.update}; {last}. Lower lr, set "
                        f"clip_norm, or use amp: none/bf16 (max_nonfinite_updates: {limit})")


def _save_on_schedule(run: Run) -> None:
    cfg, update = run.cfg, run.progress.update
    if cfg.save_interval_updates and update % cfg.save_interval_updates == 0:
        run.save(f"checkpoint_{run.progress.epoch}_{update}.pt", LAST, background=True)
    elif cfg.save_interval_minutes and time.time() - run.saved_time >= cfg.save_interval_minutes * 60:
        run.save(LAST, background=True)  # a resume point only: which checkpoints are averaged must not depend on
        # the clock


def _end_epoch(run: Run, valid: dict, reporter: Reporter) -> None:
    """Record the finished epoch, judge it for early stopping, start RestartAdam's stage when due, checkpoint."""
    progress, cfg = run.progress, run.cfg
    reporter.epoch(progress, valid, _lr(run), partial=False)
    improved = progress.judge(cfg, valid)
    if cfg.restart_after_epochs and not progress.restarted and progress.epoch >= cfg.restart_after_epochs:
        progress.restarted, progress.restart_epoch = True, progress.epoch
        run.optimizer = _adam(run.model, cfg)  # RestartAdam (MLRF §4.1): fresh moment estimates
        log.info("RestartAdam after epoch %d: fresh Adam moments, lr %g, batches: %s tokens / %s sentences",
                 progress.epoch, cfg.restart_lr, *_batch_limits(cfg, True))
    finished = progress.epoch
    progress.next_epoch()
    run.save(f"checkpoint{finished}.pt", LAST, *([BEST] if improved else []), background=True)


def _finish(run: Run, final: str | None, reporter: Reporter, precision: Precision) -> dict:
    """Say why the run stopped; rank 0 writes the final model (the last or the best epoch's weights) and
    training.json."""
    progress, cfg = run.progress, run.cfg
    progress.stopped_by = progress.stop_reason(cfg)
    if progress.stopped_by == "max_minutes":
        log.warning("stopped by max_minutes (%g) at update %d, epoch %d: short of the run's update/epoch budget",
                    cfg.max_minutes, progress.update, progress.epoch)
    reporter.write_history(progress)
    if run.rank == 0 and final:
        weights, chosen = run.model.state_dict(), "the last update"
        best = run.save_dir / BEST
        if cfg.final_model == "best" and best.exists():
            best_state = checkpoint.load(best)
            weights, chosen = best_state["model"], f"{best.name} (epoch {best_state['progress']['epoch'] - 1})"
        elif cfg.final_model == "best":
            log.warning("final_model=best, but no epoch improved on the validation set: %s gets the last weights",
                        final)
        log.info("%s: the weights of %s", final, chosen)
        checkpoint.save(Path(final), {"model": weights, "model_name": run.spec["model"], "final_from": chosen,
                                      "model_config": run.model.config.to_dict(), "progress": progress.to_dict(),
                                      "dictionaries": run.dictionaries, "languages": run.languages})
        reporter.summary(progress, precision.to_dict())
    barrier()
    return progress.to_dict()


def loss_scaler(precision: Precision, device: torch.device, batches_per_update: int) -> torch.amp.GradScaler:
    """fp16's dynamic loss scaler, for the model's device type (a CUDA scaler on a CPU model would disable itself),
    with fairseq's settings: --fp16-init-scale 128 (torch's default 2^16 overflows a few updates in a row at the
    start) and --fp16-scale-window 2^14 / (GPUs × update_freq) clean updates before the scale doubles. Disabled (every
    call a no-op) for bf16 and fp32, whose range needs no scaling."""
    return torch.amp.GradScaler(device.type, init_scale=2.0**7, enabled=precision.amp == "fp16",
                                growth_interval=max(1, 2**14 // batches_per_update))


def _lr(run: Run) -> float:
    return run.optimizer.param_groups[0]["lr"]


def _adam(model, cfg: TrainConfig, fused: bool | None = None) -> torch.optim.Adam:
    """fairseq 0.12.2's Adam (fairseq/optim/adam.py), whose weight decay is decoupled from the gradient ("based on
    Fixed Weight Decay Regularization in Adam"; its docstring: "corresponds to the AdamW variant"). Per update t,
    with g the gradient, lr the current learning rate and wd the weight decay:
        m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²          (the moments never see wd)
        p ← p − lr·wd·p                                       (`p.add_(p, alpha=-wd * lr)`)
        p ← p − lr·√(1−β2ᵗ)/(1−β1ᵗ) · m/(√v + ε)
    torch.optim.AdamW does the same: p ← p·(1 − lr·wd), with the same lr, on the same p (the moment updates do not
    read p), then the Adam step; torch.optim.Adam(weight_decay=wd) would instead add wd·p to g (coupled L2, scaled
    by Adam's normaliser). Only ε sits elsewhere: torch divides by √v/√(1−β2ᵗ) + ε, fairseq's form amounts to
    ε/√(1−β2ᵗ) (7ε at t = 1 with β2 = 0.98, within 1% of ε after ~200 updates), as it did before weight decay was
    decoupled. Every row that sets weight_decay follows a fairseq recipe (GCA's IWSLT rows, config/study.yaml);
    the t2t, THUMT and MLRF rows train without it. PyTorch's fused kernel on CUDA (one launch for all parameters
    instead of several per tensor), its default (foreach) implementation elsewhere; `fused=True` takes the fused
    path on the CPU too (the tests: GradScaler hands a fused optimizer its inf flag instead of skipping the step)."""
    if fused is None:
        fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps,
                             weight_decay=cfg.weight_decay, fused=fused or None)


def _batch_limits(cfg: TrainConfig, restarted: bool) -> tuple[int | None, int | None]:
    """(max_tokens, max_sentences) of the current stage; RestartAdam's stage may change the batch size."""
    if restarted and (cfg.restart_max_tokens or cfg.restart_max_sentences):
        return cfg.restart_max_tokens, cfg.restart_max_sentences
    return cfg.max_tokens, cfg.max_sentences
