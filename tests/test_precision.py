"""`amp: auto`: the precision follows the device and, on a CPU with native bf16, a measurement; an explicit choice
wins; `lwnmt plan` prices rows in theirs."""

from collections import Counter
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT
from layerwise_nmt import UserError
from layerwise_nmt.training import precision, precision_probe
from layerwise_nmt import grid
from layerwise_nmt.grid.pricing import GPUS, Pricing, experiment_cost
from layerwise_nmt.training.precision_probe import Workload


@pytest.mark.parametrize(
    "capability, native",
    [
        ("AVX2", True),  # native bf16 in the CPU, but PyTorch's kernels restricted to AVX2: emulated
        ("AVX512", False),  # AVX-512 without bf16 (Skylake-SP, Ice Lake)
        ("AVX2", False),  # AVX2-only CPUs (AMD before Zen 4, most laptops)
    ],
)
def test_auto_on_cpu_without_native_bf16_is_fp32_without_a_probe(monkeypatch, capability, native):
    monkeypatch.setattr(precision, "cpu_capability", lambda: capability)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    never = Workload("train", {}, lambda amp: pytest.fail("probed a CPU where bf16 is emulated"))
    chosen = precision.resolve("auto", torch.device("cpu"), never)
    assert chosen.amp == "none" and chosen.requested == "auto" and not chosen.measured
    assert capability in chosen.reason or "no AVX512_BF16" in chosen.reason


def compute(seconds: float) -> None:
    """Work for `seconds` of this thread's CPU time: what a CPU probe step is timed in."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def fake_step(seconds: dict, calls: list, gpu: bool = False):
    """A probe step that computes for `seconds[amp]` (on a GPU: waits, as the host does for the device), recording
    each call's precision."""

    def step(amp):
        calls.append(amp)
        (time.sleep if gpu else compute)(seconds[amp])

    return step


@pytest.mark.parametrize(
    "fp32_s, bf16_s, expected",
    [
        (0.03, 0.02, "bf16"),  # 1.5x: an AMX Xeon, a Zen 4 EPYC
        (0.02, 0.031, "none"),  # bf16 0.64x fp32: a Xeon with AVX512_BF16 but no AMX
        (0.02, 0.019, "none"),  # 1.05x: within the noise, fp32 kept
    ],
)
def test_auto_on_a_bf16_cpu_follows_the_probe_and_says_its_numbers(monkeypatch, tmp_path, fp32_s, bf16_s, expected):
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precision, "cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    calls = []
    chosen = precision.resolve(
        "auto",
        torch.device("cpu"),
        Workload("train", {"model": "m"}, fake_step({"none": fp32_s, "bf16": bf16_s}, calls)),
    )
    assert chosen.amp == expected and calls.count("none") >= 3 and calls.count("bf16") >= 3
    ratio = f"bf16 {fp32_s / bf16_s:.2f}x fp32"
    assert ratio[:-8] in chosen.measured and chosen.to_dict()["measured"] == chosen.measured
    assert chosen.reason.startswith("measured: bf16 ") and "train step" in chosen.reason
    assert ("fp32, as bf16 is not" in chosen.reason) == (expected == "none")


def timed_step(seconds: dict[str, list[float]], calls: list):
    """A probe step whose n-th call at `amp` takes seconds[amp][n] (the first call is the untimed warm-up)."""

    def step(amp):
        calls.append(amp)
        compute(seconds[amp][calls.count(amp) - 1])

    return step


@pytest.mark.parametrize(
    "fp32_s, bf16_s, timed_rounds",
    [
        ([0.02, 0.020, 0.021], [0.04, 0.030, 0.031], 2),  # bf16 slower in every step: a clear cut after 2 rounds
        ([0.03, 0.030, 0.031], [0.04, 0.020, 0.021], 2),  # bf16 1.5x faster in every step: likewise
        ([0.02, 0.020, 0.030, 0.02, 0.02, 0.02], [0.03, 0.025, 0.018, 0.02, 0.02, 0.02], 5),  # the steps overlap
    ],
)
def test_the_probe_stops_early_only_on_a_clear_cut(monkeypatch, tmp_path, fp32_s, bf16_s, timed_rounds):
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    calls = []
    measured = Workload("train", {"model": "m"}, timed_step({"none": fp32_s, "bf16": bf16_s}, calls)).measure()
    assert calls.count("none") == calls.count("bf16") == 1 + timed_rounds
    assert measured.fp32_s >= min(fp32_s[1:]) and measured.bf16_s >= min(bf16_s[1:])


def busy_core(core: int) -> subprocess.Popen:
    """Another job on `core`: a process that computes without pause, stopped (SIGSTOP) until the probe asks."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core})
    )
    proc.send_signal(signal.SIGSTOP)
    return proc


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux's CPU affinity")
@pytest.mark.parametrize(
    "busy_during, bf16_work, expected",
    [
        (
            "bf16",
            0.7,
            "bf16",
        ),  # bf16 1.43x faster (an AMX Xeon); the other job ran through its steps: in wall time fp32
        ("none", 1.3, "none"),  # bf16 0.77x (AVX512_BF16 without AMX); the other job ran through the fp32 steps
        ("both", 0.7, "bf16"),  # the other job ran through every step
    ],
)
def test_a_busy_core_picks_the_precision_a_quiet_one_does(monkeypatch, tmp_path, busy_during, bf16_work, expected):
    """Another process computing on the probe's core, through the steps of one precision: the load that comes
    and goes on a shared machine. The pick is the quiet core's.

    Each step is a fixed amount of the probing thread's CPU time, so what the test measures is the probe's clock
    alone, not this machine's speed or its neighbours: a clock that counted the other process's share of the core
    (wall time) would see the busy steps about twice as long and pick the other precision."""
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    work = {"none": 0.02, "bf16": 0.02 * bf16_work}
    other = busy_core(core)

    def step(amp, busy):
        if busy:
            other.send_signal(signal.SIGCONT if busy_during in (amp, "both") else signal.SIGSTOP)
            time.sleep(0.02)  # the other process is scheduled
        compute(work[amp])
        if busy:
            other.send_signal(signal.SIGSTOP)

    os.sched_setaffinity(0, {core})
    try:
        quiet, busy = [], []
        for _ in range(3):
            quiet.append(Workload("train", {"load": "none"}, lambda amp: step(amp, False)).measure())
            busy.append(Workload("train", {"load": busy_during}, lambda amp: step(amp, True)).measure())
    finally:
        os.sched_setaffinity(0, before)
        other.kill()
        other.wait()
    majority = lambda probes: Counter(m.amp for m in probes).most_common(1)[0][0]  # noqa: E731
    assert majority(quiet) == expected, quiet
    assert majority(busy) == expected, (busy, quiet)
    median = lambda probes: sorted(m.speedup for m in probes)[1]  # noqa: E731
    assert 0.7 < median(busy) / median(quiet) < 1.4, (busy, quiet)  # the same finding, not only the same side


def test_the_probe_runs_once_per_machine_and_workload_and_its_choice_is_reused(monkeypatch, tmp_path):
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precision, "cpu_capability", lambda: "AMX")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    calls = []
    first = Workload("train", {"model": "m", "rows": 40}, fake_step({"none": 0.02, "bf16": 0.01}, calls))
    chosen = precision.resolve("auto", torch.device("cpu"), first)
    probed = len(calls)
    # the same workload again, now timed the other way round: the cached choice stands, nothing is measured
    again = Workload("train", {"model": "m", "rows": 40}, fake_step({"none": 0.01, "bf16": 0.02}, calls))
    assert precision.resolve("auto", torch.device("cpu"), again) == chosen and len(calls) == probed
    # another shape, another kind, another PyTorch or CPU: measured afresh
    for changed in (
        Workload("train", {"model": "m", "rows": 80}, again.step),
        Workload("decode", {"model": "m", "rows": 40}, again.step),
    ):
        assert precision.resolve("auto", torch.device("cpu"), changed).amp == "none"
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert precision.resolve("auto", torch.device("cpu"), again).amp == "none"
    key = precision_probe.cache_key("train", {"model": "m"})
    assert {"cpu", "flags", "capability", "onednn_isa", "torch", "shape", "kind", "clock"} <= set(key)
    cache = json.loads((tmp_path / precision_probe.CACHE_FILE).read_text())
    assert len(cache) == 4 and {entry["key"]["kind"] for entry in cache.values()} == {"train", "decode"}


def test_an_unreadable_cache_is_measured_anew_not_fatal(monkeypatch, tmp_path):
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    (tmp_path / precision_probe.CACHE_FILE).write_text("{not json")
    monkeypatch.setattr(precision, "cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    calls = []
    chosen = precision.resolve(
        "auto", torch.device("cpu"), Workload("decode", {}, fake_step({"none": 0.01, "bf16": 0.02}, calls))
    )
    assert chosen.amp == "none" and calls
    assert json.loads((tmp_path / precision_probe.CACHE_FILE).read_text())  # rewritten whole


def test_real_probes_leave_the_model_and_the_rng_as_they_were():
    """The training probe forks the RNG and drops its gradients; the decoding probe draws nothing: a probed run
    trains and decodes exactly as an unprobed one."""
    from conftest import tiny_model
    from layerwise_nmt.inference.config import BeamConfig
    from layerwise_nmt.inference.decode import decoding_workload
    from layerwise_nmt.training.precision_probe import training_workload
    from layerwise_nmt.training.config import TrainConfig

    model = tiny_model("transformer")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    model.train()
    workload = training_workload(model, TrainConfig(max_tokens=200), torch.device("cpu"))
    for amp in ("none", "bf16"):
        workload.step(amp)
    assert all(p.grad is None for p in model.parameters())
    model.eval()
    decoding = decoding_workload(model, BeamConfig(beam=3, batch_size=4), torch.device("cpu"), eos=2, pad=1)
    for amp in ("none", "bf16"):
        decoding.step(amp)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert workload.shape["rows"] == 8 and decoding.shape["beam"] == 3 and decoding.shape["rows"] == 4


def test_explicit_precision_wins_and_fp16_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.resolve("bf16", torch.device("cpu")).amp == "bf16"
    assert precision.resolve("none", torch.device("cpu")).amp == "none"
    with pytest.raises(UserError, match="amp=fp16 needs a CUDA GPU"):
        precision.resolve("fp16", torch.device("cpu"))
    with pytest.raises(UserError, match="expected one of auto, none, bf16, bf16-weights, fp16"):
        precision.resolve("fp8", torch.device("cpu"))


def test_auto_on_cuda_follows_bf16_support(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert precision.resolve("auto", torch.device("cuda")).amp == "fp16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    chosen = precision.resolve("auto", torch.device("cuda"))
    assert chosen.amp == "bf16" and chosen.device == "Tesla V100-SXM2-16GB"


def fake_gpu(monkeypatch, name="NVIDIA H100 80GB HBM3"):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


@pytest.mark.parametrize(
    "tf32_s, bf16_s, expected",
    [
        (0.024, 0.055, "none"),  # an H100, transformer_iwslt_de_en at 4,096 tokens: host-bound, TF32 1.3-2.2x bf16
        (0.085, 0.055, "bf16"),  # Transformer big at 12,288 tokens: bf16 1.55x TF32
    ],
)
def test_auto_on_a_bf16_gpu_follows_the_probe_and_calls_it_tf32(monkeypatch, tmp_path, tf32_s, bf16_s, expected):
    """Before: a bf16 GPU always trained in bf16, though on an H100 an IWSLT-sized model's updates ran 1.3-2.2x
    faster in TF32 (docs/benchmarks.md)."""
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    fake_gpu(monkeypatch)
    calls = []
    workload = Workload(
        "train",
        {"model": "m"},
        fake_step({"none": tf32_s, "bf16": bf16_s}, calls, gpu=True),
        torch.device("cuda"),
        "TF32",
    )
    chosen = precision.resolve("auto", torch.device("cuda"), workload)
    assert chosen.amp == expected and calls.count("none") >= 3 and chosen.device == "NVIDIA H100 80GB HBM3"
    assert chosen.measured.startswith(f"bf16 {tf32_s / bf16_s:.2f}"[:-1]) and chosen.measured.endswith("x TF32")
    assert ("TF32, as bf16 is not" in chosen.reason) == (expected == "none")
    key = precision_probe.cache_key("train", {"model": "m"}, torch.device("cuda"))
    assert key["gpu"] == "NVIDIA H100 80GB HBM3" and key["compute_capability"] == [9, 0] and "cpu" not in key
    fake_gpu(monkeypatch, "NVIDIA A100-SXM4-80GB")  # another GPU: measured afresh, not the H100's answer reused
    assert (
        precision.resolve(
            "auto",
            torch.device("cuda"),
            Workload(
                "train",
                {"model": "m"},
                fake_step({"none": 0.09, "bf16": 0.03}, calls, gpu=True),
                torch.device("cuda"),
                "TF32",
            ),
        ).amp
        == "bf16"
    )


def test_a_tf32_step_out_of_gpu_memory_picks_bf16_and_one_in_bf16_is_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    fake_gpu(monkeypatch)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    def out_of_memory_in(which):
        def step(amp):
            if amp == which:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")

        return step

    chosen = precision.resolve(
        "auto",
        torch.device("cuda"),
        Workload("train", {"rows": 512}, out_of_memory_in("none"), torch.device("cuda"), "TF32"),
    )
    assert chosen.amp == "bf16" and chosen.measured == "TF32 out of memory"
    assert (
        precision.resolve(
            "auto",
            torch.device("cuda"),
            Workload(  # cached, as any other answer
                "train", {"rows": 512}, out_of_memory_in("bf16"), torch.device("cuda"), "TF32"
            ),
        ).amp
        == "bf16"
    )
    with pytest.raises(torch.cuda.OutOfMemoryError):  # fits in neither: not a choice to cache
        Workload("train", {"rows": 1024}, out_of_memory_in("bf16"), torch.device("cuda"), "TF32").measure()
    assert (
        "probe failed (OutOfMemoryError)"
        in precision.resolve(
            "auto",
            torch.device("cuda"),
            Workload("train", {"rows": 1024}, out_of_memory_in("bf16"), torch.device("cuda"), "TF32"),
        ).reason
    )


def test_a_probe_that_fails_on_a_gpu_leaves_bf16_and_says_why(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("LWNMT_CACHE_DIR", str(tmp_path))
    fake_gpu(monkeypatch)
    chosen = precision.resolve(
        "auto", torch.device("cuda"), Workload("decode", {}, lambda amp: 1 / 0, torch.device("cuda"), "TF32")
    )
    assert chosen.amp == "bf16" and "the probe failed (ZeroDivisionError)" in chosen.reason
    assert "precision probe failed on NVIDIA H100 80GB HBM3 (ZeroDivisionError" in caplog.text


def test_a_probe_step_on_a_gpu_waits_for_its_kernels_in_the_runs_kernels(monkeypatch):
    waited = []
    monkeypatch.setattr(
        torch.cuda, "synchronize", lambda device=None: waited.append(torch.get_float32_matmul_precision())
    )
    before = torch.get_float32_matmul_precision()
    for tf32, inside in ((True, "high"), (False, "highest")):
        with precision_probe.probe_step(torch.device("cuda"), tf32):
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert waited[-1] == inside and torch.get_float32_matmul_precision() == before
    with precision_probe.probe_step(torch.device("cpu")):
        pass
    assert len(waited) == 2  # a CPU step has nothing to wait for
    assert precision_probe.full_precision(torch.device("cuda")) == "TF32"
    assert precision_probe.full_precision(torch.device("cuda"), tf32=False) == "fp32"
    assert precision_probe.full_precision(torch.device("cpu")) == "fp32"


def test_the_training_probe_times_the_runs_whole_batch_on_a_gpu_and_1024_tokens_on_a_cpu():
    from layerwise_nmt.training.precision_probe import probe_rows

    assert probe_rows(12288, 24, torch.device("cuda")) == 512
    assert probe_rows(12288, 24, torch.device("cpu")) == 42
    assert probe_rows(None, 24, torch.device("cuda")) == 42 and probe_rows(10, 24, torch.device("cpu")) == 1


def _broadcast_worker(rank, out, init):
    from layerwise_nmt.training.distributed import broadcast_object

    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    mine = precision.Precision(("bf16", "none")[rank], "auto", f"rank {rank}'s probe", "gpu")
    Path(out, f"rank{rank}.json").write_text(json.dumps(broadcast_object(mine).to_dict()))
    torch.distributed.destroy_process_group()


def test_every_rank_trains_in_rank_0s_precision(tmp_path):
    """Ranks on different machines may probe differently; each takes rank 0's answer."""
    from layerwise_nmt.training.distributed import broadcast_object

    torch.multiprocessing.spawn(_broadcast_worker, args=(str(tmp_path), f"file://{tmp_path}/rdzv"), nprocs=2)
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text())["reason"] == "rank 0's probe"
    assert broadcast_object("alone") == "alone"  # no process group: unchanged


def test_avx2_emulation_makes_auto_choose_fp32():
    """The real environment switch, in a fresh process: PyTorch's kernels at AVX2 → fp32 whatever the CPU has."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, json; from layerwise_nmt.training import precision; "
            "p = precision.resolve('auto', torch.device('cpu')); print(json.dumps(p.to_dict()))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    chosen = json.loads(out)
    assert chosen["amp"] == "none" and "AVX2" in chosen["device"]


def test_autocast_context_matches_the_precision():
    cpu = torch.device("cpu")
    with precision.Precision("bf16", "auto", "", "cpu").autocast(cpu):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with precision.Precision("none", "auto", "", "cpu").autocast(cpu):
        assert not torch.is_autocast_enabled("cpu")


def test_plan_prices_each_row_in_the_precision_it_trains_in():
    config = grid.load(ROOT / "config.yaml")
    cost = experiment_cost(config, "gca.ende.transformer")
    a100, v100 = Pricing("a100"), Pricing("v100")
    assert cost.precision(a100) == "bf16" and cost.precision(v100) == "fp16"  # amp: auto (the default)
    assert cost.hours(a100) == pytest.approx(cost.gpu_hours(312 * 0.33))
    assert cost.hours(Pricing("h100")) == pytest.approx(cost.hours(a100) * 312 / 989)
    cost.train = {**cost.train, "amp": "none"}  # fp32 rows: TF32 on GPUs that have it, never at bf16's rate
    assert cost.precision(a100) == "tf32" and cost.hours(a100) == pytest.approx(cost.gpu_hours(156 * 0.33))
    cost.train["tf32"] = False
    assert cost.precision(a100) == "fp32" and cost.hours(a100) == pytest.approx(cost.gpu_hours(19.5 * 0.33))
    assert cost.precision(v100) == "fp32"  # V100 has no TF32
    cost.train = {**cost.train, "amp": "bf16-weights"}  # bf16 matmuls without autocast: priced as bf16
    assert cost.precision(a100) == "bf16" and cost.hours(a100) == pytest.approx(cost.gpu_hours(312 * 0.33))
    assert Pricing("a100", tflops=50).rate("tf32") == pytest.approx(25)  # a stated rate scales by peak ratios


def test_plan_cli_names_the_gpu_and_its_rates():
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "layerwise_nmt", "plan", *args], capture_output=True, text=True, cwd=ROOT
        )

    out = run("--gpu", "v100").stdout
    assert "NVIDIA V100 SXM2 (--gpu v100)" in out and "sustained TFLOP/s fp16 41.2, fp32 5.18;" in out
    assert out.split("\ngca T2 ")[1].splitlines()[0].split()[-1] == "fp16"
    bad = run("--gpu", "k80")
    assert bad.returncode != 0 and f"--gpu k80: unknown GPU; known: {', '.join(GPUS)}" in bad.stderr


@pytest.mark.parametrize("amp", ["none", "auto"])
def test_the_precision_a_run_used_is_logged_and_in_training_json(toy_data, tmp_path, caplog, amp):
    import logging

    from conftest import toy_spec
    from layerwise_nmt.training.loop import train

    with caplog.at_level(logging.INFO, logger="layerwise_nmt.training.loop"):
        train(
            toy_spec(max_update=2, amp=amp),
            str(toy_data),
            "de",
            "en",
            str(tmp_path / "run" / "checkpoints"),
            str(tmp_path / "model.pt"),
        )
    used = json.loads(next(tmp_path.rglob("training.json")).read_text())["precision"]
    assert used["requested"] == amp and used["device"] == precision.device_name(torch.device("cpu"))
    assert f"precision: {used['amp']} (amp: {amp}; {used['reason']}) on cpu: " in caplog.text
    probed = amp == "auto" and precision.cpu_capability() in ("AVX512", "AMX") and precision.cpu_has_native_bf16()
    assert ("measured" in used) == probed and used["amp"] == ("none" if amp == "none" else used["amp"])


def test_tables_say_what_each_run_computed_in_beside_the_papers_precision(tmp_path, monkeypatch):
    from layerwise_nmt.job_specs import TableSpec
    from layerwise_nmt.report.tables import precision_lines

    from layerwise_nmt.grid import save_dir

    runs = {}
    for name, amp, device in (("a", "bf16", "cpu: Xeon (AVX512)"), ("b", "none", "cpu: EPYC (AVX2)")):
        Path(save_dir(str(tmp_path / name))).mkdir(parents=True)
        (Path(save_dir(str(tmp_path / name))) / "training.json").write_text(
            json.dumps({"precision": {"amp": amp, "requested": "auto", "reason": "", "device": device}})
        )
        runs[name] = [str(tmp_path / name)]
    spec = TableSpec(
        "p",
        "T1",
        precision="The paper: fp32.",
        rows=[
            {"label": "baseline", "state": "ok", "runs": runs["a"]},
            {"label": "LWC", "state": "ok", "runs": runs["b"]},
            {"label": "quoted", "state": "quoted"},
        ],
    )
    lines = precision_lines(spec)
    assert lines[1] == (
        "Our runs' precision: bf16 (amp: auto) on cpu: Xeon (AVX512): baseline; "
        "fp32 (amp: auto) on cpu: EPYC (AVX2): LWC."
    )
    assert lines[2] == "The paper's precision and ours: The paper: fp32."
    spec.rows[1]["runs"] = runs["a"]  # one precision for every run: said once, without the row list
    assert precision_lines(spec)[1] == "Our runs' precision: bf16 (amp: auto) on cpu: Xeon (AVX512)."
    measured = Path(save_dir(runs["a"][0])) / "training.json"  # the probe's finding is part of what was used
    measured.write_text(
        json.dumps(
            {
                "precision": {
                    "amp": "bf16",
                    "requested": "auto",
                    "reason": "",
                    "device": "cpu: Xeon (AVX512)",
                    "measured": "bf16 1.42x fp32",
                }
            }
        )
    )
    assert precision_lines(spec)[1] == (
        "Our runs' precision: bf16 (amp: auto; measured bf16 1.42x fp32) on cpu: Xeon (AVX512)."
    )
    fake_gpu(monkeypatch)
    on_gpu = precision.resolve("none", torch.device("cuda"))  # an fp32 row on a GPU computes in TF32, and says so
    assert on_gpu.computes == "TF32" and precision.resolve("none", torch.device("cuda"), tf32=False).computes == "fp32"
    measured.write_text(json.dumps({"precision": on_gpu.to_dict()}))
    assert precision_lines(spec)[1] == "Our runs' precision: TF32 (amp: none) on NVIDIA H100 80GB HBM3."
