"""`compile: true` (training/compiler.py): the model's forward and backward compiled by torch.compile. Every
family's forward is traced by TorchDynamo on the CPU (the `eager` backend: the trainer's compile path, with
PyTorch's own kernels behind the captured graphs, seconds a model) and trains as it does eagerly; the Transformer
compiles with Inductor itself (AOTAutograd's backward, generated kernels, dropout's masks among them), whose run
must resume exactly; Inductor's code generation takes a minute a model on a CPU, so the other families are not
built by it here."""

import logging

import pandas as pd
import pytest
import torch

from conftest import load_benchmark, toy_spec
from layerwise_nmt import UserError
from layerwise_nmt.training import compiler
from layerwise_nmt.training.checkpoint import LAST, load
from layerwise_nmt.training.loop import TrainConfig, train

pytestmark = pytest.mark.system  # torch.compile on the CPU: minutes

GPU_CHECK = load_benchmark("gpu_check")


@pytest.fixture
def traced_only(monkeypatch):
    """Dynamo's tracing without AOTAutograd and Inductor: seconds instead of a minute a model on a CPU."""
    monkeypatch.setattr(compiler, "BACKEND", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def losses(save_dir) -> pd.DataFrame:
    return pd.read_csv(save_dir / "metrics.csv")


@pytest.mark.parametrize("family", GPU_CHECK.FAMILIES)
def test_every_family_compiled_trains_as_it_does_eagerly(toy_data, tmp_path, family, traced_only, caplog):
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.compiler")
    for name, compiled in (("c", True), ("e", False)):
        spec = GPU_CHECK.family_spec(family, "fp32", max_update=30, compile=compiled, amp="none")
        train(spec, str(toy_data), "de", "en", str(tmp_path / name))
    assert any("compiled by torch.compile (eager" in r.getMessage() for r in caplog.records)
    c, e = losses(tmp_path / "c"), losses(tmp_path / "e")
    assert len(c) == len(e) > 0 and c["update"].iloc[-1] == 30
    for column in ("train_loss", "valid_loss"):
        assert c[column].to_numpy() == pytest.approx(e[column].to_numpy(), rel=1e-4), column


@pytest.fixture
def one_thread():
    """Inductor's CPU kernels on more than one OpenMP thread are not bit-reproducible from one run to the next (two
    fresh runs of 20 updates on 2 threads differ in 66 of 67 tensors; eager ones do not): bit-equality holds on one
    thread, which is what the suite's workers compute on, and what this fixture sets when a test runs alone."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_an_inductor_compiled_run_stopped_and_resumed_ends_as_one_straight_run(toy_data, tmp_path, one_thread):
    """With dropout, whose masks Inductor's own random kernels draw: stopped at update 20 and resumed to 40, the
    weights and Adam's moments equal those of one run of 40, and the run learns."""
    if not compiler.cpp_compiler():
        pytest.skip("Inductor on a CPU needs a C++ compiler")
    torch._dynamo.reset()
    spec = lambda updates: {  # noqa: E731
        **toy_spec(max_update=updates, compile=True, amp="none", save_interval_updates=10),
        "arch": {**toy_spec()["arch"], "dropout": 0.1},
    }
    train(spec(40), str(toy_data), "de", "en", str(tmp_path / "a"))
    train(spec(20), str(toy_data), "de", "en", str(tmp_path / "b"))
    train(spec(40), str(toy_data), "de", "en", str(tmp_path / "b"))
    a, b = load(tmp_path / "a" / LAST), load(tmp_path / "b" / LAST)
    assert a["progress"]["update"] == b["progress"]["update"] == 40
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])
    curve = losses(tmp_path / "a")["train_loss"]
    assert curve.iloc[-1] < curve.iloc[0]


def test_compile_is_a_true_or_false_setting_off_by_default():
    assert TrainConfig().compile is False
    with pytest.raises(UserError, match=r"compile='yes'; expected true or false"):
        TrainConfig.from_dict({"compile": "yes"})


def test_a_cpu_without_a_cpp_compiler_is_told_so_in_one_line(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiler.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match=r"compile: true on a CPU needs a C\+\+ compiler"):
        compiler.compile_model(torch.nn.Linear(2, 2), torch.device("cpu"))


def test_a_run_stopped_eagerly_resumes_compiled(toy_data, tmp_path, traced_only, caplog):
    """How the same model is computed, not what: the checkpoints are resumed, not set aside."""
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.loop")
    train(toy_spec(max_update=10, amp="none"), str(toy_data), "de", "en", str(tmp_path))
    train(toy_spec(max_update=20, amp="none", compile=True), str(toy_data), "de", "en", str(tmp_path))
    assert any(r.getMessage().startswith("resumed from") for r in caplog.records)
    assert load(tmp_path / LAST)["progress"]["update"] == 20 and not list(tmp_path.parent.glob("*.superseded-*"))
