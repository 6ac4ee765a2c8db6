"""`amp: bf16-weights`: the model trains with its parameters in bf16 and the optimizer works on fp32 master copies,
as fairseq's --bf16 (its FP16Optimizer) does.

bf16 autocast keeps the parameters in fp32 and casts every weight to bf16 at every use, forward and backward: on an
H100, Transformer big spent 11% of its GPU time in those casts (docs/benchmarks.md). Here the model that forward and
backward run on (`compute_model`) is a copy of the trained one whose parameters are bf16, so there is nothing to
cast; the trained model (`Run.model`) keeps its fp32 parameters as the master weights, and everything that reads
weights or optimizer state from it (checkpoints, resume, the final model, averaging, warm starts, export) sees fp32
as in any other precision. Per update:

    forward and backward on the bf16 copy       gradients in bf16, summed over the update's passes and divided by
                                                 its tokens (`accumulate`) in bf16, as fairseq's --bf16 sums them
    bf16 gradients → the masters' fp32 ones     one `_foreach_copy_` (`to_masters`, after `accumulate`)
    norm, clipping, AdamW step on the masters   unchanged (optim.py): fused on CUDA, in fp32
    masters → the bf16 parameters               one `_foreach_copy_`, hooked to the optimizer's step, so that it
                                                 follows every step taken, whoever takes it, and none skipped

On CUDA a `_foreach_copy_` between two dtypes is one multi-tensor kernel launch for all the tensors (PyTorch's
fast path needs only each list's tensors to share a dtype); on the CPU it is a loop of copies.

What stays fp32: the loss (`smoothed_loss` casts each chunk of the logits to fp32), the beam search's
log-probabilities, the position table (added in fp32, the sum rounded once: `Embedding`), the optimizer's moments
and the gradient norm. Layer norm and softmax (attention's, on bf16 inputs) return bf16 but accumulate in fp32 inside
PyTorch's kernels, and scaled_dot_product_attention does too: what CPU autocast computes there as well. The residual
stream is bf16 (under autocast it is fp32 from the embeddings on), as in fairseq's --bf16.

A tied matrix (`tie: all`) is one parameter in the copy as in the model, so it has one master and one gradient.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .precision import Precision

AMP = "bf16-weights"
LINK = "master_weights"  # the attribute of the bf16 copy that holds its `Link` to the masters


class Link:
    """The bf16 copy's parameters, their fp32 masters (one each, in `parameters()` order, which counts a tied
    matrix once) and the masters' gradient buffers, allocated once: a new fp32 gradient at every update would be a
    fresh allocation, which on a CPU means page faults on every large tensor."""

    def __init__(self, masters: nn.Module, model: nn.Module):
        self.masters_module = masters
        self.masters: list[torch.Tensor] = list(masters.parameters())
        self.params: list[torch.Tensor] = list(model.parameters())
        if [m.shape for m in self.masters] != [p.shape for p in self.params]:
            raise ValueError("the bf16 copy's parameters do not match the masters'")  # a model built otherwise
        self.grads = [torch.empty_like(m) for m in self.masters]
        self.hooked: torch.optim.Optimizer | None = None

    def grads_to_masters(self) -> None:
        """The bf16 gradients, as fp32, become the masters' (a parameter without one leaves its master without one,
        as in fp32 training); the bf16 ones are dropped, so that the next update's backward starts from none."""
        masters, grads = [], []
        for master, buffer, param in zip(self.masters, self.grads, self.params, strict=True):
            master.grad = None
            if param.grad is not None:
                master.grad = buffer
                masters.append(buffer)
                grads.append(param.grad)
                param.grad = None
        if masters:
            torch._foreach_copy_(masters, grads)

    @torch.no_grad()
    def masters_to_model(self) -> None:
        torch._foreach_copy_(self.params, self.masters)

    def follow(self, optimizer: torch.optim.Optimizer) -> None:
        """Copy the masters into the bf16 parameters after each step of `optimizer` (RestartAdam makes a new one)."""
        if self.hooked is not optimizer:
            optimizer.register_step_post_hook(lambda *_: self.masters_to_model())
            self.hooked = optimizer


def bf16_params(model: nn.Module) -> nn.Module:
    """A copy of `model` with its parameters in bf16 (decoding with bf16 weights needs no more). Buffers keep their
    dtype: the only floating one, the position table, is added in fp32 and the sum rounded to the token table's."""
    # a tensor a forward left on a module (a model's last auxiliary loss) is part of that forward's graph, which
    # deepcopy refuses: the copy gets it detached
    memo = {
        id(value): value.detach()
        for module in model.modules()
        for value in vars(module).values()
        if isinstance(value, torch.Tensor) and value.grad_fn is not None
    }
    model = copy.deepcopy(model, memo)
    for param in model.parameters():  # each shared parameter once, so a tied matrix stays tied
        param.data = param.data.to(torch.bfloat16)
    return model


def bf16_copy(masters: nn.Module) -> nn.Module:
    """`bf16_params(masters)`, linked to them (`Link`) for training."""
    model = bf16_params(masters)
    setattr(model, LINK, Link(masters, model))
    return model


def compute_model(masters: nn.Module, precision: Precision, distributed: bool = False) -> nn.Module:
    """The model forward and backward run on: `masters` itself, or for bf16-weights its bf16 copy; in DDP when
    `distributed` (its gradients are then reduced in bf16, as fairseq's --bf16 reduces them)."""
    model = bf16_copy(masters).train() if precision.amp == AMP else masters
    return torch.nn.parallel.DistributedDataParallel(model) if distributed else model


def link(net: nn.Module) -> Link | None:
    inner = net.module if isinstance(net, torch.nn.parallel.DistributedDataParallel) else net
    return getattr(inner, LINK, None)


def to_masters(net: nn.Module, masters: nn.Module, optimizer: torch.optim.Optimizer, precision: Precision) -> None:
    """After an update's backward on `net`: the gradients to the `masters`, where the norm, the clipping and the
    `optimizer`'s step find them, and the copy back after the step (`Link.follow`). A no-op in other precisions."""
    linked = link(net)
    if linked is None:
        if precision.amp == AMP:  # an fp32 update in a run that records bf16-weights would go unnoticed
            raise RuntimeError("amp bf16-weights: the update must run on compute_model(run.model, ...)")
        return
    if linked.masters_module is not masters:
        raise RuntimeError("amp bf16-weights: the bf16 model is not a copy of this run's model")
    linked.grads_to_masters()
    linked.follow(optimizer)
