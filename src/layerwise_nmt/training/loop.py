"""Training: one linear loop (nanoGPT's shape) with fairseq's semantics.

- batches of `max_tokens` (and/or `max_sentences`), gradient accumulation over `update_freq` batches;
  gradients are normalised by the number of target tokens of the whole update, across DDP ranks
  (tokens per update = max_tokens × GPUs × update_freq); `micro_batch_tokens` merges an update's batches into
  fewer, larger passes (the same sentences, the same gradient up to float rounding: `loss.accumulate`); the next
  updates' batches are collated on a background thread while the current one computes (`Prefetcher`);
- Adam(0.9, 0.98, 1e-9); learning rate a pure function of the update number (`optim.lr_at`): fairseq's
  inverse_sqrt with linear warmup, or Vaswani et al.'s noam schedule; optional RestartAdam (MLRF §4.1, after
  Denkowski & Neubig 2017): after `restart_after_epochs`, fresh Adam moments, a fixed lr and a new batch size;
- label-smoothed cross-entropy as fairseq computes it (loss.py); gradient clipping;
- stops at max_update / max_epoch / a wall-clock budget / early stopping on validation loss;
- checkpoints every N updates, every M minutes and at each epoch end, written atomically (`checkpoint.py`) by a
  background thread from a CPU copy of the state (the final save on a signal is synchronous), the last K kept;
  `checkpoint_last.pt` holds everything needed to resume bit for bit (model, optimizer, schedule position, RNG,
  data position);
- an update whose loss or gradient norm is not finite is skipped (fp16: with a smaller loss scale); too many in a
  row stop the run with an error, its last checkpoint untouched;
- each update counted as soon as its step returns (`eager_updates`); on a GPU, the host never waits for one: its
  numbers are read once the next one is queued (`deferred_updates`, `deferred.py`), and counted first where a
  checkpoint, a validation or a stop may follow it (`after_update.due`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from .. import UserError
from ..job_specs import TrainSpec
from . import checkpoint, master_weights
from .checkpoint import BEST, LAST
from .compiler import compile_model
from ..data.batching import ParallelData, Prefetcher
from ..data.vocab import Dictionary, load_pair
from .deferred import Pending, on_device, set_lr, step
from .rng import set_rng_state
from .run import Run
from .graphs import for_run as update_graphs, stream_of
from .distributed import Stop, Stopped, StopSignals, barrier, broadcast_object, init_distributed, world
from .distributed import per_rank_update_freq
from .loss import accumulate, evaluate  # accumulate: looked up here at each update, tests replace it
from ..models import UserModel, build
from ..models.transformer import count_parameters
from ..models.user import recorded
from .optim import adam, loss_scaler, lr_at, unscale_and_clip
from .precision import Precision, cuda_kernels, resolve
from .precision_probe import training_workload
from .progress import Progress
from .reporting import Reporter, RunLog, reopen_run_logs
from .config import TrainConfig
from .after_update import count_update, decide, due
from .update_batches import batch_limits, check_merging, epoch_batches, growth_for_run, log_batch_shapes, rank_batches

log = logging.getLogger(__name__)


def train(
    spec: TrainSpec | dict, data_dir: str, src: str, tgt: str, save_dir: str, final: str | None = None, search=None
) -> dict:
    """Train `spec` (a TrainSpec, or its fields {model: name, arch: {...}, train: {...}}) on data_dir (bin-joint
    or bin-separate); returns the final progress. Resumes from save_dir's checkpoint_last.pt when it was made with
    the same settings. Stopped by a signal: checkpoints and raises `Stopped`. Rank 0 appends its log to
    save_dir/train.log (`RunLog`). `search`: the beam search validation BLEU decodes with
    (inference.decode.validation_search), needed only for that."""
    with RunLog(Path(save_dir) if int(os.environ.get("RANK", "0")) == 0 else None):
        return _train(TrainSpec.of(spec), data_dir, src, tgt, save_dir, final, search)


def _train(spec: TrainSpec, data_dir: str, src: str, tgt: str, save_dir: str, final: str | None, search) -> dict:
    device = init_distributed()
    rank, world_size = world()
    cfg = TrainConfig.from_dict(spec.train)
    cfg = replace(cfg, update_freq=per_rank_update_freq(cfg.update_freq))
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    train_data, valid_data = ParallelData(data_dir, "train", src, tgt), ParallelData(data_dir, "valid", src, tgt)
    run = start_run(
        spec, cfg, dict(zip((src, tgt), load_pair(data_dir, src, tgt), strict=True)), Path(save_dir), device
    )
    cfg = run.cfg  # with `auto`s decided for this run and device (bucket_growth_factor)
    run.trained_lengths = {
        side: int(data.sizes.max(initial=0)) for side, data in (("src", train_data.src), ("tgt", train_data.tgt))
    }
    precision, progress, autocast = run.precision, run.progress, lambda: precision.autocast(device)
    net = master_weights.compute_model(run.model, precision, world_size > 1)  # bf16-weights: a bf16 copy of it
    net = compile_model(net, device) if cfg.compile else net
    run.model.train()
    per_update = world_size * cfg.update_freq  # batches per update, over all ranks
    reporter = Reporter(run.save_dir if rank == 0 else None, cfg)
    log_batch_shapes(train_data, cfg, per_update)
    started = time.time() - progress.elapsed
    validate = partial(evaluate, net, valid_data, cfg, device, autocast, search)  # no RNG draw, no update
    updates = deferred_updates if on_device(run.optimizer) else eager_updates
    with StopSignals(device) as signals, cuda_kernels(device, cfg.tf32):
        try:
            while not progress.stop_reason(cfg):
                order, shapes = epoch_batches(train_data, cfg, progress, per_update, data_dir)
                batches = partial(
                    rank_batches, train_data, order, per_update, cfg.micro_batch_tokens, device, shapes=shapes
                )
                epoch = Epoch(
                    run,
                    step=partial(update_step, run, net, device=device, autocast=autocast),
                    count=partial(count_update, run, reporter=reporter, updates_per_epoch=len(order) // per_update),
                    decide=partial(decide, run, validate, reporter, len(order)),
                    signals=signals,
                    started=started,
                    per_update=per_update,
                    batches=len(order),
                )
                with Prefetcher(batches, range(progress.next_batch, len(order), per_update)) as ahead:
                    updates(epoch, ahead)
                valid = validate()
                if progress.next_batch < len(order):  # the budget ran out mid-epoch: keep the position, so that
                    reporter.epoch(progress, valid, run.lr, partial=True)  # a larger budget continues right here
                    run.save(f"checkpoint_{progress.epoch}_{progress.update}.pt", LAST, background=True)
                    break
                _end_epoch(run, valid, reporter)
                if signals.received() and not progress.stop_reason(cfg):
                    raise Stop()
        except Stop:
            run.save(LAST)  # synchronous, after the pending write: the process exits next
            assert signals.hit is not None  # a Stop follows a signal received
            stopped = Stopped(signals.hit, progress.update, run.save_dir)
            if rank == 0:
                log.warning("%s", stopped.line)
            raise stopped from None
        except BaseException:
            _flush_quietly(run)  # the pending write finishes; the error that stopped the loop is the one raised
            raise
        finally:
            reporter.close()
    run.flush()
    return _finish(run, final, reporter, precision)


@dataclass(frozen=True)
class Epoch:
    """What an epoch's updates call: the update's step, counting it into the run's progress (whether it was taken),
    deciding what follows it (True: the run stops), and the signals every rank checks at every update."""

    run: Run
    step: Callable[..., Pending]
    count: Callable[[Pending, float], bool]
    decide: Callable[[bool], bool]
    signals: StopSignals
    started: float  # time.time() at the run's update 0: the time of the jobs it resumed from counts too
    per_update: int  # batches per update, over all ranks
    batches: int  # the epoch's


def eager_updates(epoch: Epoch, ahead) -> None:
    """The epoch's updates, each counted as soon as its step returns: where the optimizer's numbers are on the host
    then (the CPU's foreach Adam), nothing is gained by reading them later."""
    for position, micro in ahead:
        epoch.run.progress.next_batch = position + epoch.per_update  # a checkpoint resumes after this update
        taken = epoch.count(epoch.step(micro), time.time() - epoch.started)
        signalled = epoch.signals.received()  # on every rank: its all-reduce is a collective they all make
        if taken and epoch.decide(signalled):
            return


def deferred_updates(epoch: Epoch, ahead) -> None:
    """The epoch's updates with the host an update ahead of the device (fused Adam: CUDA, emulated CUDA graphs;
    deferred.py): each update's numbers are read once the next one is queued, so that the device never waits; but
    where a checkpoint, a validation or a stop may follow an update (`after_update.due`), it is counted before the
    next one moves the weights those would see. The epoch's last update is counted before the epoch ends."""
    run = epoch.run
    for position, micro in ahead:
        signalled, elapsed, before = epoch.signals.received(), time.time() - epoch.started, run.pending
        if before is not None and due(run, elapsed, signalled, epoch.batches):
            run.pending = None
            if epoch.count(before, elapsed) and epoch.decide(signalled):
                return
            before = None
        run.progress.next_batch = position + epoch.per_update
        run.pending = epoch.step(micro, before=before)
        if before is not None:
            epoch.count(before, elapsed)
    last, run.pending = run.pending, None
    if last is not None and epoch.count(last, time.time() - epoch.started):
        epoch.decide(epoch.signals.received())  # to stop or not, what follows is the same


def _flush_quietly(run: Run) -> None:
    try:
        run.flush()
    except BaseException as err:
        log.error("a checkpoint write failed too: %s", err)


def start_run(
    spec: TrainSpec | dict,
    cfg: TrainConfig,
    vocabs: dict[str, Dictionary],
    save_dir: Path,
    device,
    precision: Precision | None = None,
) -> Run:
    """The model to train, on vocabularies {source language: …, target language: …}: resumed from
    checkpoint_last.pt when it was made with these settings, else warm-started (`init_from`) or freshly
    initialised; and the precision it trains in: `precision` where the caller decided it, else cfg.amp's
    (`amp: auto` on a CPU: timed on this model's updates)."""
    rank, world_size = world()
    spec = TrainSpec.of(spec)
    save_dir.mkdir(parents=True, exist_ok=True)
    src_vocab, tgt_vocab = vocabs.values()
    arch = {**spec.arch, "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}
    model = build(spec.model, arch, UserModel.from_spec(spec)).to(device)
    if rank == 0:
        log.info("model %s: %s parameters; %s", spec.model, f"{count_parameters(model):,}", model.config)
    state, resumed_from = checkpoint.load_resumable(save_dir)
    why = state is not None and checkpoint.not_to_resume(state, spec, cfg, save_dir)
    if why:
        state = None
        if rank == 0:  # keep them, but do not resume from them
            aside = checkpoint.set_aside(save_dir)
            reopen_run_logs()  # the new run's log starts in the new directory
            log.warning("%s: %s; moved them to %s and starting afresh from update 0", save_dir, why, aside)
        barrier()
    if spec.init_from and state is None:
        new = checkpoint.warm_start(model, spec.init_from, vocabs)
        if rank == 0:
            log.info(
                "warm start from %s: every tensor copied; default-initialised new ones: %s",
                spec.init_from,
                ", ".join(new) or "none",
            )
    growth, why_growth = growth_for_run(cfg, model, device, world_size, state)
    cfg = replace(cfg, bucket_growth_factor=growth)
    if rank == 0:
        log.info("bucket_growth_factor: %g (%s)", growth, why_growth)
    check_merging(model, cfg)
    # every rank trains in rank 0's choice: a probe on another machine may measure otherwise
    precision = precision or broadcast_object(
        checkpoint.recorded_precision(state, cfg, device)
        or resolve(cfg.amp, device, training_workload(model, cfg, device), cfg.tf32)
    )
    if rank == 0:
        log.info("precision: %s", precision)
    scaler = loss_scaler(precision, device, cfg.update_freq * world_size)
    run = Run(
        spec,
        cfg,
        model,
        new_optimizer(model, cfg),
        scaler,
        Progress(),
        save_dir,
        rank,
        precision,
        dictionaries=checkpoint.dictionaries(src_vocab, tgt_vocab),
        languages=dict(zip(("src", "tgt"), vocabs, strict=True)),
        lr=cfg.lr,
    )
    run.graphs = update_graphs(cfg.cuda_graphs, device, precision.amp, cfg.decided_growth() > 0, world_size)
    if state is not None:
        assert resumed_from is not None  # found together
        try:
            model.load_state_dict(state["model"])
            run.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as err:  # the model's code changed, not its settings
            raise UserError(
                f"{resumed_from}: not resumed: its tensors do not fit model {spec.model} as its code builds it "
                f"now ({checkpoint.misfit(err)}); to train it from update 0, move {save_dir} aside"
            ) from None
        scaler.load_state_dict(state["scaler"])
        run.progress = Progress.from_dict(state["progress"])
        set_rng_state(state["rng"])
        run.lr = float(run.optimizer.param_groups[0]["lr"])  # as the last update left it
        log.info(
            "resumed from %s: epoch %d, update %d, batch %d of the epoch",
            resumed_from,
            run.progress.epoch,
            run.progress.update,
            run.progress.next_batch,
        )
    return run


def new_optimizer(model, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam; fused (CUDA's update path, its skip and lr on the device) on CUDA, and wherever graphs are emulated."""
    return adam(model, cfg, fused=True if cfg.cuda_graphs == "emulated" else None)


def update_step(run: Run, net, micro_batches, device, autocast, before: Pending | None = None) -> Pending:
    """One optimiser step on the update's batches, its numbers left on the device (`deferred`): skipped there when
    its loss or gradient norm is not finite (fp16: the scaler halves the loss scale). `before`: the update before
    it, not yet counted, whose skip would give this one its learning rate."""
    progress, optimizer, scaler = run.progress, run.optimizer, run.scaler
    lr = partial(lr_at, cfg=run.cfg, d_model=run.model.config.d_model, restarted=progress.restarted)

    def body(batches) -> Pending:  # what a CUDA graph of the update holds (`graphs`): nothing read on the host
        sums = accumulate(net, batches, run.cfg, device, autocast, scaler if scaler.is_enabled() else None)
        master_weights.to_masters(net, run.model, optimizer, run.precision)  # bf16-weights: grads to fp32 masters
        norm = unscale_and_clip(run.model, optimizer, scaler, run.cfg.clip_norm)
        return step(optimizer, scaler, sums, norm)

    with stream_of(run.graphs):
        set_lr(optimizer, lr(progress.update + 1 + (before is not None)), lr(progress.update + 1), before)
        if run.graphs is None:
            return body(micro_batches)
        return run.graphs.update(micro_batches, body, optimizer, lambda: _clear_grads(net, run.model))


def _clear_grads(*models: torch.nn.Module) -> None:
    for model in models:
        model.zero_grad(set_to_none=True)


def _end_epoch(run: Run, valid: dict, reporter: Reporter) -> None:
    """Record the finished epoch, judge it for early stopping, start RestartAdam's stage when due, checkpoint."""
    progress, cfg = run.progress, run.cfg
    reporter.epoch(progress, valid, run.lr, partial=False)
    improved = progress.judge(cfg, valid)
    if cfg.restart_after_epochs and not progress.restarted and progress.epoch >= cfg.restart_after_epochs:
        progress.restarted, progress.restart_epoch = True, progress.epoch
        run.optimizer = new_optimizer(run.model, cfg)  # RestartAdam (MLRF §4.1): fresh moment estimates
        log.info(
            "RestartAdam after epoch %d: fresh Adam moments, lr %g, batches: %s tokens / %s sentences",
            progress.epoch,
            cfg.restart_lr,
            *batch_limits(cfg, True),
        )
    finished = progress.epoch
    progress.next_epoch()
    run.save(f"checkpoint{finished}.pt", LAST, *([BEST] if improved else []), background=True)


def _finish(run: Run, final: str | None, reporter: Reporter, precision: Precision) -> dict:
    """Say why the run stopped; rank 0 writes the final model (the last or the best epoch's weights) and
    training.json."""
    progress, cfg = run.progress, run.cfg
    progress.stopped_by = progress.stop_reason(cfg)
    if progress.stopped_by == "max_minutes":
        log.warning(
            "stopped by max_minutes (%g) at update %d, epoch %d: short of the run's update/epoch budget",
            cfg.max_minutes,
            progress.update,
            progress.epoch,
        )
    reporter.write_history(progress)
    if run.graphs is not None:
        log.info("%s", run.graphs.summary())
    if run.rank == 0 and final:
        weights, chosen = run.model.state_dict(), "the last update"
        best = run.save_dir / BEST
        if cfg.final_model == "best" and best.exists():
            best_state = checkpoint.load(best)
            weights, chosen = best_state["model"], f"{best.name} (epoch {best_state['progress']['epoch'] - 1})"
        elif cfg.final_model == "best":
            log.warning(
                "final_model=best, but no epoch improved on the validation set: %s gets the last weights", final
            )
        log.info("%s: the weights of %s", final, chosen)
        checkpoint.save(
            Path(final),
            {
                "model": weights,
                "model_name": run.spec.model,
                **recorded(run.spec),
                "final_from": chosen,
                "model_config": run.model.config.to_dict(),
                "progress": progress.to_dict(),
                "precision": precision.to_dict(),
                "dictionaries": run.dictionaries,
                "languages": run.languages,
                "trained_lengths": run.trained_lengths,
            },
        )
        reporter.summary(progress, precision.to_dict())
    barrier()
    return progress.to_dict()
