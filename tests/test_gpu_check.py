"""benchmarks/gpu_check.py's CPU-side logic, and its correctness checks run on the CPU (the same code path the GPU
runs): nothing here needs CUDA."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def test_mfu_is_six_n_tokens_over_the_bf16_peak_of_plan_gpus():
    key, peak = gpu_check.gpu_peak("NVIDIA H100 80GB HBM3")
    assert (key, peak) == ("h100", 989)
    assert gpu_check.gpu_peak("NVIDIA A100-SXM4-80GB")[0] == "a100"
    assert gpu_check.gpu_peak("NVIDIA A10")[0] == "a10"
    assert gpu_check.gpu_peak("Tesla V100-SXM2-16GB") == ("v100", 125)  # no bf16: its fp16 peak
    assert gpu_check.gpu_peak("cpu: AMD EPYC") == (None, None)
    # Transformer big (~210M parameters) at 250K target tokens/s on an H100: 31.9%
    assert gpu_check.mfu(210_000_000, 250_000, 989) == pytest.approx(6 * 210e6 * 250e3 / 989e12)
    assert gpu_check.mfu(210_000_000, 250_000, None) is None


def test_batches_follow_the_real_lengths_and_the_token_budget():
    src = np.array([5, 9, 30, 12, 7, 2000])
    tgt = np.array([6, 8, 28, 15, 7, 3])
    batches = gpu_check.real_batches(src, tgt, 40, (100, 120))
    kept = sorted(i for b in batches for i in b.ids)
    assert kept == [0, 1, 2, 3, 4]  # the pair longer than max_positions is left out
    for b in batches:
        assert b.src.size(0) * max(b.src.size(1), b.tgt.size(1)) <= 40 or b.src.size(0) == 1
        assert b.ntokens == int((b.tgt != 1).sum()) == sum(int(tgt[i]) for i in b.ids)
        assert (b.tgt[:, :][b.tgt != 1] < 120).all() and (b.prev[:, 0] == 2).all()
        assert all(int((b.src[r] != 1).sum()) == src[i] for r, i in enumerate(b.ids))


def test_lengths_are_read_from_the_mirror_files(mirror):
    src, tgt = gpu_check.read_lengths(mirror, "iwslt14")
    assert len(src) == len(tgt) == 7283 + 6750
    wmt_src, _ = gpu_check.read_lengths(mirror, "newstest2013")
    assert len(wmt_src) == 3000 and 20 < wmt_src.mean() < 35


def test_missing_data_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(SystemExit, match="valid.de: missing; pass --data"):
        gpu_check.read_lengths(tmp_path, "iwslt14")


def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--json",
                             str(tmp_path / "gpu.json")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().splitlines() == [
        "gpu-check: no CUDA device visible to PyTorch; nothing checked (run it on a GPU machine)"]
    assert not (tmp_path / "gpu.json").exists()


def test_checks_pass_on_the_cpu_and_fail_when_the_model_is_broken(tmp_path, monkeypatch):
    device = torch.device("cpu")
    data = gpu_check.toy_data(tmp_path / "toy")
    amp = gpu_check.precisions(device)[-1]
    assert gpu_check.check_overfit("transformer_post", amp, device, data, tmp_path)["ok"]
    assert gpu_check.check_beam("deep", amp, device)["ok"]
    resume = gpu_check.check_resume("transformer_pre", amp, data, tmp_path)
    assert resume["ok"] and resume["exact"]
    assert gpu_check.check_ddp(device, data, tmp_path) == {"ok": True, "how": "one-rank gloo group",
                                                           "max_grad_diff": 0.0}
    # a cache that drops the last step's token: the beam check must catch it
    from layerwise_nmt.decode import Recompute

    class Stale(Recompute):
        def step(self, last, state):
            return super().step(torch.full_like(last, 5), state)

    monkeypatch.setattr("layerwise_nmt.decode.Recompute", Stale)
    assert not gpu_check.check_beam("transformer_post", amp, device)["ok"]


def test_report_shape(tmp_path):
    checks = {"families": {"transformer_post/none": {"overfit": {"ok": True}, "resume": {"ok": False}}},
              "ddp": {"ok": True}, "gpu_lock": {"ok": True, "skipped": "no CUDA device"}}
    result = json.loads(json.dumps(gpu_check.report(torch.device("cpu"), checks, [{"model": "x"}])))
    assert result["all_checks_ok"] is False and result["speed"] == [{"model": "x"}]
    assert result["device"].startswith("cpu: ") and result["peak_bf16_tflops"] is None
    assert set(result) >= {"device", "torch", "mfu_formula", "peak_source", "checks", "speed", "gpus_visible"}
