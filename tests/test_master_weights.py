"""`amp: bf16-weights`: the model trains with bf16 parameters and no autocast, the optimizer steps fp32 master
weights; checkpoints hold the masters, so a resume is exact and everything downstream reads fp32 weights. Here on
the CPU, which runs the same code path as a GPU (only the kernels underneath differ)."""

import math
import time

import numpy as np
import pytest
import torch

from conftest import load_benchmark, toy_spec
from layerwise_nmt.data.batching import ParallelData, collate
from layerwise_nmt.data.vocab import load_pair
from layerwise_nmt.training import loop as training, master_weights, precision as precisions, precision_probe
from layerwise_nmt.training.checkpoint import LAST, load, recorded_precision
from layerwise_nmt.training.loop import TrainConfig, start_run, update_step, train
from layerwise_nmt.training.precision import Precision, device_name
from layerwise_nmt.training.precision_probe import Workload
from layerwise_nmt.training.reporting import Reporter

CPU = torch.device("cpu")
AMPS = ("none", "bf16", "bf16-weights")


def chosen(amp: str) -> Precision:
    return Precision(amp, amp, "as configured", device_name(CPU))


def start(toy_data, save_dir, amp: str, dropout: float = 0.0, **train_settings):
    """A run of the toy transformer (tie: all) in `amp` and the model its updates run on."""
    spec = toy_spec(**train_settings)
    spec["arch"] = {**spec["arch"], "dropout": dropout}
    torch.manual_seed(1)
    cfg = TrainConfig.from_dict({**spec["train"], "max_update": 1000})
    vocabs = dict(zip(("de", "en"), load_pair(toy_data, "de", "en"), strict=True))
    run = start_run(spec, cfg, vocabs, save_dir, CPU, chosen(amp))
    return run, master_weights.compute_model(run.model, run.precision)


def batches(toy_data, n: int, size: int = 16):
    data = ParallelData(toy_data, "train", "de", "en")
    rows = len(data.src.sizes)
    return [collate(data, np.arange(i * size, i * size + size) % rows) for i in range(n)]


def update(run, net, batch):
    """One update as the loop takes it: queued (`update_step`), then read and counted (`_count`); its numbers, None if
    it was skipped."""
    pending = update_step(run, net, [batch], CPU, lambda: run.precision.autocast(CPU))
    taken = training.count_update(run, pending, 0.0, Reporter(None, run.cfg), updates_per_epoch=1)
    return pending.read() if taken else None


def test_the_model_is_bf16_the_masters_fp32_and_a_tied_matrix_has_one_master(toy_data, tmp_path):
    run, net = start(toy_data, tmp_path / "run", "bf16-weights")
    params, masters = list(net.parameters()), list(run.model.parameters())
    assert net is not run.model and len(params) == len(masters)
    assert all(p.dtype == torch.bfloat16 for p in params)  # none left in fp32 by accident
    assert all(m.dtype == torch.float32 for m in masters)
    assert net.output.weight is net.encoder.embed.tokens.weight is net.decoder.embed.tokens.weight  # tie: all
    assert run.model.output.weight is run.model.encoder.embed.tokens.weight
    stepped = {id(p) for group in run.optimizer.param_groups for p in group["params"]}
    assert stepped == {id(m) for m in masters}  # the optimizer steps the masters, each once
    for batch in batches(toy_data, 3):
        assert update(run, net, batch) is not None
        assert all(p.dtype == torch.bfloat16 and p.grad is None for p in net.parameters())
        assert all(m.dtype == torch.float32 for m in run.model.parameters())
        assert all(
            torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(net.parameters(), run.model.parameters(), strict=True)
        )
    state = run.model.state_dict()
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())
    assert len(run.optimizer.state) == len(masters)  # one set of moments per master, the tied one included
    run.optimizer = training.adam(run.model, run.cfg)  # RestartAdam's fresh optimizer: the copies follow it too
    before = [p.clone() for p in net.parameters()]
    assert update(run, net, batches(toy_data, 1)[0]) is not None
    assert not all(torch.equal(a, p) for a, p in zip(before, net.parameters(), strict=True))
    assert all(
        torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(net.parameters(), run.model.parameters(), strict=True)
    )


def test_an_update_on_the_fp32_model_of_a_bf16_weights_run_is_refused(toy_data, tmp_path):
    run, _ = start(toy_data, tmp_path / "run", "bf16-weights")
    with pytest.raises(RuntimeError, match="compute_model"):
        update(run, run.model, batches(toy_data, 1)[0])


def captured_gradients(run, net, batch) -> tuple[dict, dict]:
    """The gradients the optimizer steps on (after `update_step`'s norm and clipping) and the update's result."""
    seen: dict = {}
    real_step = run.optimizer.step

    def record(*args, **kwargs):
        seen.update({n: p.grad.clone() for n, p in run.model.named_parameters() if p.grad is not None})
        return real_step(*args, **kwargs)

    run.optimizer.step = record
    result = update(run, net, batch)
    return seen, result


def relative_difference(a: dict, b: dict) -> float:
    diff = math.sqrt(sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in b))
    return diff / math.sqrt(sum(float(g.double().pow(2).sum()) for g in b.values()))


def test_one_updates_gradients_are_the_fp32_ones_to_bf16_rounding(toy_data, tmp_path):
    """The first update's gradients (as fp32 masters' gradients) against fp32 training's, beside autocast's."""
    batch = batches(toy_data, 1, size=32)[0]
    grads, results = {}, {}
    for amp in AMPS:
        run, net = start(toy_data, tmp_path / amp, amp)
        grads[amp], results[amp] = captured_gradients(run, net, batch)
    assert grads["bf16-weights"].keys() == grads["none"].keys() and grads["none"]
    assert all(g.dtype == torch.float32 for g in grads["bf16-weights"].values())
    weights, autocast = (relative_difference(grads[amp], grads["none"]) for amp in ("bf16-weights", "bf16"))
    # bf16 keeps 8 bits of mantissa (relative rounding up to 2^-9 ≈ 0.2% per value); rounded at every layer, forward
    # and backward, the gradient as a whole lands a few percent from fp32's (measured: 2.9%, autocast's 3.2%), though
    # bf16 weights also round the residual stream, which autocast keeps in fp32
    assert weights < 0.05 and autocast < 0.05, (weights, autocast)
    for key in ("loss", "grad_norm"):
        assert results["bf16-weights"][key] == pytest.approx(results["none"][key], rel=0.02)
    assert results["bf16-weights"]["ntokens"] == results["none"]["ntokens"]


@pytest.mark.system
def test_training_follows_fp32_and_autocast_over_150_updates(toy_data, tmp_path):
    """The loss over 150 updates of the toy task (tokens reversed), the three precisions on the same batches."""
    data = batches(toy_data, 150)
    losses: dict[str, list[float]] = {}
    for amp in AMPS:
        run, net = start(toy_data, tmp_path / amp, amp)
        losses[amp] = [update(run, net, b)["loss"] / b.ntokens for b in data]
    first, last = (np.array([np.mean(losses[amp][s]) for amp in AMPS]) for s in (slice(0, 10), slice(-20, None)))
    assert (last < 0.7 * first).all(), (first, last)  # every precision learns the task
    fp32, autocast, weights = (np.array(losses[amp]) for amp in AMPS)
    # without dropout, on the same batches, each update's loss stays within 2% of fp32's (measured: 0.3%, autocast's
    # 0.5%) while rounding differences compound through Adam, and the last 20 updates' mean within 1% (0.2%): bf16
    # rounds each value to 8 bits of mantissa, a relative 0.4% at worst, and the errors average out over a loss
    assert np.abs(weights / fp32 - 1).max() < 0.02 and np.abs(autocast / fp32 - 1).max() < 0.02
    assert abs(weights[-20:].mean() / fp32[-20:].mean() - 1) < 0.01, (weights[-20:].mean(), fp32[-20:].mean())
    assert abs(weights[-20:].mean() / autocast[-20:].mean() - 1) < 0.01


def test_a_nonfinite_update_is_skipped_and_leaves_both_copies_as_they_were(toy_data, tmp_path):
    run, net = start(toy_data, tmp_path / "run", "bf16-weights")
    first = next(net.parameters())
    hook = first.register_hook(lambda g: torch.full_like(g, math.inf))
    masters = {k: v.clone() for k, v in run.model.state_dict().items()}
    params = [p.clone() for p in net.parameters()]
    assert update(run, net, batches(toy_data, 1)[0]) is None
    assert all(torch.equal(masters[k], v) for k, v in run.model.state_dict().items())
    assert all(torch.equal(a, p) for a, p in zip(params, net.parameters(), strict=True))
    assert not run.optimizer.state and run.progress.skipped_updates == 1
    assert all(p.grad is None for p in net.parameters())  # the next update's backward does not add to them
    hook.remove()
    result = update(run, net, batches(toy_data, 1)[0])
    assert result is not None and math.isfinite(result["grad_norm"])
    assert all(
        torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(net.parameters(), run.model.parameters(), strict=True)
    )


def test_nonfinite_updates_in_the_loop_are_skipped(toy_data, tmp_path, monkeypatch):
    """The loop's own skip (tests/test_checkpoints.py poisons `accumulate` the same way), in bf16-weights."""
    real, calls = training.accumulate, {"n": 0}

    def accumulate(model, micro_batches, cfg, device, autocast, scaler=None):
        result = real(model, micro_batches, cfg, device, autocast, scaler)
        calls["n"] += 1
        if calls["n"] in (3, 4):
            assert next(model.parameters()).dtype == torch.bfloat16  # the loop runs on the bf16 copy
            next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = math.inf
        return result

    monkeypatch.setattr(training, "accumulate", accumulate)
    progress = train(toy_spec(max_update=8, amp="bf16-weights"), str(toy_data), "de", "en", str(tmp_path / "run"))
    assert progress["update"] == 8 and progress["skipped_updates"] == 2
    weights = load(tmp_path / "run" / LAST)["model"]
    assert all(torch.isfinite(t).all() and t.dtype == torch.float32 for t in weights.values() if t.is_floating_point())


def test_resume_is_bit_for_bit_and_the_checkpoint_holds_the_fp32_masters(toy_data, tmp_path):
    spec = toy_spec(max_update=10, save_interval_updates=4, amp="bf16-weights")
    train(spec, str(toy_data), "de", "en", str(tmp_path / "a"), str(tmp_path / "model.pt"))
    train({**spec, "train": {**spec["train"], "max_update": 5}}, str(toy_data), "de", "en", str(tmp_path / "b"))
    stopped = load(tmp_path / "b" / LAST)
    assert stopped["progress"]["update"] == 5 and stopped["progress"]["next_batch"] > 0  # mid-epoch
    train(spec, str(toy_data), "de", "en", str(tmp_path / "b"))
    a, b = load(tmp_path / "a" / LAST), load(tmp_path / "b" / LAST)
    assert a["progress"]["update"] == b["progress"]["update"] == 10
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
        assert not tensor.is_floating_point() or tensor.dtype == torch.float32, key  # the masters, not bf16
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg"], pb["exp_avg"]) and torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])
        assert pa["exp_avg"].dtype == torch.float32
    cfg = TrainConfig.from_dict(spec["train"])
    assert recorded_precision(a, cfg, CPU) == Precision.from_dict(a["precision"]) == chosen("bf16-weights")
    final = load(tmp_path / "model.pt")
    assert final["precision"]["amp"] == "bf16-weights" and final["precision"]["computes"] == "bf16-weights"
    assert all(t.dtype == torch.float32 for t in final["model"].values() if t.is_floating_point())


def test_auto_that_picked_bf16_weights_resumes_in_it(toy_data, tmp_path, monkeypatch):
    picked = Precision(
        "bf16-weights", "auto", "measured: bf16 1.50x, bf16-weights 1.60x fp32", device_name(CPU), "bf16 1.50x"
    )
    monkeypatch.setattr(training, "resolve", lambda *args, **kwargs: picked)
    train(toy_spec(max_update=2, amp="auto"), str(toy_data), "de", "en", str(tmp_path / "run"))
    assert Precision.from_dict(load(tmp_path / "run" / LAST)["precision"]) == picked
    monkeypatch.setattr(training, "resolve", lambda *args, **kwargs: pytest.fail("the resumed run chose again"))
    seen = []
    real = master_weights.compute_model
    monkeypatch.setattr(master_weights, "compute_model", lambda m, p, d=False: seen.append(p.amp) or real(m, p, d))
    train(toy_spec(max_update=4, amp="auto"), str(toy_data), "de", "en", str(tmp_path / "run"))
    assert seen == ["bf16-weights"]


def fake_step(seconds: dict, calls: list):
    """A probe step that computes for `seconds[amp]` of this thread's CPU time, what a CPU probe is timed in."""

    def step(amp):
        calls.append(amp)
        end = time.thread_time() + seconds[amp]
        while time.thread_time() < end:
            pass

    return step


@pytest.mark.parametrize(
    "seconds, expected",
    [
        ({"none": 0.030, "bf16": 0.020, "bf16-weights": 0.015}, "bf16-weights"),  # 1.33x autocast
        ({"none": 0.030, "bf16": 0.015, "bf16-weights": 0.020}, "bf16"),  # autocast the faster bf16
        ({"none": 0.030, "bf16": 0.019, "bf16-weights": 0.0185}, "bf16"),  # 1.03x autocast: within the noise
        ({"none": 0.030, "bf16": 0.028, "bf16-weights": 0.020}, "bf16-weights"),  # autocast too slow for fp32's margin
        ({"none": 0.020, "bf16": 0.030, "bf16-weights": 0.019}, "none"),  # 1.05x fp32: within the noise, fp32 kept
    ],
)
def test_auto_picks_bf16_weights_only_where_they_beat_fp32_and_autocast(monkeypatch, tmp_path, seconds, expected):
    """Each bf16 variant must beat fp32 by the probe's margin; bf16 weights replace autocast only where they are
    clearly faster than it too, so that where the two are as fast machines of one type do not split between them."""
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precisions, "cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(precisions, "cpu_has_native_bf16", lambda: True)
    calls: list[str] = []
    workload = Workload("train", {"model": "m"}, fake_step(seconds, calls), amps=AMPS)
    picked = precisions.resolve("auto", CPU, workload)
    assert picked.amp == expected and all(calls.count(amp) >= 3 for amp in AMPS)
    assert "bf16-weights" in picked.measured and ("as bf16 is not" in picked.reason) == (expected == "none")
    again = Workload("train", {"model": "m"}, lambda amp: pytest.fail("measured again"), amps=AMPS)
    assert precisions.resolve("auto", CPU, again) == picked  # cached
    two = Workload("train", {"model": "m"}, fake_step(seconds, calls))  # a two-way choice is a choice of its own
    assert precisions.resolve("auto", CPU, two).amp in ("none", "bf16")


def test_the_training_probe_times_bf16_weights_and_leaves_the_model_as_it_was(toy_data, tmp_path):
    run, _ = start(toy_data, tmp_path / "run", "none", dropout=0.1)
    workload = precision_probe.training_workload(run.model, run.cfg, CPU)
    assert workload.amps == AMPS
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    rng = torch.get_rng_state()
    for amp in AMPS:
        workload.step(amp)
    assert all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())
    assert all(p.grad is None and p.dtype == torch.float32 for p in run.model.parameters())
    assert torch.equal(rng, torch.get_rng_state())


def test_decoding_in_bf16_weights_decodes_a_bf16_copy(toy_data):
    from layerwise_nmt.inference import decode
    from layerwise_nmt.inference.decode import BeamConfig
    from layerwise_nmt.models import build

    src_vocab, tgt_vocab = load_pair(toy_data, "de", "en")
    spec = toy_spec()
    torch.manual_seed(0)
    model = build(spec["model"], {**spec["arch"], "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)})
    lines = ["w1 w2 w3", "w4 w5"]
    outputs = {}
    for amp in ("bf16", "bf16-weights"):
        results, stats = decode.decode_lines(model, lines, src_vocab, tgt_vocab, BeamConfig(beam=2, amp=amp), "test")
        assert stats["precision"]["amp"] == amp and all(r for r in results)
        outputs[amp] = [r[0].score for r in results]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the caller's model is not converted
    assert outputs["bf16-weights"] == pytest.approx(outputs["bf16"], rel=0.05, abs=0.05)


@pytest.mark.system
def test_two_ranks_train_in_bf16_weights(toy_data, tmp_path):
    """DDP over the bf16 copy (`lwnmt train --ranks 2`, two gloo ranks): its gradients are reduced in bf16, each rank
    steps its own masters with the same reduced gradients, and rank 0's checkpoint holds fp32 masters."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "layerwise_nmt", "train", "--spec"]
    cmd += [json.dumps(toy_spec(max_update=3, update_freq=2, amp="bf16-weights"))]
    cmd += ["--data", str(toy_data), "--src", "de", "--tgt", "en", "--save-dir", str(tmp_path / "run")]
    result = subprocess.run([*cmd, "--threads", "1", "--ranks", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "data-parallel: 2 ranks (gloo)" in result.stderr and "precision: bf16-weights" in result.stderr
    state = load(tmp_path / "run" / LAST)
    assert state["progress"]["update"] == 3 and state["progress"]["skipped_updates"] == 0
    assert all(t.dtype == torch.float32 for t in state["model"].values() if t.is_floating_point())


def test_the_probe_copies_a_model_that_keeps_its_last_auxiliary_loss():
    """Dou et al.'s layer-diversity model keeps the last forward's auxiliary loss on itself, part of that forward's
    graph: the probe's bf16 copy, made after the fp32 and autocast steps, failed to deepcopy it and stopped the run."""
    from layerwise_nmt.models import build

    model = build(
        "deep",
        {
            "preset": "small",
            "encoder_layers": 2,
            "decoder_layers": 2,
            "d_model": 32,
            "d_ff": 64,
            "heads": 4,
            "src_vocab": 40,
            "tgt_vocab": 40,
            "aggregation": "hierarchical",
            "diversity": 1.0,
        },
    ).train()
    workload = precision_probe.training_workload(
        model, TrainConfig.from_dict({"max_tokens": 256, "max_update": 1}), CPU
    )
    for amp in AMPS:
        workload.step(amp)
    assert model.auxiliary_loss is not None and model.auxiliary_loss.grad_fn is not None  # the case itself


def test_a_cpu_probe_that_fails_costs_its_speed_up_not_the_run(monkeypatch):
    monkeypatch.setattr(precisions, "cpu_may_pick_bf16", lambda: True)

    class Broken:
        def choose(self):
            raise RuntimeError("a model the probe cannot copy")

    chosen = precisions.resolve("auto", CPU, Broken())
    assert chosen.amp == "none" and "the probe failed (RuntimeError)" in chosen.reason


@pytest.mark.parametrize("family", list(load_benchmark("gpu_check").FAMILIES))
def test_the_training_probe_steps_every_model_family_in_every_precision(family):
    """`amp: auto`'s probe runs fp32 and autocast before it copies the model to bf16: whatever a family leaves on its
    modules after a forward must not stop the copy (Dou's auxiliary loss did)."""
    from layerwise_nmt.models import build

    gpu_check = load_benchmark("gpu_check")
    spec = gpu_check.family_spec(family, "fp32")
    model = build(spec["model"], {**spec["arch"], "src_vocab": 40, "tgt_vocab": 40}).train()
    workload = precision_probe.training_workload(model, TrainConfig.from_dict(spec["train"]), CPU)
    for amp in AMPS:
        workload.step(amp)
    assert all(p.dtype == torch.float32 and p.grad is None for p in model.parameters())
