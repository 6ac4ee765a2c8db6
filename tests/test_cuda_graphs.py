"""`cuda_graphs`: an update shape captured at its second update and replayed from then on (training/graphs.py).
On the CPU its `emulated` mode runs the same bookkeeping, a replay calling the captured update's Python again on
the graph's own input tensors: whatever the update reads from anywhere else is frozen at the capture, as in a CUDA
graph, so a run that replays must end with the weights of the eager run to the bit."""

import logging
import re
from collections import Counter

import pandas as pd
import pytest
import torch

from conftest import load_benchmark, toy_spec
from layerwise_nmt import UserError
from layerwise_nmt.data.batching import Batch
from layerwise_nmt.training import graphs, loop
from layerwise_nmt.training.checkpoint import LAST, load
from layerwise_nmt.training.deferred import Pending
from layerwise_nmt.training.loop import TrainConfig, train
from layerwise_nmt.training.optim import adam

CPU = torch.device("cpu")
GPU_CHECK = load_benchmark("gpu_check")
FIXED = {"bucket_growth_factor": 1.1, "max_tokens": 100, "amp": "none"}
SUMMARY = re.compile(r"^cuda_graphs: (\d+) update shapes captured; updates replayed ([\d,]+), eager ([\d,]+)$")


@pytest.fixture
def fused_when_eager(monkeypatch):
    """The eager runs compared with emulated ones step the same (fused) Adam, so that only the replay differs."""
    monkeypatch.setattr(loop, "new_optimizer", lambda model, cfg: adam(model, cfg, fused=True))


def train_in(mode: str, spec: dict, toy_data, save_dir) -> None:
    """`spec`'s training with `cuda_graphs: mode`."""
    train({**spec, "train": {**spec["train"], "cuda_graphs": mode}}, str(toy_data), "de", "en", str(save_dir))


def weights(save_dir) -> dict:
    return load(save_dir / LAST)["model"]


def assert_equal_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, tensor in a.items():
        assert torch.equal(tensor, b[key]), key


def summary(caplog) -> tuple[int, int, int]:
    lines = [m for r in caplog.records if (m := SUMMARY.match(r.getMessage()))]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    return tuple(int(n.replace(",", "")) for n in lines[0].groups())  # type: ignore[return-value]


def test_replayed_updates_train_as_the_eager_ones_to_the_bit(toy_data, tmp_path, monkeypatch, caplog):
    """200 updates with dropout over fixed shapes: every shape after its first update replays, and the weights
    equal those of the same updates taken eagerly; Adam's capturable flag is left as it was in the checkpoint."""
    spec = dict(toy_spec(max_update=200, **FIXED))
    spec["arch"] = {**spec["arch"], "dropout": 0.1}
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.loop")
    seen: Counter = Counter()
    original = loop.accumulate

    def recording(model, micro_batches, cfg, *args, **kwargs):
        seen[graphs.update_shape(micro_batches)] += 1
        return original(model, micro_batches, cfg, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "accumulate", recording)
        train_in("emulated", spec, toy_data, tmp_path / "g")
    shapes, replayed, eager = summary(caplog)
    assert sum(seen.values()) == replayed + eager == 200
    assert eager == len(seen) and shapes == sum(n > 1 for n in seen.values()) and replayed > 150
    assert load(tmp_path / "g" / LAST)["optimizer"]["param_groups"][0]["capturable"] is False

    monkeypatch.setattr(loop, "new_optimizer", lambda model, cfg: adam(model, cfg, fused=True))
    train_in("off", spec, toy_data, tmp_path / "e")
    assert_equal_weights(weights(tmp_path / "g"), weights(tmp_path / "e"))


@pytest.mark.system
def test_the_emulated_path_follows_todays_default_update_within_rounding(toy_data, tmp_path):
    """Against the CPU's default (foreach Adam, no graphs) over 300 updates: every epoch's training and validation
    loss the same to float rounding, which grows with the updates (Adam's normalised step magnifies a rounding
    difference in a gradient near zero, and fused and foreach Adam round differently: by the last epochs up to 2e-4
    of the loss on an AVX2-only Zen 3, under 1e-5 on AVX-512 CPUs); the first epochs agree to 1e-5 on any CPU."""
    spec = toy_spec(max_update=300, **FIXED)
    for name, mode in (("g", "emulated"), ("e", "off")):
        train_in(mode, spec, toy_data, tmp_path / name)
    g, e = (pd.read_csv(tmp_path / name / "metrics.csv") for name in ("g", "e"))
    assert len(g) == len(e) > 10 and g["update"].iloc[-1] == e["update"].iloc[-1] == 300
    for column in ("train_loss", "valid_loss"):
        assert g[column].to_numpy()[:5] == pytest.approx(e[column].to_numpy()[:5], rel=1e-5), column
        assert g[column].to_numpy() == pytest.approx(e[column].to_numpy(), rel=1e-3), column


def test_an_update_that_reads_a_python_number_of_its_batch_is_caught(toy_data, tmp_path, fused_when_eager):
    """The check the emulation exists for: an update normalised by the batch's Python token count (a number the
    capture would freeze) no longer trains as the eager run does."""
    spec = toy_spec(max_update=40, **FIXED)
    original = loop.accumulate

    def frozen_count(model, micro_batches, cfg, *args, **kwargs):
        sums = original(model, micro_batches, cfg, *args, **kwargs)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        torch._foreach_mul_(grads, sums["ntokens"].item() / sum(b.ntokens for b in micro_batches))
        return sums

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "accumulate", frozen_count)
        for name, mode in (("g", "emulated"), ("e", "off")):
            train_in(mode, spec, toy_data, tmp_path / name)
    g, e = weights(tmp_path / "g"), weights(tmp_path / "e")
    assert any(not torch.equal(g[key], e[key]) for key in g)


@pytest.mark.parametrize("family", [f for f in GPU_CHECK.FAMILIES if f != "deep"])  # deep's diversity: no fixed shapes
def test_every_model_family_replays_as_it_trains_eagerly(toy_data, tmp_path, family, fused_when_eager):
    for name, mode in (("g", "emulated"), ("e", "off")):
        spec = GPU_CHECK.family_spec(family, "fp32", max_update=30, cuda_graphs=mode, **FIXED)
        spec["arch"] = {**spec["arch"], "dropout": 0.1}
        train(spec, str(toy_data), "de", "en", str(tmp_path / name))
    assert_equal_weights(weights(tmp_path / "g"), weights(tmp_path / "e"))


def test_a_run_stopped_and_resumed_replays_to_the_weights_of_one_straight_run(toy_data, tmp_path):
    fixed = {**FIXED, "cuda_graphs": "emulated", "save_interval_updates": 20}
    train(toy_spec(max_update=90, **fixed), str(toy_data), "de", "en", str(tmp_path / "a"))
    train(toy_spec(max_update=50, **fixed), str(toy_data), "de", "en", str(tmp_path / "b"))
    train(toy_spec(max_update=90, **fixed), str(toy_data), "de", "en", str(tmp_path / "b"))
    a, b = load(tmp_path / "a" / LAST), load(tmp_path / "b" / LAST)
    assert a["progress"]["update"] == b["progress"]["update"] == 90
    assert_equal_weights(a["model"], b["model"])
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])


def refuse(self, body):
    raise RuntimeError("operation not permitted when stream is capturing")


def fail_after_backward(self, body):
    """A capture that fails at the clipping, after backward has set the gradients (a CUDA capture would leave
    them recorded but never computed): the eager update that follows must not add to them."""

    def boom(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "unscale_and_clip", boom)
        body()


@pytest.mark.parametrize("failing", [refuse, fail_after_backward])
@pytest.mark.parametrize("amp", ["none", "bf16-weights"])
def test_a_shape_whose_capture_fails_stays_eager_with_a_warning(
    toy_data, tmp_path, caplog, fused_when_eager, failing, amp
):
    spec = toy_spec(max_update=40, **{**FIXED, "amp": amp})
    spec["arch"] = {**spec["arch"], "dropout": 0.0}  # the emulated failure runs a forward: it must draw no RNG
    caplog.set_level(logging.INFO)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graphs.EmulatedGraph, "capture", failing)
        train_in("emulated", spec, toy_data, tmp_path / "g")
    warned = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "capture failed" in r.getMessage()
    ]
    assert warned and all("runs eagerly" in w and "operation not permitted" in w for w in warned)
    assert len(warned) == len(set(warned))  # once per shape
    assert summary(caplog) == (0, 0, 40)
    train_in("off", spec, toy_data, tmp_path / "e")
    assert_equal_weights(weights(tmp_path / "g"), weights(tmp_path / "e"))


def test_a_new_optimizer_starts_the_graphs_again():
    """RestartAdam's fresh optimizer: the graphs stepped the old one, so each shape is warmed up and captured anew."""
    model = torch.nn.Linear(2, 2)
    cfg = TrainConfig.from_dict({"max_update": 1})
    batch = Batch(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.long), torch.ones(2, 4), [0, 1], 8)
    ran = []

    def body(batches):
        ran.append(batches[0].src.data_ptr())
        return Pending(torch.zeros(7, dtype=torch.float64))

    update_graphs = graphs.UpdateGraphs(CPU, emulated=True)
    first, second = adam(model, cfg, fused=True), adam(model, cfg, fused=True)
    for optimizer in (first, first, first, second, second):
        update_graphs.update([batch], body, optimizer, lambda: None)
    assert update_graphs.counts == {"eager": 2, "captured": 2, "replayed": 3}
    assert ran[0] == batch.src.data_ptr() and ran[1] != batch.src.data_ptr()  # a replay reads the graph's inputs
    assert ran[1] == ran[2]


@pytest.mark.parametrize(
    "mode, device, amp, fixed, world, reason",
    [
        ("off", "cuda", "bf16", True, 1, "cuda_graphs: off"),
        ("auto", "cpu", "none", True, 1, "not on CUDA"),
        ("auto", "cuda", "fp16", True, 1, "fp16's loss scaler"),
        ("auto", "cuda", "bf16", True, 2, "DDP"),
        ("auto", "cuda", "bf16", False, 1, "bucket_growth_factor: 0"),
        ("auto", "cuda", "bf16-weights", True, 1, ""),
        ("emulated", "cpu", "bf16", True, 1, ""),
    ],
)
def test_where_graphs_apply(mode, device, amp, fixed, world, reason):
    why = graphs.why_not(mode, torch.device(device), amp, fixed, world)
    assert (reason in why) if reason else why == ""


def test_auto_on_the_cpu_runs_eagerly_and_a_wrong_mode_is_refused(toy_data, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    train(toy_spec(max_update=3, **FIXED), str(toy_data), "de", "en", str(tmp_path / "a"))
    assert not any(SUMMARY.match(r.getMessage()) for r in caplog.records)
    with pytest.raises(UserError, match=r"^cuda_graphs='always'; expected auto, off, emulated$"):
        TrainConfig.from_dict({"max_update": 1, "cuda_graphs": "always"})


def test_the_precision_probe_times_the_replayed_step_where_the_run_replays(toy_data, tmp_path, monkeypatch):
    """amp: auto must pick for the updates the run will take: where they are graphs, the probe's timed steps are
    replays (each precision's first, untimed call captures), the model, its gradients and the RNG left as they were,
    and the cached choice is one of its own."""
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training import precision_probe
    from layerwise_nmt.training.precision import Precision, device_name

    replays = Counter()
    replay = graphs.EmulatedGraph.replay
    monkeypatch.setattr(graphs.EmulatedGraph, "replay", lambda self: replays.update(["replay"]) or replay(self))
    spec = toy_spec(**FIXED)
    spec["arch"] = {**spec["arch"], "dropout": 0.1}
    vocabs = dict(zip(("de", "en"), load_pair(toy_data, "de", "en"), strict=True))
    keys = {}
    for mode in ("emulated", "off"):
        cfg = TrainConfig.from_dict({**spec["train"], "max_update": 10, "cuda_graphs": mode})
        run = loop.start_run(
            spec, cfg, vocabs, tmp_path / mode, CPU, Precision("none", "none", "as configured", device_name(CPU))
        )
        workload = precision_probe.training_workload(run.model, cfg, CPU)
        keys[mode] = workload.shape
        before, rng = {k: v.clone() for k, v in run.model.state_dict().items()}, torch.get_rng_state()
        for _ in range(3):
            for amp in workload.amps:
                workload.step(amp)
        assert all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())
        assert all(p.grad is None for p in run.model.parameters()) and torch.equal(rng, torch.get_rng_state())
    assert replays["replay"] == 2 * len(workload.amps)  # the emulated run's: all but each precision's first call
    assert keys["emulated"] == {**keys["off"], "cuda_graphs": True}


@pytest.fixture
def bf16_gpu(monkeypatch):
    """What growth_for_run asks of a CUDA device, on a machine that has none: a bf16 GPU."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)


@pytest.mark.parametrize(
    "train, device, world, state, growth, reason",
    [
        ({}, "cuda", 1, None, 1.1, "replay as CUDA graphs"),
        ({}, "cpu", 1, None, 0.0, "not on CUDA"),
        ({"cuda_graphs": "emulated"}, "cpu", 1, None, 1.1, "replay"),
        ({}, "cuda", 2, None, 0.0, "DDP"),
        ({"cuda_graphs": "off"}, "cuda", 1, None, 0.0, "cuda_graphs: off"),
        ({"amp": "fp16"}, "cuda", 1, None, 0.0, "fp16"),
        ({"micro_batch_tokens": 8192}, "cuda", 1, None, 0.0, "micro_batch_tokens 8192"),
        ({"bucket_growth_factor": 0}, "cuda", 1, None, 0.0, "as configured"),
        ({"bucket_growth_factor": 1.2}, "cpu", 1, None, 1.2, "as configured"),
        ({}, "cpu", 1, {"train_config": {"bucket_growth_factor": 1.1}}, 1.1, "as the run's checkpoints trained"),
        ({}, "cuda", 1, {"train_config": {"bucket_growth_factor": 0.0}}, 0.0, "as the run's checkpoints trained"),
    ],
)
def test_auto_takes_fixed_shapes_where_the_updates_replay_as_graphs(
    train, device, world, state, growth, reason, bf16_gpu
):
    from layerwise_nmt.models import build
    from layerwise_nmt.training.update_batches import growth_for_run

    model = build("transformer", {**GPU_CHECK.TINY, "src_vocab": 40, "tgt_vocab": 40})
    cfg = TrainConfig.from_dict({"max_update": 1, **train})
    decided, why = growth_for_run(cfg, model, torch.device(device), world, state)
    assert decided == growth and reason in why


def test_auto_leaves_a_model_whose_loss_fixed_shapes_would_change_in_fairseqs_batches(bf16_gpu):
    from layerwise_nmt.models import build
    from layerwise_nmt.training.update_batches import check_merging, growth_for_run

    name, extra = GPU_CHECK.FAMILIES["deep"]
    model = build(name, {**GPU_CHECK.TINY, **extra, "src_vocab": 40, "tgt_vocab": 40})
    growth, why = growth_for_run(TrainConfig.from_dict({"max_update": 1}), model, torch.device("cuda"), 1)
    assert growth == 0.0 and "diversity" in why
    check_merging(model, TrainConfig.from_dict({"max_update": 1}))  # auto: fine
    with pytest.raises(
        UserError, match=r"bucket_growth_factor=1.1: model DeepTransformer .* set bucket_growth_factor: 0"
    ):
        check_merging(model, TrainConfig.from_dict({"max_update": 1, "bucket_growth_factor": 1.1}))


@pytest.mark.parametrize(
    "value, message",
    [
        ("fast", r"bucket_growth_factor='fast'; expected auto, 0 \(off\) or at least 1"),
        (0.5, r"bucket_growth_factor=0.5; expected auto, 0 \(off\) or at least 1"),
        (-1, r"bucket_growth_factor=-1; expected auto, 0 \(off\) or at least 1"),
        (True, r"bucket_growth_factor=True; expected a number or a string"),
    ],
)
def test_a_wrong_growth_factor_is_refused_by_name(value, message):
    with pytest.raises(UserError, match=message):
        TrainConfig.from_dict({"max_update": 1, "bucket_growth_factor": value})
    TrainConfig.from_dict({"max_update": 1, "bucket_growth_factor": "auto", "micro_batch_tokens": 8192})


def test_a_run_says_which_batches_it_trained_on_and_a_resume_keeps_them(toy_data, tmp_path, caplog):
    """The default (`auto`) on the CPU: fairseq's batches; with `cuda_graphs: emulated` (the graphs' path on any
    device) fixed shapes, recorded in training.json, and kept by a resume whatever `auto` would decide then."""
    import json

    caplog.set_level(logging.INFO)

    def run(name: str, max_update: int, **more) -> None:
        spec = toy_spec(max_update=max_update, **more)
        train(spec, str(toy_data), "de", "en", str(tmp_path / name), final=str(tmp_path / name / "model.pt"))

    run("cpu", 4)
    assert json.loads((tmp_path / "cpu" / "training.json").read_text())["bucket_growth_factor"] == 0.0
    assert any(
        "bucket_growth_factor: 0 (auto: fairseq's batches (not on CUDA))" in r.getMessage() for r in caplog.records
    )
    run("graphs", 4, cuda_graphs="emulated")
    assert json.loads((tmp_path / "graphs" / "training.json").read_text())["bucket_growth_factor"] == 1.1
    assert load(tmp_path / "graphs" / LAST)["train_config"]["bucket_growth_factor"] == 1.1
    caplog.clear()
    # the same run given a larger budget resumes (the budget aside, its settings are the same) in its fixed shapes
    run("graphs", 6, cuda_graphs="emulated")
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("resumed from") for m in messages), messages
    assert any("bucket_growth_factor: 1.1 (auto, as the run's checkpoints trained)" in m for m in messages)
