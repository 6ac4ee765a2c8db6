"""The label-smoothed cross-entropy the trainer uses (chunked, `SmoothedCrossEntropy`) against fairseq's
formulation (`smoothed_loss_reference`): the same loss, nll, correct count and gradient, in every precision, on the
padding, with one chunk or many, and under a scaled loss's gradient."""

import pytest
import torch

from layerwise_nmt.training import loss as loss_module
from layerwise_nmt.training.loss import smoothed_loss, smoothed_loss_reference

PAD = 1


def case(dtype, rows=37, vocab=53, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(3, rows, vocab, generator=g) * 4).to(dtype)
    target = torch.randint(2, vocab, (3, rows), generator=g)
    target[0, -5:] = PAD  # padding at a sentence's end
    target[2, :] = PAD  # a dummy row of a fixed batch shape
    target[1, 3] = logits[1, 3].float().argmax()  # at least one correct
    return logits, target


def run(fn, logits, target, epsilon, scale=1.0):
    x = logits.clone().requires_grad_()
    loss, nll, correct = fn(x, target, epsilon, PAD)
    (loss * scale).backward()
    return loss.detach(), nll, correct, x.grad


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2), (torch.float16, 1e-3)])
@pytest.mark.parametrize("chunk", [1 << 20, 53 * 5], ids=["one chunk", "chunks of 5 rows"])
@pytest.mark.parametrize("epsilon", [0.1, 0.0])
def test_the_chunked_loss_is_fairseqs(monkeypatch, dtype, tol, chunk, epsilon):
    monkeypatch.setitem(loss_module.CHUNK_ELEMENTS, "cpu", chunk)
    logits, target = case(dtype)
    ours = run(smoothed_loss, logits, target, epsilon, scale=8.0)
    ref = run(smoothed_loss_reference, logits, target, epsilon, scale=8.0)
    assert torch.allclose(ours[0], ref[0], rtol=1e-6) and torch.allclose(ours[1], ref[1], rtol=1e-6)
    assert ours[2] == ref[2] >= 1
    assert ours[3].dtype == dtype and not ours[1].requires_grad
    assert torch.equal(ours[3][2], torch.zeros_like(ours[3][2]))  # nothing flows from padding
    err = (ours[3].float() - ref[3].float()).norm() / ref[3].float().norm()
    assert err < tol, err


def test_without_a_gradient_it_is_the_validation_loss():
    logits, target = case(torch.float32)
    with torch.no_grad():
        ours, ref = smoothed_loss(logits, target, 0.1, PAD), smoothed_loss_reference(logits, target, 0.1, PAD)
    assert all(torch.allclose(a.float(), b.float(), rtol=1e-6) for a, b in zip(ours, ref, strict=True))
