"""Every precision `amp: auto` can pick on CUDA runs the trainer's own code path here, on the CPU: fp16 autocast with
the loss scaler (GradScaler for the model's device type), bf16 autocast, and fp32 with the TF32 switch. A GPU only
changes the kernels underneath, so a crash or a wrong gradient in these branches shows up in CI, not at a user's
first update."""

import math

import numpy as np
import pytest
import torch

from conftest import toy_spec
from layerwise_nmt.training import precision as precisions
from layerwise_nmt.training import loop as training
from layerwise_nmt.training.checkpoint import LAST
from layerwise_nmt.data.batching import ParallelData, collate
from layerwise_nmt.data.vocab import load_pair
from layerwise_nmt.training.precision import Precision
from layerwise_nmt.training.loop import TrainConfig, start_run, update_step
from layerwise_nmt.training.reporting import Reporter

CPU = torch.device("cpu")


def as_if_on_cuda(amp: str) -> Precision:
    """The Precision `resolve` returns on a GPU for this amp (fp16: a V100/T4), built for the CPU."""
    return Precision(amp, "auto", "the CUDA branch, run on the CPU by the tests", "cpu")


def start(toy_data, save_dir, amp: str, seed: int = 1, fused: bool = False, **train):
    """fused=True: the optimizer CUDA gets (fused AdamW, to which GradScaler hands its inf flag instead of skipping
    the step itself), on the CPU's fused kernel."""
    spec = toy_spec(**train)
    spec["arch"] = {**spec["arch"], "dropout": 0.0}
    torch.manual_seed(seed)
    cfg = TrainConfig.from_dict({**spec["train"], "max_update": 100})
    run = start_run(
        spec,
        cfg,
        dict(zip(("de", "en"), load_pair(toy_data, "de", "en"), strict=True)),
        save_dir,
        CPU,
        as_if_on_cuda(amp),
    )
    if fused:
        run.optimizer = training.adam(run.model, run.cfg, fused=True)
    return run


def batch(toy_data, n: int = 12):
    return collate(ParallelData(toy_data, "train", "de", "en"), np.arange(n))


def counted(run, micro, precision) -> dict | None:
    """One update as the loop takes it: queued (`update_step`), then read and counted (`_count`, which the loop does
    once the next update is queued); its numbers, None if it was skipped."""
    pending = update_step(run, run.model, micro, CPU, lambda: precision.autocast(CPU))
    taken = training.count_update(run, pending, 0.0, Reporter(None, run.cfg), updates_per_epoch=1)
    return pending.read() if taken else None


def gradients(run) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in run.model.named_parameters() if p.grad is not None}


def one_update_gradients(toy_data, tmp_path, amp: str, fused: bool = False) -> tuple[dict, dict, object]:
    """The gradients `update_step` hands to the optimizer (after unscaling, before the step): captured by a step that
    only records them, with what the scaler hands a fused optimizer (seen["grad_scale"], seen["found_inf"])."""
    run = start(toy_data, tmp_path / f"{amp}-{fused}", amp, fused=fused)
    seen = {}
    real_step = run.optimizer.step

    def record(*args, **kwargs):
        seen.update(gradients(run))
        handed = {key: getattr(run.optimizer, key, None) for key in ("grad_scale", "found_inf")}
        result = real_step(*args, **kwargs)
        seen.update(handed)
        return result

    run.optimizer.step = record
    precision = as_if_on_cuda(amp)
    result = update_step(run, run.model, [batch(toy_data)], CPU, lambda: precision.autocast(CPU)).read()
    return seen, result, run


def test_the_scaler_follows_the_precision_and_the_models_device():
    for amp, enabled in (("fp16", True), ("bf16", False), ("none", False)):
        scaler = training.loss_scaler(as_if_on_cuda(amp), CPU, batches_per_update=4)
        assert scaler.is_enabled() == enabled
    fp16 = training.loss_scaler(as_if_on_cuda("fp16"), CPU, batches_per_update=4)
    # a CUDA scaler on a CPU model disables itself (torch warns): the scaler must be the model's device type
    assert fp16._device == "cpu" and fp16.get_scale() == 128.0
    assert fp16.get_growth_interval() == 2**14 // 4  # fairseq's --fp16-scale-window: 2^14 / (GPUs × update_freq)


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
@pytest.mark.parametrize("amp, tolerance", [("fp16", 2e-2), ("bf16", 6e-2)])
def test_mixed_precision_gradients_equal_fp32_ones_after_unscaling(toy_data, tmp_path, amp, tolerance, fused):
    """fp16: the loss is scaled by 128 before backward and the gradients divided by it again before the step; what
    the optimizer sees is the fp32 gradient up to fp16 rounding (not 128× it, not an unscaled crash). Fused: the
    scaler must not hand the already unscaled gradients' optimizer its scale a second time."""
    fp32, fp32_result, _ = one_update_gradients(toy_data, tmp_path, "none")
    mixed, mixed_result, run = one_update_gradients(toy_data, tmp_path, amp, fused)
    handed = {key: mixed.pop(key) for key in ("grad_scale", "found_inf")}
    fp32 = {k: v for k, v in fp32.items() if k not in handed}
    assert handed["grad_scale"] is None  # a fused optimizer would divide the unscaled gradients by 128 again
    if fused and amp == "fp16":
        assert float(handed["found_inf"]) == 0.0  # the fused kernel's own skip flag: clean
    assert mixed.keys() == fp32.keys() and mixed
    total = math.sqrt(sum(float(g.double().pow(2).sum()) for g in fp32.values()))
    diff = math.sqrt(sum(float((mixed[k].double() - fp32[k].double()).pow(2).sum()) for k in fp32))
    assert diff <= tolerance * total, (diff, total)
    assert mixed_result["grad_norm"] == pytest.approx(fp32_result["grad_norm"], rel=tolerance)
    assert mixed_result["loss"] == pytest.approx(fp32_result["loss"], rel=tolerance)
    assert mixed_result["ntokens"] == fp32_result["ntokens"]
    if amp == "fp16":
        assert run.scaler.get_scale() == 128.0  # a clean update keeps the scale (it grows after the window)


def test_fp16_gradients_are_clipped_after_unscaling(toy_data, tmp_path):
    """Clipping the scaled gradients would make clip_norm 128× weaker: clipping must see the unscaled norm."""
    run = start(toy_data, tmp_path / "clip", "fp16", clip_norm=0.05)
    seen = {}
    real_step = run.optimizer.step
    run.optimizer.step = lambda *a, **k: (seen.update(gradients(run)), real_step(*a, **k))[1]
    precision = as_if_on_cuda("fp16")
    result = update_step(run, run.model, [batch(toy_data)], CPU, lambda: precision.autocast(CPU)).read()
    assert result["grad_norm"] > 0.05 * 2  # the toy's first gradient is well above the clip
    clipped = math.sqrt(sum(float(g.double().pow(2).sum()) for g in seen.values()))
    assert clipped == pytest.approx(0.05, rel=1e-3)


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
@pytest.mark.parametrize("amp", ["fp16", "bf16", "none"])
def test_an_overflow_skips_the_update_and_fp16_halves_the_scale(toy_data, tmp_path, amp, fused):
    run = start(toy_data, tmp_path / amp, amp, fused=fused)
    precision = as_if_on_cuda(amp)
    first = next(p for p in run.model.parameters() if p.requires_grad)
    hook = first.register_hook(lambda g: torch.full_like(g, math.inf))  # an overflow in backward
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    assert counted(run, [batch(toy_data)], precision) is None
    assert all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())  # no step taken
    # Adam's moments and step count untouched (fused: made by the step its kernel skipped, at zero)
    assert not any(s["step"] or s["exp_avg"].any() or s["exp_avg_sq"].any() for s in run.optimizer.state.values())
    assert bool(run.optimizer.state) == fused
    assert run.progress.skipped_updates == 1 and run.progress.update == 0
    assert run.scaler.get_scale() == (64.0 if amp == "fp16" else 1.0)
    hook.remove()
    result = counted(run, [batch(toy_data)], precision)
    assert result is not None and math.isfinite(result["grad_norm"])
    assert not all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())
    assert run.scaler.get_scale() == (64.0 if amp == "fp16" else 1.0)


def test_fp16_resume_keeps_the_loss_scale(toy_data, tmp_path):
    run = start(toy_data, tmp_path / "run", "fp16")
    precision = as_if_on_cuda("fp16")
    first = next(p for p in run.model.parameters() if p.requires_grad)
    hook = first.register_hook(lambda g: torch.full_like(g, math.inf))
    for _ in range(2):  # two overflows: 128 → 32
        update_step(run, run.model, [batch(toy_data)], CPU, lambda: precision.autocast(CPU))
    hook.remove()
    for _ in range(3):
        assert counted(run, [batch(toy_data)], precision) is not None
    run.save(LAST)
    resumed = start(toy_data, tmp_path / "run", "fp16")
    assert resumed.scaler.get_scale() == 32.0
    assert resumed.scaler.state_dict() == run.scaler.state_dict()  # the growth tracker too: 3 clean updates
    assert resumed.scaler.state_dict()["_growth_tracker"] == 3


def test_train_runs_fp16_end_to_end_through_the_loop_and_resumes(toy_data, tmp_path, monkeypatch):
    """`lwnmt train` with amp: fp16 (what a V100 gets): the whole loop, checkpoints and a resume, on the CPU."""
    monkeypatch.setattr(training, "resolve", lambda amp, device, workload=None, tf32=True: as_if_on_cuda("fp16"))
    straight, stopped = tmp_path / "a", tmp_path / "b"
    training.train(toy_spec(max_update=6, amp="fp16"), str(toy_data), "de", "en", str(straight))
    training.train(toy_spec(max_update=3, amp="fp16"), str(toy_data), "de", "en", str(stopped))
    training.train(toy_spec(max_update=6, amp="fp16"), str(toy_data), "de", "en", str(stopped))
    a, b = (torch.load(d / LAST, weights_only=False) for d in (straight, stopped))
    assert a["progress"]["update"] == b["progress"]["update"] == 6
    assert a["scaler"]["scale"] == b["scaler"]["scale"] == 128.0
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert a["progress"]["skipped_updates"] == 0


def test_tf32_and_attention_kernels_are_set_for_the_block_only_and_come_back():
    """fp32 on CUDA trains in TF32 and attention runs without cuDNN's backend (the same switches run here: they
    touch no device), and a caller's own settings (gpu_check's strict fp32 beam check) are restored afterwards instead
    of being changed for the rest of the process."""
    cuda = torch.device("cuda")  # only the process-wide switches: no CUDA call is made
    before = torch.get_float32_matmul_precision(), torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.enable_cudnn_sdp(True)
        with precisions.cuda_kernels(cuda, tf32=True):
            assert torch.get_float32_matmul_precision() == "high"
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.get_float32_matmul_precision() == "highest" and torch.backends.cuda.cudnn_sdp_enabled()
        with precisions.cuda_kernels(cuda, tf32=False):
            assert torch.get_float32_matmul_precision() == "highest"
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        with precisions.cuda_kernels(CPU, tf32=True):  # the CPU's settings are left alone
            assert torch.get_float32_matmul_precision() == "highest" and torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cuda.enable_cudnn_sdp(before[1])


def attention_calls_seen(monkeypatch, module) -> list[bool]:
    """Whether cuDNN's attention backend was enabled at each scaled_dot_product_attention call, with `module`'s
    CUDA kernel switch taking the CUDA branch on the CPU model."""
    from layerwise_nmt.models import layers

    real_switch, real_attention, seen = precisions.cuda_kernels, layers.F.scaled_dot_product_attention, []

    def on_cuda(device, tf32=True):
        return real_switch(torch.device("cuda"), tf32)

    def recorded(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real_attention(*args, **kwargs)

    monkeypatch.setattr(module, "cuda_kernels", on_cuda)
    monkeypatch.setattr(layers.F, "scaled_dot_product_attention", recorded)
    torch.backends.cuda.enable_cudnn_sdp(True)  # PyTorch's default, which picks cuDNN first on an H100 in bf16
    return seen


def test_training_attends_without_cudnn_and_leaves_the_process_as_it_found_it(toy_data, tmp_path, monkeypatch):
    """On an H100 (PyTorch 2.11) bf16 training ran at 6,400 target tokens/s against TF32's 82,000: cuDNN's attention
    planned every new batch shape anew. The trainer's attention runs without it; afterwards the switch is back."""
    seen = attention_calls_seen(monkeypatch, training)
    before = torch.get_float32_matmul_precision()
    training.train(toy_spec(max_update=1, amp="none"), str(toy_data), "de", "en", str(tmp_path / "run"))
    assert seen and not any(seen)
    assert torch.get_float32_matmul_precision() == before and torch.backends.cuda.cudnn_sdp_enabled()


def test_decoding_attends_without_cudnn(toy_data, tmp_path, monkeypatch):
    """Every decoding step has a new key length: cuDNN's attention would plan each step anew."""
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.inference import decode
    from layerwise_nmt.inference.decode import BeamConfig
    from layerwise_nmt.models import build

    src_vocab, tgt_vocab = load_pair(toy_data, "de", "en")
    spec = toy_spec()
    model = build(spec["model"], {**spec["arch"], "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)})
    seen = attention_calls_seen(monkeypatch, decode)
    results, _ = decode.decode_lines(
        model,
        ["ein kleines haus", "der hund"],
        src_vocab,
        tgt_vocab,
        BeamConfig(beam=2, batch_size=2, amp="none"),
        "test",
    )
    assert len(results) == 2 and seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_one_update_reads_the_device_once(toy_data, tmp_path, monkeypatch, fused):
    """The loss sums, token count, gradient norm and skip flag come back to the host in one read per update (each
    `.item()` or `.tolist()` on a CUDA tensor waits for the GPU), however many micro-batches the update has. Fused
    (CUDA's optimizer): not while the update is queued, only when the loop reads it (one update late: see
    test_throughput); the CPU's foreach path reads at once, which costs nothing there. Counted in our code."""
    import sys

    run = start(toy_data, tmp_path / "run", "none", fused=fused)
    precision = as_if_on_cuda("none")
    ours = str(training.__file__).rsplit("/", 1)[0]
    reads = []
    for name in ("item", "tolist", "__float__", "__bool__", "__int__"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            caller = sys._getframe(1).f_code
            if caller.co_filename.startswith(ours):
                reads.append(f"{_name} in {caller.co_name}")
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    pending = update_step(
        run,
        run.model,
        [batch(toy_data, 4), batch(toy_data, 8), batch(toy_data, 6)],
        CPU,
        lambda: precision.autocast(CPU),
    )
    assert reads == ([] if fused else ["tolist in read"])
    assert pending.read()["ntokens"] > 0 and reads == ["tolist in read"]


def test_training_json_counts_the_sentence_pairs_and_target_tokens_seen(toy_data, tmp_path):
    """The budget columns of the tables (updates, sentences, target tokens): counted on the device with the loss
    sums, read in the update's one sync."""
    from layerwise_nmt.data.batching import make_batches

    run_dir = tmp_path / "run"
    training.train(toy_spec(max_epoch=1, amp="none"), str(toy_data), "de", "en", str(run_dir), str(tmp_path / "m.pt"))
    summary = __import__("json").loads((run_dir / "training.json").read_text())
    data = ParallelData(toy_data, "train", "de", "en")
    batches = make_batches(data.src.sizes, data.tgt.sizes, 200, None, 1)
    assert summary["sentences"] == sum(len(b) for b in batches) == len(data.src.sizes)
    assert summary["target_tokens"] == int(data.tgt.sizes.sum())
