"""The loss: label-smoothed cross-entropy as fairseq computes it, summed over an update's passes (`accumulate`)
and over the validation set (`evaluate`, optionally with the BLEU of beam search)."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from .. import UserError
from ..data.batching import ParallelData, collate, make_batches
from .distributed import all_reduce_sum, world
from .config import TRAIN_DEFAULTS, TrainConfig


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int):
    """fairseq's label_smoothed_cross_entropy, summed over non-pad tokens → (loss, nll, correct tokens), as
    `smoothed_loss_reference` computes it, a few hundred rows of the logits at a time (`SmoothedCrossEntropy`)."""
    loss, nll, correct = SmoothedCrossEntropy.apply(logits.flatten(0, -2), target.flatten(), epsilon, pad)
    return loss, nll, correct


# Elements of the logits one chunk holds in fp32: on a CPU 4 MB, which the allocator reuses from call to call where a
# full-size temporary is mapped afresh and faulted in page by page; on a GPU 32 MB, under an H100's L2 cache, and few
# enough chunks that their kernels' launches cost less than the memory traffic they save
CHUNK_ELEMENTS = {"cpu": 1 << 20, "cuda": 1 << 23}


class SmoothedCrossEntropy(torch.autograd.Function):
    """The label-smoothed cross-entropy over (N, V) logits in any float type, in fp32, chunk by chunk of rows: the
    forward keeps each row's log-sum-exp (not the (N, V) fp32 log-probabilities the reference keeps for backward),
    and the backward writes the gradient into the logits' own type, p - ε_i - (1 - ε - ε_i)·onehot(target) per
    row (its coefficient of p, (1 - ε - ε_i) + ε_i·V, is 1), scaled by the loss's gradient and zero on padding.
    The chunks bound the fp32 temporaries: the reference's full-size ones cost a Transformer big update ~20 GB of
    memory traffic, and on a CPU each is memory mapped afresh at every call and faulted in page by page."""

    @staticmethod
    def forward(ctx, logits, target, epsilon: float, pad: int):
        n, vocab = logits.shape
        rows = max(1, CHUNK_ELEMENTS.get(logits.device.type, CHUNK_ELEMENTS["cuda"]) // vocab)
        eps_i = epsilon / (vocab - 1)
        keep = target != pad
        lse, picked, total = (torch.empty(n, dtype=torch.float32, device=logits.device) for _ in range(3))
        best = torch.empty(n, dtype=torch.long, device=logits.device)
        for start in range(0, n, rows):
            part = slice(start, start + rows)
            x = logits[part].float()
            lse[part] = torch.logsumexp(x, dim=-1)
            picked[part] = x.gather(-1, target[part, None]).squeeze(-1)
            total[part] = x.sum(dim=-1)
            best[part] = x.argmax(dim=-1)
        nll = (lse - picked) * keep
        smooth = (lse * vocab - total) * keep  # -Σ_v log p_v
        loss = ((1.0 - epsilon - eps_i) * nll + eps_i * smooth).sum()
        correct = ((best == target) & keep).sum()
        ctx.save_for_backward(logits, target, lse, keep)
        ctx.epsilon, ctx.eps_i, ctx.rows = epsilon, eps_i, rows
        nll = nll.sum()
        ctx.mark_non_differentiable(nll, correct)
        return loss, nll, correct

    @staticmethod
    def backward(ctx, grad_loss, _nll, _correct):
        logits, target, lse, keep = ctx.saved_tensors
        grad = torch.empty_like(logits)
        scale = keep * grad_loss.float()
        on_target = torch.full((1, 1), -(1.0 - ctx.epsilon - ctx.eps_i), device=logits.device)
        for start in range(0, logits.shape[0], ctx.rows):
            part = slice(start, start + ctx.rows)
            p = logits[part].float().sub_(lse[part, None]).exp_().sub_(ctx.eps_i)
            p.scatter_add_(-1, target[part, None], on_target.expand(p.shape[0], 1))
            grad[part] = p.mul_(scale[part, None])
        return grad, None, None, None


def smoothed_loss_reference(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int):
    """fairseq's label_smoothed_cross_entropy, summed over non-pad tokens → (loss, nll, correct tokens), as fairseq
    writes it: the definition `smoothed_loss` is checked against, and the benchmarks' "before"."""
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    keep = target != pad  # masked, not indexed: boolean indexing costs an index_put in backward
    nll = -lprobs.gather(-1, target[..., None]).squeeze(-1) * keep
    smooth = -lprobs.sum(dim=-1) * keep
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    correct = ((lprobs.argmax(dim=-1) == target) & keep).sum()
    return loss.sum(), nll.sum().detach(), correct


# by name, for the benchmarks that time one against the other (benchmarks/train_decode.py, profile_update.py)
LOSSES = {"chunked": smoothed_loss, "reference": smoothed_loss_reference}

STATS = ("loss", "nll", "correct", "ntokens", "nsentences")  # an update's sums, on the device until the loop reads them


def accumulate(model, micro_batches, cfg: TrainConfig, device, autocast, scaler=None) -> dict[str, torch.Tensor]:
    """Forward/backward over the update's batches; leaves gradients normalised by the update's target tokens
    (all ranks): grad = Σ_ranks Σ_batches ∇loss_sum / ntokens_total, the same as one process with the union.

    Merged batches (`micro_batch_tokens`, `merge_batches`) give the same gradient: the loss is a sum over target
    tokens, each token's term depends only on its own sentence (padding is masked in attention, convolutions and
    the loss; positions restart in every sentence), and the normalisation is by the update's total tokens whatever
    the passes, so Σ_passes ∇Σ_tokens = Σ_batches ∇Σ_tokens; only the order of float additions differs. A model's
    auxiliary loss that is a mean over a pass's positions (`ModelOutput.per_pass`), weighted by the pass's tokens,
    is the exception, which merging would change: refused here, and at the start by `train.check_merging`.

    fp16: each loss is multiplied by the scaler's loss scale before backward, so that small gradients survive in
    fp16; `loop.update_step` unscales. The sums stay on the device (no host sync here), read once, an update late
    (`deferred`)."""
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    inner = model.module if ddp else model
    sums = torch.zeros(len(STATS), dtype=torch.float64, device=device)
    for i, batch in enumerate(micro_batches):
        batch = batch.to(device)  # non_blocking: from pinned memory, queued behind the running kernels
        sync = nullcontext() if (not ddp or i == len(micro_batches) - 1) else model.no_sync()
        with sync:
            with autocast():
                output = model(batch.src, batch.prev, full=True)
            loss, nll, ok = smoothed_loss(output.logits, batch.tgt, cfg.label_smoothing, inner.config.pad)
            extra = output.auxiliary_loss  # a per-token term the model asks for
            if extra is not None and output.per_pass and batch.parts > 1:
                raise UserError(
                    f"micro_batch_tokens={cfg.micro_batch_tokens}: model {type(inner).__name__} adds "
                    f"a per-pass auxiliary loss, which merged batches would change; set "
                    f"micro_batch_tokens: 0"
                )
            # counted on the device, not taken from the batch's Python numbers, which a CUDA graph replaying this
            # update would hold as they were at its capture: a target's first token is pad in a dummy row only
            real = batch.tgt != inner.config.pad
            ntokens, nsentences = real.sum(), real[:, 0].sum()
            total = loss if extra is None else loss + extra * ntokens
            (total if scaler is None else scaler.scale(total)).backward()
        sums += torch.stack([loss.detach(), nll, ok, ntokens, nsentences]).double()
    sums = all_reduce_sum(sums)
    grads = [p.grad for p in inner.parameters() if p.grad is not None]
    if grads:  # DDP averaged over ranks; undo that, then divide by all tokens (on the device: no sync)
        torch._foreach_mul_(grads, (world()[1] / sums[3].clamp(min=1.0)).float())
    return dict(zip(STATS, sums.unbind(), strict=True))


@torch.no_grad()
def evaluate(model, data: ParallelData, cfg: TrainConfig, device, autocast, search=None) -> dict:
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    inner.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # summed on the device, read once
    ntokens = 0
    max_tokens = cfg.max_tokens or TRAIN_DEFAULTS.max_tokens
    for ids in make_batches(data.src.sizes, data.tgt.sizes, max_tokens, None, cfg.seed):
        batch = collate(data, ids).to(device)
        with autocast():
            logits = inner(batch.src, batch.prev)
        loss, nll, ok = smoothed_loss(logits, batch.tgt, cfg.label_smoothing, inner.config.pad)
        totals += torch.stack([loss.double(), nll.double(), ok.double()])
        ntokens += batch.ntokens
    loss, nll, correct = totals.tolist()
    result = {"loss": loss / ntokens / math.log(2), "nll": nll / ntokens / math.log(2), "accuracy": correct / ntokens}
    if cfg.valid_bleu or cfg.early_stop_metric == "bleu":
        result["bleu"] = valid_bleu(inner, data, cfg, device, autocast, search)
    inner.train()
    return result


def valid_bleu(model, data: ParallelData, cfg: TrainConfig, device, autocast, search) -> float:
    """BLEU of beam search on the validation set over its subword units (token ids, BPE not removed; sacrebleu):
    enough to rank epochs and follow a run, not comparable with test BLEU. `search(model, src, beam)` is the beam
    search (inference.decode.validation_search): inference is above this folder, so the caller hands it in."""
    from ..scoring.score import ScoreConfig, bleu

    if search is None:
        raise UserError(
            "valid_bleu / early_stop_metric: bleu decode the validation set: train(..., "
            "search=inference.decode.validation_search), as `lwnmt train` does"
        )
    hyps, refs = [], []
    for ids in make_batches(data.src.sizes, data.tgt.sizes, None, 64, cfg.seed):
        batch = collate(data, ids).to(device)
        with autocast():
            results = search(model, batch.src, cfg.valid_beam)
        hyps += [" ".join(map(str, r[0].tokens[:-1])) for r in results]
        refs += [" ".join(map(str, data.tgt[i][:-1])) for i in ids]
    return bleu(hyps, [refs], ScoreConfig())["bleu"]  # on token ids: BLEU over BPE units, enough to rank epochs
