"""benchmarks/train_decode.py keeps what it measured: its JSON is written whichever parts ran, from the numbers its
measuring functions return (tensors and numpy scalars among them), on a tiny training run of the toy data."""

import json
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT

pytestmark = pytest.mark.system  # the benchmarks run end to end

# train_decode.py's parts are the package beside it, which imports its sibling ctranslate2_decode
sys.path.insert(0, str(ROOT / "benchmarks"))
from train_decode_parts import chunked_loss, common, compilation, precisions, report, shapes, training  # noqa: E402

TINY = {
    "title": "a toy Transformer (32/64/4, 1+1)",
    "max_tokens": 200,
    "ours": {
        "d_model": 32,
        "d_ff": 64,
        "heads": 4,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "tie": "all",
        "dropout": 0.1,
    },
}


@pytest.fixture
def work(toy_data, tmp_path):
    """The layout `prepare` makes (ours/vocab, ours/bin-joint), on the toy data."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "vocab").symlink_to(toy_data.parent / "vocab")
    (tmp_path / "ours" / "bin-joint").symlink_to(toy_data)
    return tmp_path


def test_a_train_part_is_written_to_json_and_reported(work, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(common.MODELS, "tiny", TINY)
    # fairseq's own venv is not here: its rate stands in as a numpy scalar, as numbers read from logs may be
    monkeypatch.setattr(training, "fairseq_train", lambda *a, **k: np.float32(1000.0))
    monkeypatch.setattr(training, "THREADS", 1)  # it sets its threads for the process: one, as the suite's
    peak = {"fp32": np.float64(1e10), "bf16": np.float64(2e10), "method": "a number for the test"}
    part = training.train_part(work, "tiny", updates=2, warmup=1, peak=peak, precisions=["fp32"])
    run = {
        "machine": {"cpu": "test CPU", "load_average_at_start": (0.5, 0.4, 0.3), "cores": np.int64(2)},
        "peak_flops_per_s": peak,
        "train": {"tiny": part},
    }
    out = tmp_path / "results" / "train_decode.json"
    out.parent.mkdir()
    out.write_text(json.dumps({"runs": {"another CPU": {"train": {}}}}))
    common.record(out, {"runs": {**json.loads(out.read_text())["runs"], "test CPU": run}})

    written = json.loads(out.read_text())
    assert set(written["runs"]) == {"another CPU", "test CPU"}  # the other CPUs' entries stay
    tiny = written["runs"]["test CPU"]["train"]["tiny"]
    rates = tiny["target_tokens_per_s"]
    assert rates["fairseq 0.12.2 (fp32)"] == 1000.0 and isinstance(rates["lwnmt (fp32)"], float)
    assert rates["lwnmt (fp32)"] > 0
    assert tiny["vs_fairseq_fp32"]["lwnmt (fp32)"] == pytest.approx(rates["lwnmt (fp32)"] / 1000.0)
    assert tiny["parameters"] == part["parameters"] > 0
    assert written["runs"]["test CPU"]["machine"]["cores"] == 2
    report.report("test CPU", run)
    assert "lwnmt (fp32)" in capsys.readouterr().out


def test_a_value_json_cannot_hold_leaves_the_earlier_file_whole(tmp_path):
    out = tmp_path / "train_decode.json"
    out.write_text('{"runs": {"kept": {}}}\n')
    with pytest.raises(TypeError, match="object in the benchmark's results"):
        common.record(out, {"runs": {"kept": {}, "new": {"rate": object()}}})
    assert json.loads(out.read_text()) == {"runs": {"kept": {}}}
    common.record(out, {"runs": {"new": {"rate": torch.tensor(2.5), "shape": np.array([1, 2]), "count": np.int64(3)}}})
    assert json.loads(out.read_text()) == {"runs": {"new": {"rate": 2.5, "shape": [1, 2], "count": 3}}}


def test_the_precisions_part_times_each_precision_through_the_trainer(toy_data, capsys):
    """`--parts precisions`: fp32, bf16 autocast and bf16 weights paired round by round on the same batches."""
    torch_threads = torch.get_num_threads()
    try:
        part = precisions.precision_part(toy_data, TINY, rounds=2, warmup=1)
    finally:
        torch.set_num_threads(torch_threads)  # it computes on one thread, as the probe
    assert set(part["cpu_seconds_per_update"]) == {"fp32", "bf16", "bf16-weights"}
    assert all(s["median"] > 0 for s in part["cpu_seconds_per_update"].values())
    assert set(part["speedup_over_fp32_per_round"]) == {"bf16", "bf16-weights"}
    assert part["bf16_weights_over_bf16_per_round"]["median"] > 0 and part["rounds"] == 2
    report.report(
        "test CPU", {"machine": {"load_average_at_start": (0, 0, 0)}, "train_precisions": {"demo": {"repeats": [part]}}}
    )
    assert "bf16-weights" in capsys.readouterr().out


def test_the_shapes_part_trains_on_fairseqs_batches_and_on_fixed_shapes(toy_data, monkeypatch, capsys):
    """`--parts shapes`: the same model on both batchings, per precision; the fixed shapes' batches carry padding
    and dummy rows, so they are compared in real target tokens per CPU second."""
    monkeypatch.setitem(common.MODELS, "tiny", TINY)
    torch_threads = torch.get_num_threads()
    try:
        part = shapes.shapes_part(toy_data, "tiny", rounds=2, warmup=1, precisions=["fp32", "bf16"])
    finally:
        torch.set_num_threads(torch_threads)
    for label in ("fp32", "bf16"):
        rates, padding = part[label]["target_tokens_per_cpu_s"], part[label]["padding_share"]
        assert set(rates) == {"fairseq", "fixed 1.1"} and all(r > 0 for r in rates.values())
        assert 0 <= padding["fairseq"] < padding["fixed 1.1"] < 1  # buckets pad more than each batch's longest
        assert part[label]["fixed_over_fairseq"] == rates["fixed 1.1"] / rates["fairseq"]
    report.report("test CPU", {"machine": {"load_average_at_start": (0, 0, 0)}, "train_shapes": {"tiny": [part]}})
    assert "fixed/fairseq" in capsys.readouterr().out


def test_the_loss_part_trains_with_each_loss_and_each_used_the_loss_it_names(toy_data, monkeypatch, capsys):
    """`--parts loss`: the same model and batches with the chunked loss and fairseq's formulation, per precision;
    each variant's updates ran its own loss (counted), and the trainer's loss is the chunked one afterwards."""
    from layerwise_nmt.training import loss

    monkeypatch.setitem(common.MODELS, "tiny", TINY)
    original = dict(loss.LOSSES)
    calls = {name: 0 for name in original}

    def counted(name):
        def call(*args):
            calls[name] += 1
            return original[name](*args)

        return call

    monkeypatch.setattr(loss, "LOSSES", {name: counted(name) for name in original})
    torch_threads = torch.get_num_threads()
    try:
        part = chunked_loss.loss_part(toy_data, "tiny", rounds=2, warmup=1, precisions=["fp32", "bf16"])
    finally:
        torch.set_num_threads(torch_threads)
    assert calls == {"chunked": 6, "reference": 6}  # 3 updates of one batch, in each precision
    assert loss.smoothed_loss is original["chunked"]
    for label in ("fp32", "bf16"):
        rates = part[label]["target_tokens_per_cpu_s"]
        assert set(rates) == {"chunked", "reference"} and all(r > 0 for r in rates.values())
        assert part[label]["chunked_over_reference"] == rates["chunked"] / rates["reference"]
    report.report("test CPU", {"machine": {"load_average_at_start": (0, 0, 0)}, "train_loss": {"tiny": [part]}})
    assert "chunked/reference" in capsys.readouterr().out


def test_the_compile_part_trains_eagerly_and_compiled(toy_data, monkeypatch, capsys):
    """`--parts compile`: the same model and batches eagerly and with `compile: true` (here through Dynamo's
    tracing alone, the `eager` backend: Inductor's code generation would take a minute)."""
    from layerwise_nmt.training import compiler

    monkeypatch.setitem(common.MODELS, "tiny", TINY)
    monkeypatch.setattr(compiler, "BACKEND", "eager")
    torch._dynamo.utils.counters.clear()
    torch_threads = torch.get_num_threads()
    try:
        part = compilation.compile_part(toy_data, "tiny", rounds=2, warmup=1, precisions=["bf16"])
    finally:
        torch.set_num_threads(torch_threads)
        torch._dynamo.reset()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # the compiled variant was compiled
    for label in ("bf16",):
        rates = part[label]["target_tokens_per_cpu_s"]
        assert set(rates) == {"eager", "compiled"} and all(r > 0 for r in rates.values())
        assert part[label]["compiled_over_eager"] == rates["compiled"] / rates["eager"]
        assert part[label]["first_compiled_update_s"] >= 0
    report.report("test CPU", {"machine": {"load_average_at_start": (0, 0, 0)}, "train_compile": {"tiny": [part]}})
    assert "compiled/eager" in capsys.readouterr().out
