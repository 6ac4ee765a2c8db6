"""The GPU's correctness checks as tests, on the GPU itself (`make gpu-check`; skipped without CUDA): every model
family in every precision the device can train in overfits a batch, resumes bit for bit, decodes by cached beam search
as by full recomputation and replays its updates as CUDA graphs; data-parallel training and the GPU lock.

They are benchmarks/gpu_check.py's checks, which an offline GPU node also runs into gpu.json (docs/usage.md); their
CPU path is tests/test_gpu_check.py's. LWNMT_TEST_DEVICE=cpu runs this file on a CPU, to check the tests themselves.
"""

import os

import pytest
import torch

from conftest import load_benchmark

pytestmark = pytest.mark.gpu

gpu_check = load_benchmark("gpu_check")
DEVICE = torch.device(os.environ.get("LWNMT_TEST_DEVICE") or "cuda")
CHECKS = ("overfit", "resume", "beam", "graphs")


@pytest.fixture(scope="module")
def device():
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (make gpu-check)")
    return DEVICE


@pytest.fixture(scope="module")
def data(tmp_path_factory, device):
    return gpu_check.toy_data(tmp_path_factory.mktemp("toy"))


def run_check(check: str, family: str, label: str, device, data, work) -> dict:
    if check == "beam":
        return gpu_check.check_beam(family, label, device)
    return getattr(gpu_check, f"check_{check}")(family, label, device, data, work)


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("label", list(gpu_check.PRECISIONS))
@pytest.mark.parametrize("family", list(gpu_check.FAMILIES))
def test_each_family_trains_resumes_decodes_and_replays_in_each_precision(family, label, check, device, data, tmp_path):
    if label not in gpu_check.precisions(device):
        pytest.skip(f"{label}: not a precision this {device.type} trains in")
    result = run_check(check, family, label, device, data, tmp_path)
    assert result["ok"], result


def test_data_parallel_gradients_equal_the_plain_models(device, data, tmp_path):
    result = gpu_check.check_ddp(device, data, tmp_path)
    assert result["ok"], result


def test_a_job_claims_its_gpu_through_the_lock_files_before_cuda_starts(device, tmp_path):
    if device.type != "cuda":
        pytest.skip("the GPU lock needs CUDA")
    result = gpu_check.check_gpu_lock(tmp_path)
    assert result["ok"], result
