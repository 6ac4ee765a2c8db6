"""Fixed batch shapes (`bucket_growth_factor`): batches from a small set of (rows, source, target) shapes within
max_tokens, every sentence once an epoch, dummy rows that change nothing, a training that resumes bit for bit, and
the settings it refuses."""

import logging

import numpy as np
import pytest
import torch
from conftest import load_benchmark, toy_spec

from layerwise_nmt import UserError
from layerwise_nmt.data.batch_shapes import FixedShapes, batching_summary
from layerwise_nmt.data.batching import ParallelData, collate, make_batches
from layerwise_nmt.data.vocab import load_pair
from layerwise_nmt.models import build
from layerwise_nmt.training import loop
from layerwise_nmt.training.checkpoint import LAST, load
from layerwise_nmt.training.loop import TrainConfig, accumulate, train
from layerwise_nmt.training.loss import evaluate
from layerwise_nmt.training.update_batches import check_merging

CPU = torch.device("cpu")
FP32 = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
gpu_check = load_benchmark("gpu_check")
# every dropout off (the conv backbones drop kernel weights by default): the same arithmetic in both passes
NO_DROPOUT = {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0, "weight_dropout": 0.0}


def lengths(n: int = 20000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths (with </s>) shaped like a corpus': mostly short, a long tail, sides correlated."""
    rng = np.random.RandomState(seed)
    src = np.clip(rng.lognormal(2.8, 0.5, n).astype(int), 1, 250) + 1
    tgt = np.clip((src * rng.uniform(0.7, 1.3, n)).astype(int), 1, 250) + 1
    return src, tgt


def test_buckets_grow_by_the_factor_in_multiples_up_to_max_positions():
    shapes = FixedShapes(1.1, 2, 4096, None, longest=1024)
    buckets = shapes.lengths
    assert buckets[0] == 2 and buckets[-1] == 1024 and all(buckets % 2 == 0)
    steps = buckets[1:-1] / buckets[:-2]
    assert all((steps >= 1.1) | (np.diff(buckets)[:-1] == 2))  # 10% apart, or one multiple apart where that is more
    assert list(shapes.padded(np.array([1, 2, 3, 21, 22, 23, 1024]))) == [2, 2, 4, 22, 22, 26, 1024]
    assert list(FixedShapes(1.0, 8, 4096, None, longest=64).lengths) == [8, 16, 24, 32, 40, 48, 56, 64]


@pytest.mark.parametrize("max_tokens, max_sentences", [(1024, None), (4096, None), (1024, 16), (None, 32)])
def test_batches_take_few_shapes_within_max_tokens_and_every_sentence_once(max_tokens, max_sentences):
    src, tgt = lengths()
    shapes = FixedShapes(1.1, 2, max_tokens, max_sentences)
    batches = make_batches(src, tgt, max_tokens, max_sentences, 1, shapes=shapes)
    every_shape = set(shapes.all_shapes())
    used = set()
    for ids in batches:
        rows, src_len, tgt_len = shape = shapes.shape(src[ids], tgt[ids])
        assert shape in every_shape
        assert len(ids) <= rows and src[ids].max() <= src_len and tgt[ids].max() <= tgt_len
        if max_tokens:
            assert rows * max(src_len, tgt_len) <= max_tokens  # padded tokens, fairseq's measure
        if max_sentences:
            assert rows <= max_sentences
        used.add(shape)
    assert sorted(np.concatenate(batches)) == list(range(len(src)))
    today = make_batches(src, tgt, max_tokens, max_sentences, 1)
    assert len(used) == batching_summary(src, tgt, batches, shapes)["shapes"]
    assert len(used) <= 3 * np.searchsorted(shapes.lengths, max(src.max(), tgt.max())) + 1
    assert len(used) < batching_summary(src, tgt, today, None)["shapes"] / 2


def test_collate_pads_to_the_shape_with_dummy_rows_that_count_for_nothing(toy_data):
    data = ParallelData(toy_data, "train", "de", "en")
    shapes = FixedShapes(1.1, 8, 200, None)
    ids = np.array([3, 17, 40])
    batch, plain = collate(data, ids, shapes=shapes), collate(data, ids)
    rows, src_len, tgt_len = shapes.shape(data.src.sizes[ids], data.tgt.sizes[ids])
    assert (rows, src_len, tgt_len) == (200 // 8, 8, 8)  # sentences of 4, 6 and 4 tokens: the bucket of 8
    assert batch.src.shape == (rows, src_len) and batch.prev.shape == batch.tgt.shape == (rows, tgt_len)
    assert list(batch.ids) == list(ids) and batch.ntokens == plain.ntokens  # real sentences only
    for field in ("src", "prev", "tgt"):
        real = getattr(plain, field)
        assert torch.equal(getattr(batch, field)[: len(ids), : real.size(1)], real)
        assert (getattr(batch, field)[: len(ids), real.size(1) :] == 1).all()
    assert (batch.src[len(ids) :, 0] == 2).all() and (batch.src[len(ids) :, 1:] == 1).all()  # </s>, then padding
    assert (batch.prev[len(ids) :, 0] == 2).all() and (batch.tgt[len(ids) :] == 1).all()  # no target: no loss


@pytest.mark.parametrize("name", list(gpu_check.FAMILIES))
def test_dummy_rows_and_padding_change_neither_loss_nor_gradients(toy_data, name):
    """The same sentences collated as today and to a fixed shape (padded from 6 tokens to 8, 22 dummy rows): one
    update's loss sums and gradients agree to fp32 rounding, for every model family; no NaN from the dummies' lone
    </s>."""
    data = ParallelData(toy_data, "train", "de", "en")
    vocab = len(load_pair(toy_data, "de", "en")[0])
    ids = np.array([3, 17, 40])
    model_name, extra = gpu_check.FAMILIES[name]
    arch = {**gpu_check.TINY, **NO_DROPOUT, **extra, "src_vocab": vocab, "tgt_vocab": vocab}
    arch |= {"diversity": 0.0} if name == "deep" else {}  # its per-pass term is refused (test below)
    if model_name == "lwc":  # one shared stack: `layers` instead of encoder/decoder layers
        arch = {k: v for k, v in arch.items() if k not in ("encoder_layers", "decoder_layers")}
    cfg = TrainConfig.from_dict({"max_update": 1})
    results = []
    for shapes in (None, FixedShapes(1.1, 8, 200, None)):
        torch.manual_seed(0)
        model = build(model_name, arch).train()
        batch = collate(data, ids, shapes=shapes)
        with torch.no_grad():
            assert torch.isfinite(model(batch.src, batch.prev)).all()
        stats = accumulate(model, [batch], cfg, CPU, FP32)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append(({k: float(v) for k, v in stats.items()}, grads))
    (plain, grads), (fixed, fixed_grads) = results
    assert (fixed["ntokens"], fixed["nsentences"], fixed["correct"]) == (plain["ntokens"], 3, plain["correct"])
    for key in ("loss", "nll"):
        assert fixed[key] == pytest.approx(plain[key], rel=1e-5), key
    assert grads.keys() == fixed_grads.keys()
    for param, grad in grads.items():
        assert torch.allclose(fixed_grads[param], grad, rtol=1e-4, atol=1e-6), param


def test_training_with_fixed_shapes_takes_them_resumes_bit_for_bit_and_validates_as_before(
    toy_data, tmp_path, monkeypatch, caplog
):
    """Every pass the trainer makes has one of the shapes; a run stopped at update 6 and resumed to 14 ends with the
    weights and Adam moments of a run straight to 14; the log says what the shapes cost."""
    seen = []

    def recording(model, micro_batches, cfg, *args, **kwargs):
        seen.extend((tuple(b.src.shape), tuple(b.tgt.shape), len(b.ids)) for b in micro_batches)
        return accumulate(model, micro_batches, cfg, *args, **kwargs)

    monkeypatch.setattr(loop, "accumulate", recording)
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.update_batches")
    fixed = {"bucket_growth_factor": 1.1, "save_interval_updates": 4, "max_tokens": 100, "amp": "none"}
    train(toy_spec(max_update=14, **fixed), str(toy_data), "de", "en", str(tmp_path / "a"))
    every_shape = set(FixedShapes(1.1, 2, 100, None).all_shapes())
    assert len(seen) == 14
    for (rows, src_len), (tgt_rows, tgt_len), sentences in seen:
        assert (rows, src_len, tgt_len) in every_shape and tgt_rows == rows and sentences <= rows
    assert any(sentences < rows for (rows, _), _, sentences in seen)  # dummy rows did occur
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fixed batch shapes")]
    assert len(said) == 1 and "shapes" in said[0] and "padding" in said[0] and "sentences per update" in said[0]

    train(toy_spec(max_update=6, **fixed), str(toy_data), "de", "en", str(tmp_path / "b"))
    assert load(tmp_path / "b" / LAST)["progress"]["next_batch"] > 0  # stopped mid-epoch
    train(toy_spec(max_update=14, **fixed), str(toy_data), "de", "en", str(tmp_path / "b"))
    a, b = load(tmp_path / "a" / LAST), load(tmp_path / "b" / LAST)
    assert a["progress"]["update"] == b["progress"]["update"] == 14
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])

    vocab = len(load_pair(toy_data, "de", "en")[0])
    model = build("transformer", {**toy_spec()["arch"], "src_vocab": vocab, "tgt_vocab": vocab})
    model.load_state_dict(a["model"])
    valid = ParallelData(toy_data, "valid", "de", "en")
    on, off = (TrainConfig.from_dict({"max_update": 1, **settings}) for settings in (fixed, {"max_tokens": 100}))
    assert evaluate(model, valid, on, CPU, FP32) == evaluate(model, valid, off, CPU, FP32)


def test_the_settings_fixed_shapes_refuse():
    with pytest.raises(UserError, match=r"^bucket_growth_factor=0.5; expected auto, 0 \(off\) or at least 1"):
        TrainConfig.from_dict({"max_update": 1, "bucket_growth_factor": 0.5})
    with pytest.raises(UserError, match="bucket_growth_factor=1.1 with micro_batch_tokens=4096: .*set one of them"):
        TrainConfig.from_dict({"max_update": 1, "bucket_growth_factor": 1.1, "micro_batch_tokens": 4096})
    model_name, extra = gpu_check.FAMILIES["deep"]
    model = build(model_name, {**gpu_check.TINY, **extra, "src_vocab": 40, "tgt_vocab": 40})
    with pytest.raises(
        UserError,
        match="^bucket_growth_factor=1.1: model DeepTransformer with diversity=1.0 .*set bucket_growth_factor: 0$",
    ):
        check_merging(model, TrainConfig.from_dict({"max_update": 1, "bucket_growth_factor": 1.1}))
    check_merging(model, TrainConfig.from_dict({"max_update": 1}))  # off: fine
