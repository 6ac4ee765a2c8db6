"""`amp: auto`: the precision follows the device; an explicit choice wins; `lwnmt plan` prices rows in theirs."""

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from layerwise_nmt import UserError, precision
from layerwise_nmt import grid as cfg
from layerwise_nmt.budgets import GPUS, Pricing, experiment_cost


@pytest.mark.parametrize("capability, native, expected", [
    ("AVX512", True, "bf16"),   # e.g. Xeon with AMX / AVX512_BF16, AMD Zen 4
    ("AMX", True, "bf16"),
    ("AVX2", True, "none"),     # native bf16 in the CPU, but PyTorch's kernels restricted to AVX2: emulated
    ("AVX512", False, "none"),  # AVX-512 without bf16 (Skylake-SP, Ice Lake)
    ("AVX2", False, "none"),    # AVX2-only CPUs (AMD before Zen 4, most laptops)
])
def test_auto_on_cpu_picks_bf16_only_where_the_cpu_runs_it_natively(monkeypatch, capability, native, expected):
    monkeypatch.setattr(precision, "cpu_capability", lambda: capability)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    chosen = precision.resolve("auto", torch.device("cpu"))
    assert chosen.amp == expected and chosen.requested == "auto"
    assert capability in chosen.reason or "no AVX512_BF16" in chosen.reason


def test_explicit_precision_wins_and_fp16_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.resolve("bf16", torch.device("cpu")).amp == "bf16"
    assert precision.resolve("none", torch.device("cpu")).amp == "none"
    with pytest.raises(UserError, match="amp=fp16 needs a CUDA GPU"):
        precision.resolve("fp16", torch.device("cpu"))
    with pytest.raises(UserError, match="expected one of auto, none, bf16, fp16"):
        precision.resolve("fp8", torch.device("cpu"))


def test_auto_on_cuda_follows_bf16_support(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert precision.resolve("auto", torch.device("cuda")).amp == "fp16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    chosen = precision.resolve("auto", torch.device("cuda"))
    assert chosen.amp == "bf16" and chosen.device == "Tesla V100-SXM2-16GB"


def test_avx2_emulation_makes_auto_choose_fp32():
    """The real environment switch, in a fresh process: PyTorch's kernels at AVX2 → fp32 whatever the CPU has."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", "import torch, json; from layerwise_nmt import precision; "
                          "p = precision.resolve('auto', torch.device('cpu')); print(json.dumps(p.to_dict()))"],
                         env=env, capture_output=True, text=True, check=True).stdout
    chosen = json.loads(out)
    assert chosen["amp"] == "none" and "AVX2" in chosen["device"]


def test_autocast_context_matches_the_precision():
    cpu = torch.device("cpu")
    with precision.Precision("bf16", "auto", "", "cpu").autocast(cpu):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with precision.Precision("none", "auto", "", "cpu").autocast(cpu):
        assert not torch.is_autocast_enabled("cpu")


def test_plan_prices_each_row_in_the_precision_it_trains_in():
    config = cfg.load(ROOT / "config.yaml")
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
    assert Pricing("a100", tflops=50).rate("tf32") == pytest.approx(25)  # a stated rate scales by peak ratios


def test_plan_cli_names_the_gpu_and_its_rates():
    run = lambda *args: subprocess.run([sys.executable, "-m", "layerwise_nmt", "plan", *args],  # noqa: E731
                                       capture_output=True, text=True, cwd=ROOT)
    out = run("--gpu", "v100").stdout
    assert "NVIDIA V100 SXM2 (--gpu v100)" in out and "sustained TFLOP/s fp16 41.2, fp32 5.18;" in out
    assert out.split("\ngca T2 ")[1].splitlines()[0].split()[-1] == "fp16"
    bad = run("--gpu", "k80")
    assert bad.returncode != 0 and f"--gpu k80: unknown GPU; known: {', '.join(GPUS)}" in bad.stderr


@pytest.mark.parametrize("amp", ["none", "auto"])
def test_the_precision_a_run_used_is_logged_and_in_training_json(toy_data, tmp_path, caplog, amp):
    import logging

    from conftest import toy_spec
    from layerwise_nmt.train import train

    with caplog.at_level(logging.INFO, logger="layerwise_nmt.train"):
        train(toy_spec(max_update=2, amp=amp), str(toy_data), "de", "en", str(tmp_path / "run" / "checkpoints"),
              str(tmp_path / "model.pt"))
    expected = precision.resolve(amp, torch.device("cpu"))
    summary = json.loads(next(tmp_path.rglob("training.json")).read_text())
    assert summary["precision"] == expected.to_dict() and summary["precision"]["requested"] == amp
    assert f"precision: {expected.amp} (amp: {amp}; {expected.reason}) on cpu: " in caplog.text


def test_tables_say_what_each_run_computed_in_beside_the_papers_precision(tmp_path):
    from layerwise_nmt.report.tables import precision_lines

    from layerwise_nmt.grid import save_dir

    runs = {}
    for name, amp, device in (("a", "bf16", "cpu: Xeon (AVX512)"), ("b", "none", "cpu: EPYC (AVX2)")):
        Path(save_dir(str(tmp_path / name))).mkdir(parents=True)
        (Path(save_dir(str(tmp_path / name))) / "training.json").write_text(json.dumps(
            {"precision": {"amp": amp, "requested": "auto", "reason": "", "device": device}}))
        runs[name] = [str(tmp_path / name)]
    spec = {"precision": "The paper: fp32.", "rows": [
        {"label": "baseline", "state": "ok", "runs": runs["a"]}, {"label": "LWC", "state": "ok", "runs": runs["b"]},
        {"label": "quoted", "state": "quoted"}]}
    lines = precision_lines(spec)
    assert lines[1] == ("Our runs' precision: bf16 (amp: auto) on cpu: Xeon (AVX512): baseline; "
                        "fp32 (amp: auto) on cpu: EPYC (AVX2): LWC.")
    assert lines[2] == "The paper's precision and ours: The paper: fp32."
    spec["rows"][1]["runs"] = runs["a"]  # one precision for every run: said once, without the row list
    assert precision_lines(spec)[1] == "Our runs' precision: bf16 (amp: auto) on cpu: Xeon (AVX512)."
