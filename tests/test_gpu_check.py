"""benchmarks/gpu_check.py's CPU-side logic, and its correctness checks run on the CPU (the same code path the GPU
runs): nothing here needs CUDA."""

import importlib.util
import itertools
import json
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, load_benchmark

pytestmark = pytest.mark.system  # the GPU check's correctness checks, run on the CPU

gpu_check = load_benchmark("gpu_check")


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


def test_fixed_shape_speed_batches_are_the_trainers_shapes_with_the_same_sentences():
    """The speed rows' before/after: `--bucket-growth-factor 0 1.1` times the same sentences in today's batches and
    in the trainer's fixed shapes (dummy rows count for nothing)."""
    from layerwise_nmt.data.batch_shapes import FixedShapes

    src, tgt = gpu_check.stored_lengths("iwslt14")
    src, tgt = src[:3000], tgt[:3000]
    today = gpu_check.real_batches(src, tgt, 4096, (100, 120))
    fixed = gpu_check.real_batches(src, tgt, 4096, (100, 120), growth=1.1)
    assert sorted(i for b in fixed for i in b.ids) == sorted(i for b in today for i in b.ids)
    assert sum(b.ntokens for b in fixed) == sum(b.ntokens for b in today)
    allowed = set(FixedShapes(1.1, 2, 4096, None).all_shapes())
    shapes = {(b.src.size(0), b.src.size(1), b.tgt.size(1)) for b in fixed}
    assert shapes <= allowed and len(shapes) < len({(b.src.shape, b.tgt.shape) for b in today})
    for b in fixed:
        assert b.src.size(0) * max(b.src.size(1), b.tgt.size(1)) <= 4096
        assert b.ntokens == int((b.tgt != 1).sum())


def test_lengths_are_read_from_the_mirror_files(mirror):
    src, tgt = gpu_check.read_lengths(mirror, "iwslt14")
    assert len(src) == len(tgt) == 7283 + 6750
    wmt_src, _ = gpu_check.read_lengths(mirror, "newstest2013")
    assert len(wmt_src) == 3000 and 20 < wmt_src.mean() < 35


def test_the_lengths_that_travel_are_the_mirrors(mirror, tmp_path):
    """A GPU machine has no data mirror: benchmarks/lengths.json carries the per-sentence lengths (numbers only)."""
    for name in gpu_check.LENGTH_FILES:
        stored, read = gpu_check.stored_lengths(name), gpu_check.read_lengths(mirror, name)
        assert all(np.array_equal(a, b) for a, b in zip(stored, read, strict=True)), name
    gpu_check.write_lengths(mirror, tmp_path / "lengths.json")
    assert (tmp_path / "lengths.json").read_text() == gpu_check.LENGTHS.read_text()


def test_missing_data_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="valid.de: missing; pass --data"):
        gpu_check.read_lengths(tmp_path, "iwslt14")


def measure_iwslt_fp32(**settings) -> dict:
    """A speed row of transformer_iwslt_de_en in fp32 on the CPU, as config.yaml defines it."""
    config = gpu_check.read_config(ROOT / "config.yaml")
    return gpu_check.measure("transformer_iwslt_de_en", config, torch.device("cpu"), "fp32", max_tokens=0, **settings)


def test_a_speed_row_is_measured_with_real_dictionaries():
    """measure() once handed ranges to the trainer as vocabularies: every speed row raised, and the script still
    said all checks passed."""
    row = measure_iwslt_fp32(updates=1, warmup=0, compile_model=False)
    assert "error" not in row and row["target_tokens_per_second"] > 0 and row["max_tokens"] == 4096
    assert row["parameters"] > 30_000_000 and row["precision"] == "fp32"


def test_a_speed_row_times_the_updates_asked_for_however_few_batches_there_are(monkeypatch):
    """On an H100, newstest2013's lengths made 9 batches of 12,288 tokens: Transformer base and big were timed over
    4 updates (9 less the 5 warm-up ones) instead of 30."""
    monkeypatch.setitem(gpu_check.SPEED_ROWS, "transformer_iwslt_de_en", ("gca.deen.transformer", "iwslt14", 512))
    real = gpu_check.real_batches
    monkeypatch.setattr(gpu_check, "real_batches", lambda *args, **kwargs: real(*args, **kwargs)[:2])
    row = measure_iwslt_fp32(updates=3, warmup=1, compile_model=False)  # batches of any size will do
    assert "error" not in row and row["updates_timed"] == 3


def test_a_graphs_speed_row_times_replays_only(monkeypatch):
    """With cuda_graphs, the shapes the timed updates take are warmed up and captured before the clock starts."""
    monkeypatch.setitem(gpu_check.SPEED_ROWS, "transformer_iwslt_de_en", ("gca.deen.transformer", "iwslt14", 512))
    real = gpu_check.real_batches
    monkeypatch.setattr(gpu_check, "real_batches", lambda *args, **kwargs: real(*args, **kwargs)[:3])
    row = measure_iwslt_fp32(updates=2, warmup=1, compile_model=False, growth=1.1, cuda_graphs="emulated")
    assert "error" not in row and row["updates_timed"] == 2 and row["cuda_graphs"] == "emulated"
    assert row["timed_updates_by_path"] == {"eager": 0, "captured": 0, "replayed": 2} and row["graphs_captured"] >= 1


BF16_CPU = ["bf16", "bf16-weights", "fp32"]  # gpu_check.precisions on a CPU with native bf16


def test_the_precisions_asked_for_are_the_speed_rows_too(tmp_path, monkeypatch):
    """`--precisions bf16-weights` keeps a short allocation to that precision's rows (it chose only the checks')."""
    timed = []
    monkeypatch.setattr(gpu_check, "measure", lambda name, config, device, label, *a: timed.append(label) or {})
    monkeypatch.setattr(gpu_check, "correctness", lambda *a, **k: None)
    args = ["--device", "cpu", "--json", str(tmp_path / "gpu.json"), "--speed-rows", "transformer_base"]
    gpu_check.main([*args, "--precisions", "bf16-weights"])
    assert timed == ["bf16-weights"]
    timed.clear()
    monkeypatch.setattr(gpu_check, "precisions", lambda device: BF16_CPU)  # whatever this CPU runs natively
    gpu_check.main(args)  # the default: each mixed precision the device trains in
    assert timed == ["bf16", "bf16-weights"]


def test_a_failing_speed_row_or_probe_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "measure", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(
        gpu_check,
        "correctness",
        lambda device, work, results, *a, **k: results.checks.update(
            {
                "families": {"transformer_post/fp32": {"overfit": {"ok": True}}},
                "ddp": {"ok": True},
                "gpu_lock": {"ok": True},
            }
        ),
    )
    out = tmp_path / "gpu.json"
    code = gpu_check.main(
        ["--device", "cpu", "--json", str(out), "--speed-rows", "transformer_base", "--precisions", "fp32"]
    )
    result = json.loads(out.read_text())
    assert code == 1 and result["all_checks_ok"] is False
    assert result["speed"][0]["error"].startswith("ZeroDivisionError") and result["speed"][0]["ok"] is False
    assert not gpu_check.all_ok({"families": {}}, [], {"runs": [{"together": 1, "error": ["Traceback"]}]})
    assert not gpu_check.all_ok({}, [])  # nothing checked is not "all passed"


def test_results_are_on_disk_after_every_check(tmp_path, monkeypatch):
    """A command killed at its limit (the GPU machine's 10 minutes) still returns the checks it finished."""
    calls = {"n": 0}

    def resume(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the kill, during the second family
        return {"ok": True}

    monkeypatch.setattr(gpu_check, "check_resume", resume)
    monkeypatch.setattr(gpu_check, "check_overfit", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_beam", lambda *a: {"ok": True})
    out = tmp_path / "gpu.json"
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(
            [
                "--device",
                "cpu",
                "--json",
                str(out),
                "--families",
                "transformer_post",
                "lwc",
                "--precisions",
                "fp32",
                "--skip-speed",
            ]
        )
    saved = json.loads(out.read_text())
    assert list(saved["checks"]["families"]) == ["transformer_post/fp32"] and saved["device"].startswith("cpu")


def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--json", str(tmp_path / "gpu.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and result.stdout.strip().splitlines() == [
        "gpu-check: no CUDA device visible to PyTorch; nothing checked (run it on a GPU machine)"
    ]
    assert not (tmp_path / "gpu.json").exists()


@pytest.mark.parametrize("label", ["fp16", "bf16", "bf16-weights", "fp32"])
def test_checks_pass_on_the_cpu_in_every_precision(tmp_path, label):
    """fp16 runs the trainer's CUDA fp16 branch (loss scaler included) on the CPU's fp16 autocast."""
    device = torch.device("cpu")
    data = gpu_check.toy_data(tmp_path / "toy")
    overfit = gpu_check.check_overfit("transformer_post", label, device, data, tmp_path)
    assert overfit["ok"] and (overfit.get("loss_scale") == 128.0) == (label == "fp16")
    assert gpu_check.check_beam("deep", label, device)["ok"]
    resume = gpu_check.check_resume("transformer_pre", label, device, data, tmp_path)
    assert resume["ok"] and resume["exact"]
    graphs = gpu_check.check_graphs("mlrf", label, device, data, tmp_path)
    if label == "fp16":
        assert graphs == {"ok": True, "skipped": "fp16's loss scaler keeps host state per update"}
    else:
        assert graphs["ok"] and graphs["exact"] and graphs["replayed_updates"] > 20


def test_checks_fail_when_the_model_is_broken(tmp_path, monkeypatch):
    device = torch.device("cpu")
    data = gpu_check.toy_data(tmp_path / "toy")
    assert gpu_check.check_ddp(device, data, tmp_path) == {
        "ok": True,
        "how": "one-rank gloo group",
        "max_grad_diff": 0.0,
    }
    # a cache that drops the last step's token: the beam check must catch it
    from layerwise_nmt.inference.decode import Recompute

    class Stale(Recompute):
        def step(self, last, state):
            return super().step(torch.full_like(last, 5), state)

    monkeypatch.setattr("layerwise_nmt.inference.decode.Recompute", Stale)
    assert not gpu_check.check_beam("transformer_post", "fp32", device)["ok"]
    assert not gpu_check.check_beam("transformer_post", "bf16", device)["ok"]  # where tokens may differ, too


def test_report_shape(tmp_path):
    checks = {
        "families": {"transformer_post/fp32": {"overfit": {"ok": True}, "resume": {"ok": False}}},
        "ddp": {"ok": True},
        "gpu_lock": {"ok": True, "skipped": "no CUDA device"},
    }
    result = json.loads(json.dumps(gpu_check.report(torch.device("cpu"), checks, [{"model": "x"}])))
    assert result["all_checks_ok"] is False and result["speed"] == [{"model": "x"}]
    assert result["device"].startswith("cpu: ") and result["peak_bf16_tflops"] is None
    assert set(result) >= {"device", "torch", "mfu_formula", "peak_source", "checks", "speed", "gpus_visible", "probe"}


def test_the_precisions_asked_for_are_the_ones_checked(tmp_path, monkeypatch):
    """The auto precision first, the rest after the speed rows and the probe; nothing more than asked."""
    seen = []
    monkeypatch.setattr(gpu_check, "check_overfit", lambda family, label, *a: seen.append(label) or {"ok": True})
    monkeypatch.setattr(gpu_check, "check_resume", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_beam", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_ddp", lambda *a: {"ok": True})
    for asked in (["fp32"], ["fp16", "fp32"]):
        seen.clear()
        assert (
            gpu_check.main(
                [
                    "--device",
                    "cpu",
                    "--json",
                    str(tmp_path / "gpu.json"),
                    "--families",
                    "transformer_post",
                    "--precisions",
                    *asked,
                    "--skip-speed",
                ]
            )
            == 0
        )
        assert seen == asked


def test_the_speed_rows_take_their_own_precisions_where_asked(tmp_path, monkeypatch):
    """--speed-precisions: the speed rows' precisions apart from the checks' (an fp16 row on a CPU without fp16
    kernels times minutes of emulation and tells nothing); without it they follow --precisions."""
    checked, timed = [], []
    monkeypatch.setattr(gpu_check, "check_overfit", lambda family, label, *a: checked.append(label) or {"ok": True})
    monkeypatch.setattr(gpu_check, "check_resume", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_beam", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_ddp", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_graphs", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_gpu_lock", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "measure", lambda name, config, device, label, *a, **k: timed.append(label) or {})
    monkeypatch.setattr(gpu_check, "auto_choice", lambda *a: {})
    for extra, speed_rows in (([], ["fp16", "fp32"]), (["--speed-precisions", "fp32"], ["fp32"])):
        checked.clear(), timed.clear()
        argv = ["--device", "cpu", "--json", str(tmp_path / "gpu.json"), "--families", "transformer_post"]
        argv += ["--precisions", "fp16", "fp32", "--speed-rows", "transformer_iwslt_de_en", *extra]
        assert gpu_check.main(argv) == 0
        assert checked == ["fp16", "fp32"] and timed == speed_rows


def test_each_speed_row_is_timed_in_todays_batches_and_in_each_fixed_shape_growth_asked(tmp_path, monkeypatch):
    timed = []

    def measure(name, config, device, label, max_tokens, updates, warmup, compiled, growth=0.0, graphs="off"):
        timed.append((name, label, growth, graphs))
        return {"target_tokens_per_second": 1000 if growth else 900, "bucket_growth_factor": growth}

    monkeypatch.setattr(gpu_check, "measure", measure)
    monkeypatch.setattr(gpu_check, "auto_choice", lambda name, config, device, tokens, measured: {"rows": measured})
    monkeypatch.setattr(gpu_check, "precisions", lambda device: BF16_CPU)  # an AVX2-only CPU would time no row
    args = gpu_check.argparse.Namespace(
        speed_rows=["transformer_iwslt_de_en"],
        precisions=None,
        speed_precisions=None,
        bucket_growth_factor=[0.0, 1.1],
        cuda_graphs=["auto"],
        compile=False,
        max_tokens=4096,
        updates=1,
        warmup=0,
    )
    results = gpu_check.Results(tmp_path / "gpu.json", torch.device("cpu"))
    rows = gpu_check.speed({}, torch.device("cpu"), args, results)
    assert [(growth, graphs) for *_, growth, graphs in timed] == [(0.0, "off"), (1.1, "off"), (1.1, "auto")] * (
        len(timed) // 3
    ) and timed
    # auto is handed every path's rows and compares its pick on the path the trainer takes (auto_choice)
    assert {row["bucket_growth_factor"] for row in rows[-1]["rows"]} == {0.0, 1.1}


@pytest.mark.parametrize(
    "picked, rates, fails",
    [
        ("bf16", {"bf16": 100_000, "tf32": 60_000}, False),  # Transformer big on an H100: bf16 the faster
        ("bf16", {"bf16": 53_000, "tf32": 118_000}, True),  # IWSLT-sized on an H100: bf16 picked, TF32 2.2x faster
        ("none", {"bf16": 53_000, "tf32": 118_000}, False),
        ("none", {"bf16": 110_000, "tf32": 100_000}, False),  # within the probe's margin: either is right
    ],
)
def test_the_auto_row_fails_where_auto_picked_the_clearly_slower_precision(monkeypatch, picked, rates, fails):
    """The speed rows measure bf16 and TF32; the auto row then starts the trainer with `amp: auto` and compares its
    pick with them."""
    from layerwise_nmt.training import loop
    from layerwise_nmt.training.precision import Precision

    config = gpu_check.read_config(ROOT / "config.yaml")
    monkeypatch.setattr(
        loop, "resolve", lambda amp, device, workload, tf32=True: Precision(picked, amp, "stand-in probe", "gpu")
    )
    measured = [
        {"precision": label, "target_tokens_per_second": rate, "updates_timed": 30} for label, rate in rates.items()
    ]
    monkeypatch.setattr(gpu_check, "_label_of_none", lambda device: "tf32")  # the GPU's name for amp: none
    row = gpu_check.auto_choice("transformer_iwslt_de_en", config, torch.device("cpu"), 4096, measured)
    assert row["picked"] == picked and row["reason"] == "stand-in probe" and ("error" in row) == fails
    assert row["measured_fastest"] == max(rates, key=rates.get)
    # rows of a toy-sized run (the node rehearsal's, on a CPU) time an update or two: their rates are not judged
    few = [{**row_, "updates_timed": 1} for row_ in measured]
    row = gpu_check.auto_choice("transformer_iwslt_de_en", config, torch.device("cpu"), 4096, few)
    assert "error" not in row and "measured_fastest" not in row and "1 update(s)" in row["not_judged"]
    # on a CPU the trainer takes fairseq's batches eagerly: rows of fixed shapes replayed as graphs are not its path
    graphed = [{**row_, "bucket_growth_factor": 1.1, "cuda_graphs": "auto"} for row_ in measured]
    row = gpu_check.auto_choice("transformer_iwslt_de_en", config, torch.device("cpu"), 4096, graphed)
    assert (row["bucket_growth_factor"], row["cuda_graphs"]) == (0.0, "off") and "error" not in row
    assert row["not_judged"] == "no row timed the trainer's path (bucket_growth_factor 0, cuda_graphs off)"
    slower_graphed = {
        "precision": "bf16",
        "target_tokens_per_second": 10**7,
        "updates_timed": 30,
        "bucket_growth_factor": 1.1,
        "cuda_graphs": "auto",
    }
    row = gpu_check.auto_choice(
        "transformer_iwslt_de_en", config, torch.device("cpu"), 4096, [*measured, slower_graphed]
    )
    assert ("error" in row) == fails and row["measured_fastest"] == max(rates, key=rates.get)


_probe_spec = importlib.util.spec_from_file_location("study_probe", ROOT / "benchmarks" / "study_probe.py")
study_probe = importlib.util.module_from_spec(_probe_spec)
_probe_spec.loader.exec_module(study_probe)


def test_the_probe_sizes_the_small_study():
    """The count with the most tokens/s in all shares the GPU; each run's seconds are the study's, shared by its
    waves less each wave's decoding and scoring."""
    runs = [{"together": 1, "total": 90_000}, {"together": 9, "total": 360_000}]
    plan = study_probe.plan(runs, study_seconds=385, tokens_per_epoch=400_000)
    assert plan["jobs"] == 9 and plan["waves"] == 2 and plan["seconds_per_run"] == round((385 - 2 * 45) / 2)
    assert plan["epochs_per_run"] == pytest.approx(40_000 * plan["seconds_per_run"] / 400_000, abs=0.1)
    saturated = study_probe.plan([{"together": 1, "total": 300_000}, {"together": 9, "total": 290_000}], 385, 1)
    assert saturated["jobs"] == 1 and saturated["waves"] == 18 and saturated["seconds_per_run"] == 30  # the floor
    failed = study_probe.plan([{"together": 1, "error": "exit 1"}], 385, 400_000)
    assert failed["jobs"] == 9 and failed["measured"] is False and failed["epochs_per_run"] is None


def test_a_probe_that_raises_is_kept_and_fails_the_run(tmp_path, monkeypatch):
    """A probe that raised was dropped: gpu.json had no probe rows and the script said all checks passed."""
    monkeypatch.setattr(gpu_check, "probe", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(
        gpu_check,
        "correctness",
        lambda device, work, results, *a, **k: results.checks.update(
            {"families": {"transformer_post/fp32": {"overfit": {"ok": True}}}, "ddp": {"ok": True}}
        ),
    )
    out = tmp_path / "gpu.json"
    code = gpu_check.main(["--device", "cpu", "--json", str(out), "--skip-speed", "--probe", str(tmp_path)])
    result = json.loads(out.read_text())
    assert code == 1 and not result["all_checks_ok"]
    assert result["probe"]["error"].startswith("ZeroDivisionError")


def test_data_parallel_runs_after_the_speed_rows_and_the_probe(tmp_path, monkeypatch):
    """A one-rank NCCL group that hangs must not cost the numbers the study is sized from."""
    order = []
    monkeypatch.setattr(gpu_check, "check_overfit", lambda *a: order.append("family") or {"ok": True})
    monkeypatch.setattr(gpu_check, "check_resume", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_beam", lambda *a: {"ok": True})
    monkeypatch.setattr(gpu_check, "check_ddp", lambda *a: order.append("ddp") or {"ok": True})
    monkeypatch.setattr(gpu_check, "measure", lambda *a, **k: order.append("speed") or {"model": "x"})
    monkeypatch.setattr(gpu_check, "probe", lambda *a, **k: order.append("probe") or {})
    gpu_check.main(
        [
            "--device",
            "cpu",
            "--json",
            str(tmp_path / "gpu.json"),
            "--families",
            "transformer_post",
            "--precisions",
            "fp32",
            "--speed-rows",
            "transformer_base",
            "--probe",
            str(tmp_path),
        ]
    )
    # a speed row per mixed precision the CPU may pick (bf16 and bf16-weights here), in one run
    assert [step for step, _ in itertools.groupby(order)] == ["family", "speed", "probe", "ddp"]


def test_one_update_per_family_in_autos_precision(tmp_path):
    device = torch.device("cpu")
    results = gpu_check.Results(tmp_path / "gpu.json", device)
    study_probe.checks(device, results, tmp_path, families=("transformer_post", "mlrf"))
    saved = json.loads((tmp_path / "gpu.json").read_text())
    label = gpu_check.precisions(device)[0]
    assert set(saved["checks"]["families"]) == {f"transformer_post/{label}", f"mlrf/{label}"}
    assert all(c["one_update"]["ok"] for c in saved["checks"]["families"].values())
    assert saved["all_checks_ok"]


def test_mixed_precision_beams_may_swap_hypotheses_that_tie_within_rounding():
    """On an H100 in bf16, LWC's cached search and its full recomputation (different kernels, different shapes)
    returned a different hypothesis whose score agreed to 0.014: a tie under bf16's rounding, not a wrong cache. In
    fp32 and TF32 any different token still fails, and in every precision so do scores that drift apart."""
    from layerwise_nmt.inference.decode import Hypothesis

    def beams(*hypotheses):
        return [[Hypothesis(tokens, score, score * len(tokens)) for tokens, score in hypotheses]]

    full = beams(([5, 6, 2], -3.100), ([5, 7, 2], -3.105))
    swapped = beams(([5, 7, 2], -3.091), ([5, 6, 2], -3.110))
    for label in ("bf16", "fp16"):
        assert gpu_check.beams_agree(swapped, full, label)["ok"]
        assert not gpu_check.beams_agree(swapped, full, label)["same_hypotheses"]
        assert not gpu_check.beams_agree(beams(([5, 6, 2], -3.6), ([5, 7, 2], -3.9)), full, label)["ok"]
    for label in ("tf32", "fp32"):
        assert not gpu_check.beams_agree(swapped, full, label)["ok"]
    assert gpu_check.beams_agree(full, full, "fp32") == {"ok": True, "same_hypotheses": True, "max_score_diff": 0.0}


def test_the_update_profile_times_and_names_where_the_time_goes(tmp_path):
    """benchmarks/profile_update.py found the H100's slow bf16 (cuDNN's attention planning every shape); on the CPU
    it runs the same way: a timed row and the ops that took the most time, in its JSON."""
    _profile_spec = importlib.util.spec_from_file_location("profile_update", ROOT / "benchmarks" / "profile_update.py")
    profile_update = importlib.util.module_from_spec(_profile_spec)
    _profile_spec.loader.exec_module(profile_update)
    out = tmp_path / "profile.json"
    assert (
        profile_update.main(
            ["--device", "cpu", "--precisions", "fp32", "--updates", "1", "--max-tokens", "128", "--json", str(out)]
            + ["--losses", "chunked", "reference"]
        )
        == 0
    )
    rows = json.loads(out.read_text())
    assert [row["loss"] for row in rows] == ["chunked", "reference"]  # the loss's before and after, in one command
    for row in rows:
        assert row["precision"] == "fp32" and row["target_tokens_per_second"] > 0
        assert row["bucket_growth_factor"] == 1.1  # the batches a GPU run takes by default, profiled eagerly
        assert any(op["name"] in ("aten::mm", "aten::addmm", "aten::bmm") for op in row["top_device_ops"])


def test_the_prepared_gpu_command_in_the_benchmarks_page_parses(capsys):
    """docs/benchmarks.md's gpu_check commands, the one prepared for the next GPU allocation among them: their flags
    are gpu_check's (a typo there would cost the allocation's one call)."""
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here: the commands would run")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    commands = re.findall(r"```bash\n(python3 benchmarks/gpu_check\.py .*?)\n```", page, re.S)
    assert len(commands) >= 2, "no gpu_check command prepared in docs/benchmarks.md"
    for command in commands:
        argv = shlex.split(command.replace("\\\n", " "))[2:]
        assert "--speed-rows" in argv and gpu_check.main(argv) == 0, command
        assert "no CUDA device visible" in capsys.readouterr().out
