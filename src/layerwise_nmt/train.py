"""Training: one linear loop (nanoGPT's shape) with fairseq's semantics.

- batches of `max_tokens` (and/or `max_sentences`), gradient accumulation over `update_freq` batches;
  gradients are normalised by the number of target tokens of the whole update, across DDP ranks
  (tokens per update = max_tokens × GPUs × update_freq);
- Adam(0.9, 0.98, 1e-9); learning rate a pure function of the update number (`lr_at`): fairseq's inverse_sqrt
  with linear warmup, or Vaswani et al.'s noam schedule; optional RestartAdam (MLRF §4.1, after Denkowski & Neubig
  2017): after `restart_after_epochs`, fresh Adam moments, a fixed lr and a new batch size;
- label-smoothed cross-entropy as fairseq computes it; gradient clipping;
- stops at max_update / max_epoch / a wall-clock budget / early stopping on validation loss;
- checkpoints every N updates, every M minutes and at each epoch end, written atomically (`checkpoint.py`), the
  last K kept; `checkpoint_last.pt` holds everything needed to resume bit for bit (model, optimizer, schedule
  position, RNG, data position);
- an update whose loss or gradient norm is not finite is skipped (fp16: with a smaller loss scale); too many in a
  row stop the run with an error, its last checkpoint untouched.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import random
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import UserError, checkpoint
from .checkpoint import BEST, LAST, PREVIOUS
from .data.batching import ParallelData, collate, epoch_order, make_batches
from .data.io import atomic_path
from .data.vocab import Dictionary, load_pair
from .models import build
from .models.transformer import count_parameters
from .settings import Settings

log = logging.getLogger(__name__)


@dataclass
class TrainConfig(Settings):
    kind = "training setting"

    max_tokens: int | None = 4096
    max_sentences: int | None = None
    update_freq: int = 1
    skip_longer_than: int = 0  # leave out training pairs with more subword units on either side (0 = keep all)
    lr: float = 5e-4  # peak lr (inverse_sqrt) or the scale in front of d^-0.5 (noam)
    lr_scheduler: str = "inverse_sqrt"  # inverse_sqrt | noam | polynomial_decay | cosine | fixed
    total_num_update: int = 0  # polynomial_decay: lr reaches end_learning_rate here (fairseq's name)
    end_learning_rate: float = 0.0
    min_lr: float = 0.0  # cosine: the floor of each period (fairseq's --min-lr)
    lr_period_updates: int = 0  # cosine: period after warm-up (fairseq's name; Wu et al. 2019: 20,000)
    warmup_updates: int = 4000
    warmup_init_lr: float = 1e-7
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping
    label_smoothing: float = 0.1
    max_update: int = 0  # 0 = no limit
    max_epoch: int = 0
    max_minutes: float = 0.0  # wall-clock training budget (resumes keep counting)
    patience: int = 0  # epochs without a better validation score before stopping; 0 = off
    early_stop_metric: str = "loss"  # loss | bleu (beam search on the validation set each epoch: slower)
    # last | best: which weights become model.pt. best = the epoch early stopping judged best (fairseq's
    # checkpoint_best.pt), so that a run stopped by patience decodes the model it selected, not the one after it
    final_model: str = "last"
    valid_beam: int = 1  # beam size for validation BLEU
    restart_after_epochs: int = 0  # RestartAdam: 0 = off
    restart_lr: float = 5e-5
    restart_max_sentences: int | None = None
    restart_max_tokens: int | None = None
    restart_epochs: int = 0
    save_interval_updates: int = 0  # 0 = only at epoch ends
    # also refresh checkpoint_last.pt (the resume point, not an averaging candidate) after this many minutes, so
    # that a hard kill (node failure, OOM, SIGKILL after SLURM's grace period) loses at most this; 0 = off
    save_interval_minutes: float = 30.0
    keep_interval_updates: int = 10
    keep_last_epochs: int = 10
    amp: str = "none"  # none | bf16 | fp16 (fp16 on CUDA only)
    # updates in a row with a non-finite loss or gradient norm that are skipped before the run stops with an error
    max_nonfinite_updates: int = 8
    log_interval: int = 50
    seed: int = 1

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
        if self.amp not in ("none", "bf16", "fp16"):
            raise UserError(f"amp={self.amp!r}; expected none, bf16 or fp16")
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
# Distributed helpers (torchrun sets RANK / WORLD_SIZE / LOCAL_RANK)


def world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(values: list[float]) -> list[float]:
    if world()[1] == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor)
    return tensor.tolist()


def init_distributed() -> torch.device:
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------------------------
# One update


def accumulate(model, micro_batches, cfg: TrainConfig, device, autocast) -> dict:
    """Forward/backward over the update's batches; leaves gradients normalised by the update's target tokens
    (all ranks): grad = Σ_ranks Σ_batches ∇loss_sum / ntokens_total, the same as one process with the union."""
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    inner = model.module if ddp else model
    loss_sum = nll_sum = correct = ntokens = 0.0
    for i, batch in enumerate(micro_batches):
        batch = batch.to(device)
        sync = nullcontext() if (not ddp or i == len(micro_batches) - 1) else model.no_sync()
        with sync:
            with autocast():
                logits = model(batch.src, batch.prev)
            loss, nll, ok = smoothed_loss(logits, batch.tgt, cfg.label_smoothing, inner.config.pad)
            extra = getattr(inner, "auxiliary_loss", None)  # a per-token term the model asks for (Dou's −λ·L_div)
            (loss if extra is None else loss + extra * batch.ntokens).backward()
        loss_sum, nll_sum, correct, ntokens = (loss_sum + loss.item(), nll_sum + nll.item(),
                                               correct + ok.item(), ntokens + batch.ntokens)
    loss_sum, nll_sum, correct, ntokens = all_reduce_sum([loss_sum, nll_sum, correct, ntokens])
    scale = world()[1] / max(ntokens, 1.0)  # DDP averaged over ranks; undo that, then divide by all tokens
    for p in inner.parameters():
        if p.grad is not None:
            p.grad.mul_(scale)
    return {"loss": loss_sum, "nll": nll_sum, "correct": correct, "ntokens": ntokens}


@torch.no_grad()
def evaluate(model, data: ParallelData, cfg: TrainConfig, device, autocast) -> dict:
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    inner.eval()
    totals = np.zeros(4)
    for ids in make_batches(data.src.sizes, data.tgt.sizes, cfg.max_tokens or 4096, None, cfg.seed):
        batch = collate(data, ids).to(device)
        with autocast():
            logits = inner(batch.src, batch.prev)
        loss, nll, ok = smoothed_loss(logits, batch.tgt, cfg.label_smoothing, inner.config.pad)
        totals += [loss.item(), nll.item(), ok.item(), batch.ntokens]
    loss, nll, correct, ntokens = totals
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
# Checkpoints


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Stop(Exception):
    """Raised inside the loop by a SIGTERM/SIGUSR1 (preemption): checkpoint, then exit non-zero."""


# ---------------------------------------------------------------------------------------------------------------


def train(spec: dict, data_dir: str, src: str, tgt: str, save_dir: str, final: str | None = None) -> dict:
    """Train spec = {model: name, arch: {...}, train: {...}} on data_dir (bin-joint or bin-separate)."""
    device = init_distributed()
    rank, world_size = world()
    cfg = TrainConfig.from_dict(spec.get("train", {}))
    if world_size > 1:  # update_freq is configured for one GPU: N ranks each accumulate 1/N of it
        per_rank = max(1, math.ceil(cfg.update_freq / world_size))
        if per_rank * world_size != cfg.update_freq and rank == 0:
            log.warning("update_freq %d is not a multiple of %d ranks: %d per rank, %d batches per update",
                        cfg.update_freq, world_size, per_rank, per_rank * world_size)
        cfg = replace(cfg, update_freq=per_rank)
        if rank == 0:
            log.info("data-parallel: %d ranks (%s), %d batches per rank per update", world_size,
                     dist.get_backend(), per_rank)
    save_dir_path = Path(save_dir)
    save_dir_path.mkdir(parents=True, exist_ok=True)

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    train_data = ParallelData(data_dir, "train", src, tgt)
    valid_data = ParallelData(data_dir, "valid", src, tgt)
    src_vocab, tgt_vocab = load_pair(data_dir, src, tgt)
    arch = {**spec.get("arch", {}), "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}
    model = build(spec["model"], arch).to(device)
    if rank == 0:
        log.info("model %s: %s parameters; %s", spec["model"], f"{count_parameters(model):,}", model.config)
    settings = resume_key(spec)
    state, resumed_from = checkpoint.load_resumable(save_dir_path)
    if state is not None and state.get("settings") != settings:
        state = None
        if rank == 0:  # the config changed since these checkpoints: keep them, but do not resume from them
            aside = set_aside(save_dir_path)
            log.warning("%s: model or training settings changed since its checkpoints; moved them to %s and "
                        "starting afresh", save_dir_path, aside)
        if world_size > 1:
            dist.barrier()
    if spec.get("init_from") and state is None:
        new = warm_start(model, spec["init_from"], {src: src_vocab, tgt: tgt_vocab})
        if rank == 0:
            log.info("warm start from %s: every tensor copied; default-initialised new ones: %s", spec["init_from"],
                     ", ".join(new) or "none")
    optimizer = _adam(model, cfg)
    use_amp = cfg.amp != "none" and (cfg.amp == "bf16" or device.type == "cuda")
    if cfg.amp == "fp16" and device.type != "cuda":
        log.warning("amp=fp16 needs a GPU; training in fp32 (amp=bf16 works on this CPU)")
    dtype = torch.bfloat16 if cfg.amp == "bf16" else torch.float16
    # fairseq's --fp16-init-scale 128: torch's default 2^16 overflows a few updates in a row at the start
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**7, enabled=cfg.amp == "fp16" and device.type == "cuda")
    autocast = lambda: torch.autocast(device.type, dtype=dtype, enabled=use_amp)  # noqa: E731

    progress = {"update": 0, "epoch": 1, "next_batch": 0, "restarted": False, "elapsed": 0.0,
                "best_valid": -math.inf, "bad_epochs": 0, "history": [], "early_stopped": False,
                "skipped_updates": 0, "nonfinite_in_a_row": 0}
    if state is not None:  # resume: checkpoint_last.pt, made with these settings
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        progress = state["progress"]
        set_rng_state(state["rng"])
        progress.setdefault("skipped_updates", 0)
        progress.setdefault("nonfinite_in_a_row", 0)
        log.info("resumed from %s: epoch %d, update %d, batch %d of the epoch", resumed_from,
                 progress["epoch"], progress["update"], progress["next_batch"])
    state = None  # its tensors are in the model and optimizer now
    net = torch.nn.parallel.DistributedDataParallel(model) if world_size > 1 else model
    model.train()

    def snapshot() -> dict:
        return {"model": model.state_dict(), "model_name": spec["model"], "model_config": model.config.to_dict(),
                "settings": settings,
                "train_config": asdict(cfg), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "progress": progress, "rng": rng_state()}

    saved = {"time": time.time(), "update": None}  # the newest checkpoint_last.pt of this process

    def save(*names: str) -> None:
        if rank != 0:
            return
        state = snapshot()
        weights_only = {k: v for k, v in state.items() if k not in ("optimizer", "scaler", "rng")}
        for name in names:  # only checkpoint_last.pt (or its predecessor) is resumed from; the rest are averaged
            if name == LAST:
                checkpoint.save(save_dir_path / LAST, state, previous=save_dir_path / PREVIOUS)
            else:
                checkpoint.save(save_dir_path / name, weights_only)
        checkpoint.prune(save_dir_path, "update", cfg.keep_interval_updates)
        checkpoint.prune(save_dir_path, "epoch", cfg.keep_last_epochs)
        saved.update(time=time.time(), update=progress["update"])

    stop_signal = {"hit": None}

    def on_signal(signum, frame):
        stop_signal["hit"] = signum

    def stopping() -> bool:
        """Whether any rank got the signal: ranks must stop after the same update, or the others would wait in
        the next all-reduce forever."""
        if world_size == 1:
            return stop_signal["hit"] is not None
        flag = torch.tensor([0 if stop_signal["hit"] is None else int(stop_signal["hit"])], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        stop_signal["hit"] = int(flag.item()) or None
        return stop_signal["hit"] is not None

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGUSR1)}
    started, window = time.time() - progress["elapsed"], {"tokens": 0, "time": time.time()}
    board = Board(save_dir_path.parent / "tensorboard" if rank == 0 else None)
    try:
        while not _stop_reason(progress, cfg):
            batches = make_batches(train_data.src.sizes, train_data.tgt.sizes,
                                   *_batch_limits(cfg, progress["restarted"]), cfg.seed,
                                   skip_longer_than=cfg.skip_longer_than)
            order = epoch_order(batches, cfg.seed, progress["epoch"])
            per_update = world_size * cfg.update_freq
            order = order[: len(order) // per_update * per_update]  # every rank takes the same number of updates
            if not order:  # else an update-bounded run would loop over empty epochs forever
                raise UserError(f"{data_dir}: an epoch has {len(batches)} batches, fewer than the {per_update} "
                                f"one update takes (update_freq {cfg.update_freq} × {world_size} ranks); lower "
                                f"max_tokens or update_freq")
            stats = np.asarray(progress.setdefault("epoch_stats", [0.0] * 4))
            for position in range(progress["next_batch"], len(order), per_update):
                group = order[position:position + per_update]
                micro = [collate(train_data, ids) for ids in group[rank::world_size]]
                update = progress["update"] + 1
                for param_group in optimizer.param_groups:
                    param_group["lr"] = lr_at(update, cfg, model.config.d_model, progress["restarted"])
                result = accumulate(net, micro, cfg, device, autocast)
                grad_norm = _unscale_and_clip(model, optimizer, scaler, cfg.clip_norm)
                progress["next_batch"] = position + per_update
                if not (math.isfinite(result["loss"]) and math.isfinite(grad_norm)):
                    optimizer.zero_grad(set_to_none=True)
                    scaler.update()  # fp16: a smaller loss scale for the next update
                    _skip_nonfinite(progress, cfg, result["loss"], grad_norm, save_dir_path, saved["update"])
                    continue
                progress["nonfinite_in_a_row"] = 0
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                progress["update"] = update
                progress["elapsed"] = time.time() - started
                stats += [result["loss"], result["nll"], result["correct"], result["ntokens"]]
                progress["epoch_stats"] = stats.tolist()
                window["tokens"] += result["ntokens"]
                window["grad_norm"] = grad_norm
                if rank == 0 and update % cfg.log_interval == 0:
                    _log_progress(progress, cfg, stats, window, len(order) // per_update, optimizer, board)
                if _stop_reason(progress, cfg):
                    break
                if cfg.save_interval_updates and update % cfg.save_interval_updates == 0:
                    save(f"checkpoint_{progress['epoch']}_{update}.pt", LAST)
                elif cfg.save_interval_minutes and time.time() - saved["time"] >= cfg.save_interval_minutes * 60:
                    save(LAST)  # a resume point only: which checkpoints are averaged must not depend on the clock
                if stopping():
                    raise Stop()
            valid = evaluate(net, valid_data, cfg, device, autocast)
            if progress["next_batch"] < len(order):  # the budget ran out mid-epoch: keep the position, so that
                _record(progress, stats, valid, optimizer, board, partial=True)  # a larger budget continues exactly here
                save(f"checkpoint_{progress['epoch']}_{progress['update']}.pt", LAST)
                break
            _record(progress, stats, valid, optimizer, board, partial=False)
            improved = _early_stopping(progress, cfg, valid)
            if _should_restart(progress, cfg):
                progress["restarted"], progress["restart_epoch"] = True, progress["epoch"]
                optimizer = _adam(model, cfg)  # RestartAdam: fresh moment estimates
                log.info("RestartAdam after epoch %d: fresh Adam moments, lr %g, batches: %s tokens / %s sentences",
                         progress["epoch"], cfg.restart_lr, *_batch_limits(cfg, True))
            finished = progress["epoch"]
            progress["epoch"], progress["next_batch"], progress["epoch_stats"] = finished + 1, 0, [0.0] * 4
            save(f"checkpoint{finished}.pt", LAST, *([BEST] if improved else []))
            if rank == 0:
                _write_history(save_dir_path.parent / "metrics.csv", progress["history"])
            if stopping() and not _stop_reason(progress, cfg):
                raise Stop()
        if rank == 0:
            _write_history(save_dir_path.parent / "metrics.csv", progress["history"])
    except Stop:
        save(LAST)
        log.warning("signal %s: saved checkpoint_last.pt at update %d; exiting so the job can be resumed",
                    stop_signal["hit"], progress["update"])
        raise SystemExit(75)  # EX_TEMPFAIL: Snakemake's retries restart the job, which resumes
    finally:
        board.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    progress["stopped_by"] = _stop_reason(progress, cfg)
    if progress["stopped_by"] == "max_minutes":
        log.warning("stopped by max_minutes (%g) at update %d, epoch %d: short of the run's update/epoch budget",
                    cfg.max_minutes, progress["update"], progress["epoch"])
    if rank == 0 and final:
        weights, chosen = model.state_dict(), "the last update"
        best = save_dir_path / BEST
        if cfg.final_model == "best" and best.exists():
            best_state = checkpoint.load(best)
            weights, chosen = best_state["model"], f"{best.name} (epoch {best_state['progress']['epoch'] - 1})"
        elif cfg.final_model == "best":
            log.warning("final_model=best, but no epoch improved on the validation set: %s gets the last weights",
                        final)
        log.info("%s: the weights of %s", final, chosen)
        checkpoint.save(Path(final), {"model": weights, "model_name": spec["model"], "final_from": chosen,
                                      "model_config": model.config.to_dict(), "progress": progress})
        _write_summary(save_dir_path.parent / "training.json", progress, cfg)
    if dist.is_initialized():
        dist.barrier()
    return progress


def _unscale_and_clip(model, optimizer, scaler, clip_norm: float) -> float:
    """Unscale fp16 gradients, clip them to `clip_norm` if set; returns their total norm (inf or nan if the update
    overflowed or diverged). DDP ranks hold the same reduced gradients, so they all take the same decision."""
    scaler.unscale_(optimizer)  # a no-op unless fp16
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if clip_norm > 0 and torch.isfinite(norm):
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), clip_norm, norm)
    return float(norm)


def _skip_nonfinite(progress: dict, cfg: TrainConfig, loss: float, grad_norm: float, save_dir: Path,
                    saved_update: int | None) -> None:
    """Count a skipped update; too many in a row end the run, its last checkpoint untouched."""
    progress["skipped_updates"] += 1
    progress["nonfinite_in_a_row"] += 1
    log.warning("epoch %d, update %d: loss %s, gradient norm %s; update skipped (%d in a row, %d in all)",
                progress["epoch"], progress["update"] + 1, loss, grad_norm, progress["nonfinite_in_a_row"],
                progress["skipped_updates"])
    if progress["nonfinite_in_a_row"] > cfg.max_nonfinite_updates:
        last = (f"{LAST} (update {saved_update}) is the last good state" if saved_update is not None else
                "the newest checkpoint on disk is the last good state")
        raise UserError(f"{save_dir}: training diverged: {progress['nonfinite_in_a_row']} updates in a row with a "
                        f"non-finite loss or gradient norm after update {progress['update']}; {last}. Lower lr, "
                        f"set clip_norm, or use amp: none/bf16 (max_nonfinite_updates: {cfg.max_nonfinite_updates})")


def _adam(model, cfg: TrainConfig) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps,
                            weight_decay=cfg.weight_decay)


def _batch_limits(cfg: TrainConfig, restarted: bool) -> tuple[int | None, int | None]:
    """(max_tokens, max_sentences) of the current stage; RestartAdam's stage may change the batch size."""
    if restarted and (cfg.restart_max_tokens or cfg.restart_max_sentences):
        return cfg.restart_max_tokens, cfg.restart_max_sentences
    return cfg.max_tokens, cfg.max_sentences


def _should_restart(progress: dict, cfg: TrainConfig) -> bool:
    return bool(cfg.restart_after_epochs) and not progress["restarted"] and progress["epoch"] >= cfg.restart_after_epochs


# Settings a run may change and still resume its checkpoints: the budget and bookkeeping, not the training itself.
RESUMABLE_CHANGES = ("max_update", "max_epoch", "max_minutes", "patience", "log_interval", "keep_last_epochs",
                     "keep_interval_updates", "save_interval_updates", "save_interval_minutes", "final_model",
                     "max_nonfinite_updates")


def resume_key(spec: dict) -> dict:
    """What must match for a checkpoint to be resumed: model, architecture, training (budget aside), warm start."""
    train = {k: v for k, v in spec.get("train", {}).items() if k not in RESUMABLE_CHANGES}
    return {"model": spec["model"], "arch": spec.get("arch", {}), "train": train, "init_from": spec.get("init_from")}


def set_aside(save_dir: Path) -> Path:
    """Rename a checkpoint directory to the first free <name>.superseded-<n> and recreate it empty."""
    n = 1
    while (aside := save_dir.with_name(f"{save_dir.name}.superseded-{n}")).exists():
        n += 1
    save_dir.rename(aside)
    save_dir.mkdir(parents=True)
    return aside


# settings that change what a tensor means without changing its shape: a warm start needs them equal
MEANING = ("sinusoid", "norm", "scale_embedding", "position_embeddings", "pad", "eos")


def warm_start(model: torch.nn.Module, path: str, vocabularies: dict[str, Dictionary] | None = None) -> list[str]:
    """Continued learning (GCA §3.3; Dou et al. §4): copy every tensor of a trained model into `model`, whose extra
    parameters keep their default initialisation. Optimizer and schedule start afresh. Returns the new names.
    vocabularies: the task's, by language; a model with dict.<lang>.txt beside it (trained elsewhere, e.g. imported
    from fairseq) must have been trained with the same ones."""
    state = checkpoint.load(path)
    trained, theirs = state["model"], state.get("model_config", {})
    for key in MEANING:
        if key in theirs and theirs[key] != getattr(model.config, key):
            raise UserError(f"{path}: trained with {key}={theirs[key]!r}, but this experiment's arch has "
                            f"{key}={getattr(model.config, key)!r}; set arch: {{{key}: {theirs[key]}}} to continue "
                            f"from it")
    for lang, ours in (vocabularies or {}).items():
        beside = Path(path).parent / f"dict.{lang}.txt"
        other = Dictionary.load(beside).symbols if beside.exists() else ours.symbols
        if other != ours.symbols:
            i = next(i for i, (a, b) in enumerate(zip(other + [None], ours.symbols + [None])) if a != b)
            raise UserError(f"{beside}: not the task's {lang} vocabulary (symbol {i}: {(other + [None])[i]!r} vs "
                            f"the task's {(ours.symbols + [None])[i]!r}); the model must have been "
                            f"trained on this task's BPE and dictionary")
    if hasattr(model, "warm_start_names"):  # a model whose layers moved a baseline tensor says where to
        trained = model.warm_start_names(trained)
    own = model.state_dict()
    homeless = [k for k in trained if k not in own]
    if homeless:
        raise UserError(f"{path}: tensor {homeless[0]!r} (and {len(homeless) - 1} more) has no place in model "
                        f"{type(model).__name__}; warm starts need the same backbone")
    wrong = [k for k in trained if trained[k].shape != own[k].shape]
    if wrong:
        raise UserError(f"{path}: tensor {wrong[0]!r} has shape {tuple(trained[wrong[0]].shape)}, the model expects "
                        f"{tuple(own[wrong[0]].shape)}; warm starts need the same sizes and vocabulary")
    model.load_state_dict(trained, strict=False)
    return [k for k in own if k not in trained]


def _stop_reason(progress: dict, cfg: TrainConfig) -> str:
    """Which budget is spent ("" while none is): recomputed from the config, so a resumed run may be given a larger
    one. The final model records it, and a table row cut by the clock says so."""
    last_epoch = cfg.max_epoch
    if progress["restarted"] and cfg.restart_epochs:
        last_epoch = progress["restart_epoch"] + cfg.restart_epochs
    if progress["early_stopped"]:
        return "early stopping"
    if cfg.max_update and progress["update"] >= cfg.max_update:
        return "max_update"
    if last_epoch and progress["epoch"] > last_epoch:
        return "restart_epochs" if progress["restarted"] and cfg.restart_epochs else "max_epoch"
    if cfg.max_minutes and progress["elapsed"] >= cfg.max_minutes * 60:
        return "max_minutes"
    return ""


def _record(progress: dict, stats: np.ndarray, valid: dict, optimizer, board: "Board", partial: bool) -> None:
    loss, nll, correct, ntokens = stats
    ntokens = max(ntokens, 1.0)
    row = {"epoch": progress["epoch"], "partial": partial, "update": progress["update"],
           "minutes": round(progress["elapsed"] / 60, 3), "lr": optimizer.param_groups[0]["lr"],
           "train_loss": loss / ntokens / math.log(2), "train_nll": nll / ntokens / math.log(2),
           "train_accuracy": correct / ntokens, "valid_loss": valid["loss"], "valid_nll": valid["nll"],
           "valid_accuracy": valid["accuracy"], "valid_bleu": valid.get("bleu", ""),
           "skipped_updates": progress["skipped_updates"]}
    progress["history"].append(row)
    board.add(row["update"], "epoch", **{k: v for k, v in row.items() if k not in ("epoch", "partial", "update")})
    log.info("epoch %d%s: update %d, train loss %.3f, valid loss %.3f (nll %.3f, ppl %.2f), valid acc %.3f",
             row["epoch"], " (stopped mid-epoch)" if partial else " done", row["update"], row["train_loss"],
             valid["loss"], valid["nll"], 2 ** valid["nll"], valid["accuracy"])


def _early_stopping(progress: dict, cfg: TrainConfig, valid: dict) -> bool:
    """Track the best validation score; returns whether this epoch is the best so far."""
    score = -valid["loss"] if cfg.early_stop_metric == "loss" else valid["bleu"]  # higher is better
    improved = score > progress["best_valid"]
    if improved:
        progress["best_valid"], progress["bad_epochs"] = score, 0
    else:
        progress["bad_epochs"] += 1
    if cfg.patience and progress["bad_epochs"] >= cfg.patience:
        log.info("early stop: no better validation %s for %d epochs", cfg.early_stop_metric, cfg.patience)
        progress["early_stopped"] = True
    return improved


def _log_progress(progress, cfg, stats, window, updates_per_epoch, optimizer, board: "Board") -> None:
    now = time.time()
    tps = window["tokens"] / max(now - window["time"], 1e-9)
    window["tokens"], window["time"] = 0, now
    loss = stats[0] / max(stats[3], 1) / math.log(2)
    remaining = []
    if cfg.max_update:
        remaining.append((cfg.max_update - progress["update"]) * progress["elapsed"] / progress["update"])
    if cfg.max_minutes:
        remaining.append(cfg.max_minutes * 60 - progress["elapsed"])
    if cfg.max_epoch:
        done = (progress["epoch"] - 1) * updates_per_epoch + progress["next_batch"] / max(1, cfg.update_freq)
        remaining.append((cfg.max_epoch * updates_per_epoch - done) * progress["elapsed"] / max(done, 1))
    eta = f"{min(remaining) / 60:.1f} min" if remaining else "?"
    board.add(progress["update"], "train", loss=loss, lr=optimizer.param_groups[0]["lr"],
              grad_norm=window.get("grad_norm", math.nan), target_tokens_per_second=tps)
    log.info("epoch %d update %d: loss %.3f, lr %.2e, gnorm %.3f, %.0f target tokens/s, %.1f min elapsed, ETA %s",
             progress["epoch"], progress["update"], loss, optimizer.param_groups[0]["lr"],
             window.get("grad_norm", math.nan), tps, progress["elapsed"] / 60, eta)


class Board:
    """TensorBoard event files beside metrics.csv, to watch runs live (`tensorboard --logdir results/`): the
    log-interval training curve and every epoch's metrics.csv row. Written only where the optional dependency is
    installed (pip install 'layerwise-nmt[tensorboard]'), and only by rank 0 (logdir None: nothing)."""

    def __init__(self, logdir: Path | None):
        self.writer = None
        if logdir is None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch raises ImportError when the tensorboard package is missing
            return
        self.writer = SummaryWriter(str(logdir), flush_secs=30)
        log.info("TensorBoard event files: %s", logdir)

    def add(self, step: int, group: str, **scalars) -> None:
        if self.writer is None:
            return
        for name, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):  # valid_bleu is "" without BLEU
                self.writer.add_scalar(f"{group}/{name}", value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _write_summary(path: Path, progress: dict, cfg: TrainConfig) -> None:
    """How the run ended, for the tables: a row cut short by the clock must say so."""
    summary = {"updates": progress["update"], "epochs_completed": progress["epoch"] - 1,
               "stopped_by": progress["stopped_by"], "skipped_updates": progress["skipped_updates"],
               "minutes": round(progress["elapsed"] / 60, 2),
               "budget": {k: getattr(cfg, k) for k in ("max_update", "max_epoch", "max_minutes")}}
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(summary, indent=1))


def _write_history(path: Path, history: list[dict]) -> None:
    if not history:
        return
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)
