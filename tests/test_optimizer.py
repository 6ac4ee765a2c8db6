"""The optimizer follows fairseq 0.12.2's Adam (fairseq/optim/adam.py): weight decay decoupled from the gradient."""

import math

import pytest
import torch

from layerwise_nmt.training.loop import TrainConfig, adam

LR, BETAS, EPS, WD = 0.1, (0.9, 0.98), 1e-8, 0.1
GRADS = [
    torch.tensor([0.5, -0.2, 0.05, 0.0], dtype=torch.float64),
    torch.tensor([0.3, 0.4, -0.05, 0.0], dtype=torch.float64),
    torch.tensor([-0.1, 0.1, 0.2, 0.0], dtype=torch.float64),
]
START = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)  # the last element never gets a gradient


def fairseq_adam(p, grads, lr, betas, eps, wd):
    """fairseq/optim/adam.py's Adam.step, written out for one tensor: the moments see the plain gradient;
    p ← p − lr·wd·p, then p ← p − lr·√(1−β2ᵗ)/(1−β1ᵗ) · m / (√v + ε)."""
    p, m, v = p.clone(), torch.zeros_like(p), torch.zeros_like(p)
    for t, g in enumerate(grads, 1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        step_size = lr * math.sqrt(1 - betas[1] ** t) / (1 - betas[0] ** t)
        p = p - wd * lr * p
        p = p - step_size * m / (v.sqrt() + eps)
    return p


def ours(grads, lr=LR, eps=EPS, wd=WD, fused=None):
    model = torch.nn.Linear(4, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(START)
    cfg = TrainConfig.from_dict(
        {"max_update": 1, "lr": lr, "adam_betas": list(BETAS), "adam_eps": eps, "weight_decay": wd}
    )
    opt = adam(model, cfg, fused=fused)
    for g in grads:
        model.weight.grad = g.clone().view(1, 4)
        opt.step()
    return model.weight.detach().view(4)


def test_one_update_is_fairseqs_decoupled_weight_decay():
    expected = fairseq_adam(START, GRADS[:1], LR, BETAS, EPS, WD)
    got = ours(GRADS[:1])
    # torch adds ε to √v̂ (bias-corrected), fairseq to √v: with ε = 1e-8 and these gradients that moves the update
    # by ~1e-7 at most; the weight decay term is lr·wd·p ≈ 1e-2
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert float(got[3]) == pytest.approx(float(START[3]) * (1 - LR * WD), abs=1e-12)  # no gradient: decay alone
    coupled = fairseq_adam(START, [GRADS[0] + WD * START], LR, BETAS, EPS, 0.0)
    assert (got - coupled).abs().max() > 1e-3  # coupled L2 would move every weight differently


@pytest.mark.parametrize("fused", [None, True], ids=["default", "fused"])  # fused: CUDA's choice, run on the CPU
@pytest.mark.parametrize("eps", [1e-30, EPS])
def test_several_updates_follow_fairseqs_formula(eps, fused):
    expected, got = fairseq_adam(START, GRADS, LR, BETAS, eps, WD), ours(GRADS, eps=eps, fused=fused)
    # ε ≈ 0: where ε sits no longer matters, so the match is exact up to rounding
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12 if eps < 1e-20 else 1e-6)


def test_no_weight_decay_is_plain_adam():
    torch.testing.assert_close(ours(GRADS, wd=0.0), fairseq_adam(START, GRADS, LR, BETAS, EPS, 0.0), rtol=0, atol=1e-6)
