"""Training semantics that matter for trust: exact resume, preemption, DDP equivalence, RestartAdam, schedules."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import pytest
import torch

from layerwise_nmt import UserError
from layerwise_nmt.job_specs import TrainSpec
from layerwise_nmt.training.average import average
from layerwise_nmt.training.checkpoint import last_checkpoints
from layerwise_nmt.data.batching import ParallelData, collate, make_batches
from layerwise_nmt.training.loop import TrainConfig, accumulate, lr_at, train
from layerwise_nmt.inference.decode import validation_search

from conftest import TOY_ARCH as ARCH
from conftest import toy_spec as spec
from conftest import train_command, training_in_the_background


@pytest.fixture(scope="module")
def data(toy_data):
    return toy_data


def final_state(save_dir: Path) -> dict:
    return torch.load(save_dir / "checkpoint_last.pt", weights_only=False)


def test_resume_is_bit_for_bit(data, tmp_path):
    train(spec(max_update=14, save_interval_updates=4), str(data), "de", "en", str(tmp_path / "a"))
    train(spec(max_update=6, save_interval_updates=4), str(data), "de", "en", str(tmp_path / "b"))
    stopped = final_state(tmp_path / "b")["progress"]
    assert stopped["update"] == 6 and stopped["next_batch"] > 0  # stopped mid-epoch, position kept
    train(spec(max_update=14, save_interval_updates=4), str(data), "de", "en", str(tmp_path / "b"))
    a, b = final_state(tmp_path / "a"), final_state(tmp_path / "b")
    assert a["progress"]["update"] == b["progress"]["update"] == 14
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert torch.equal(pa["exp_avg_sq"], pb["exp_avg_sq"])


def test_sigterm_saves_and_the_retry_resumes(data, tmp_path):
    proc, cmd, save_dir = training_in_the_background(
        spec(max_update=100000, save_interval_updates=1000), data, tmp_path
    )
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err[-2000:]
    saved = final_state(save_dir)["progress"]
    epoch_ckpt = torch.load(save_dir / "checkpoint1.pt", weights_only=False)["progress"]
    assert saved["update"] > epoch_ckpt["update"]  # saved at the signal, not only at the last checkpoint
    assert "signal" in err and not (tmp_path / "model.pt").exists()
    resumed = json.loads(cmd[cmd.index("--spec") + 1])
    resumed["train"]["max_update"] = saved["update"] + 3
    cmd[cmd.index("--spec") + 1] = json.dumps(resumed)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    last = save_dir / "checkpoint_last.pt"
    assert f"resumed from {last}: epoch {saved['epoch']}, update {saved['update']}" in result.stderr
    assert torch.load(tmp_path / "model.pt", weights_only=False)["progress"]["update"] == saved["update"] + 3


def _ddp_worker(rank, data, out, init):
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    grads = _grads(data, rank_batches=[rank], world_size=2)
    torch.save(grads, f"{out}/grads{rank}.pt")
    torch.distributed.destroy_process_group()


def _grads(data, rank_batches, world_size):
    from layerwise_nmt.models import build

    torch.manual_seed(0)
    model = build("transformer", {**ARCH, "dropout": 0.0, "src_vocab": 40, "tgt_vocab": 40})
    pd = ParallelData(data, "train", "de", "en")
    batches = make_batches(pd.src.sizes, pd.tgt.sizes, 120, None, seed=1)[:2]
    net = torch.nn.parallel.DistributedDataParallel(model) if world_size > 1 else model
    cfg = TrainConfig.from_dict({"max_update": 1})
    stats = accumulate(
        net,
        [collate(pd, batches[i]) for i in rank_batches],
        cfg,
        torch.device("cpu"),
        lambda: torch.autocast("cpu", enabled=False),
    )
    return {"stats": stats, **{name: p.grad.clone() for name, p in model.named_parameters()}}


def test_ddp_two_gloo_processes_equal_one_process_with_both_batches(data, tmp_path):
    single = _grads(data, rank_batches=[0, 1], world_size=1)
    torch.multiprocessing.spawn(_ddp_worker, args=(data, str(tmp_path), f"file://{tmp_path}/rdzv"), nprocs=2)
    for rank in (0, 1):
        ddp = torch.load(tmp_path / f"grads{rank}.pt", weights_only=False)
        assert math.isclose(ddp["stats"]["loss"], single["stats"]["loss"], rel_tol=1e-6)
        assert ddp["stats"]["ntokens"] == single["stats"]["ntokens"]
        for name, grad in single.items():
            if name != "stats":
                assert torch.allclose(ddp[name], grad, atol=1e-6, rtol=1e-4), name


def test_restart_adam_resets_moments_and_switches_batches_and_lr(data, tmp_path):
    train(
        spec(max_epoch=1, restart_after_epochs=1, restart_epochs=1, restart_lr=1e-5, restart_max_sentences=3),
        str(data),
        "de",
        "en",
        str(tmp_path / "r"),
    )
    state = final_state(tmp_path / "r")
    history = state["progress"]["history"]
    assert [row["epoch"] for row in history] == [1, 2] and state["progress"]["restarted"]
    second_stage_updates = history[1]["update"] - history[0]["update"]
    assert second_stage_updates == len(make_batches(*_sizes(data), None, 3, seed=1))  # 3-sentence batches
    steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
    assert steps == {second_stage_updates}  # fresh Adam moments at the restart
    assert history[1]["lr"] == 1e-5


def _sizes(data):
    pd = ParallelData(data, "train", "de", "en")
    return pd.src.sizes, pd.tgt.sizes


def test_schedules():
    cfg = TrainConfig.from_dict({"lr": 5e-4, "warmup_updates": 4000, "warmup_init_lr": 1e-7, "max_update": 1})
    assert math.isclose(lr_at(4000, cfg, 512), 5e-4)
    assert math.isclose(lr_at(16000, cfg, 512), 2.5e-4)
    assert lr_at(2000, cfg, 512) == pytest.approx(1e-7 + (5e-4 - 1e-7) / 2)
    noam = TrainConfig.from_dict({"lr": 1.0, "lr_scheduler": "noam", "warmup_updates": 16000, "max_update": 1})
    assert lr_at(16000, noam, 256) == pytest.approx(256**-0.5 * 16000**-0.5)  # MLRF's peak: 4.9e-4
    assert lr_at(16000, noam, 256) == pytest.approx(4.94e-4, rel=1e-2)
    assert lr_at(5, noam, 256, restarted=True) == noam.restart_lr


def test_average_is_the_mean_with_newest_metadata(tmp_path):
    for epoch, value in ((1, 1.0), (2, 2.0), (3, 6.0)):
        torch.save(
            {
                "model": {"w": torch.full((2,), value), "n": torch.tensor([epoch])},
                "model_name": "transformer",
                "model_config": {"epoch": epoch},
            },
            tmp_path / f"checkpoint{epoch}.pt",
        )
    paths = last_checkpoints(tmp_path, 2, "epoch")
    assert [p.name for p in paths] == ["checkpoint2.pt", "checkpoint3.pt"]
    average(paths, tmp_path / "avg.pt")
    avg = torch.load(tmp_path / "avg.pt", weights_only=False)
    assert torch.equal(avg["model"]["w"], torch.full((2,), 4.0)) and avg["model_config"] == {"epoch": 3}
    for n in (0, -1):  # were every checkpoint and all but the oldest (found[-n:]), in silence
        with pytest.raises(UserError, match=f"average {n} checkpoints; expected at least 1"):
            last_checkpoints(tmp_path, n, "epoch")


@pytest.mark.parametrize(
    "odd, why",
    [
        ({"w": torch.zeros(3), "n": torch.tensor([1])}, "w is [3], not [2]"),
        ({"w": torch.zeros(2)}, "it lacks n"),
        ({"w": torch.zeros(2), "n": torch.tensor([1]), "b": torch.zeros(1)}, "it has b, which the first lacks"),
    ],
)
def test_checkpoints_of_other_shapes_are_not_averaged(tmp_path, odd, why):
    """Another run's (or another model's) checkpoint among them: one line naming it, not a shape error naming
    no file, nor a key that some lack divided by all of them."""
    paths = [tmp_path / "checkpoint1.pt", tmp_path / "checkpoint2.pt"]
    for path, model in zip(paths, ({"w": torch.zeros(2), "n": torch.tensor([1])}, odd), strict=True):
        torch.save({"model": model, "model_name": "transformer", "model_config": {}}, path)
    with pytest.raises(UserError, match=f"^{paths[1]}: cannot be averaged with {paths[0]}: {re.escape(why)};"):
        average(paths, tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()


def test_early_stopping_on_validation_bleu(data, tmp_path):
    train(
        spec(max_epoch=30, patience=2, early_stop_metric="bleu", lr=1e-9, warmup_updates=1),
        str(data),
        "de",
        "en",
        str(tmp_path / "e"),
        search=validation_search,
    )
    history = final_state(tmp_path / "e")["progress"]["history"]
    assert all(0.0 <= row["valid_bleu"] <= 100.0 for row in history)
    assert len(history) < 30  # a model that cannot learn (lr 1e-9) stops after `patience` epochs without gain


def test_sentence_batches_and_length_filter():
    src, tgt = np.array([3, 5, 9, 4, 12, 6]), np.array([4, 5, 7, 3, 5, 11])  # sizes include </s>
    batches = make_batches(src, tgt, None, 2, seed=1, skip_longer_than=8)  # drops pairs 4 (12) and 5 (11)
    kept = sorted(i for b in batches for i in b)
    assert kept == [0, 1, 2, 3] and all(len(b) <= 2 for b in batches)
    assert sorted(i for b in make_batches(src, tgt, None, 2, seed=1) for i in b) == list(range(6))


def test_warm_start_copies_every_tensor_and_leaves_new_ones_at_their_default(data, tmp_path):
    from layerwise_nmt.models import build
    from layerwise_nmt.training.checkpoint import warm_start

    train(spec(max_epoch=1), str(data), "de", "en", str(tmp_path / "base"), str(tmp_path / "base.pt"))
    trained = torch.load(tmp_path / "base.pt", weights_only=False)["model"]
    fusion = {
        **ARCH,
        "src_vocab": 40,
        "tgt_vocab": 40,
        "decoder_fusion": "sa",
        "d_a": 16,
        "d_f": 16,
        "output_bias": False,
        "init": "xavier",
    }
    torch.manual_seed(7)
    fresh = build("mlrf", fusion).state_dict()
    torch.manual_seed(7)
    model = build("mlrf", fusion)
    new = warm_start(model, str(tmp_path / "base.pt"))
    assert new and all(k.startswith(("decoder_fusion.", "layer_embedding")) for k in new)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in trained.items())  # bit for bit
    assert all(torch.equal(state[k], fresh[k]) for k in new)  # default initialisation, untouched
    with pytest.raises(Exception, match="warm starts need the same sizes"):
        warm_start(build("mlrf", {**fusion, "d_model": 64, "d_ff": 64}), str(tmp_path / "base.pt"))

    # through the trainer: the run starts from the baseline and logs the new tensors
    result = train(
        {**spec(max_epoch=1), "model": "mlrf", "arch": fusion, "init_from": str(tmp_path / "base.pt")},
        str(data),
        "de",
        "en",
        str(tmp_path / "warm"),
        str(tmp_path / "warm.pt"),
    )
    assert (tmp_path / "warm.pt").exists() and result is not None


def test_the_models_auxiliary_loss_joins_the_gradient(data, tmp_path):
    from layerwise_nmt.models import build

    arch = {
        **ARCH,
        "src_vocab": 40,
        "tgt_vocab": 40,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "aggregation": "hierarchical",
        "dropout": 0.0,
    }
    pd_ = ParallelData(data, "train", "de", "en")
    batch = collate(pd_, make_batches(pd_.src.sizes, pd_.tgt.sizes, 120, None, seed=1)[0])
    cfg = TrainConfig.from_dict({"max_update": 1, "label_smoothing": 0.0})
    grads = {}
    for lam in (0.0, 1.0):
        torch.manual_seed(0)
        model = build("deep", {**arch, "diversity": lam})
        accumulate(model, [batch], cfg, torch.device("cpu"), lambda: torch.autocast("cpu", enabled=False))
        grads[lam] = model.encoder.layers[0].ffn.fc1.weight.grad.clone()
    assert not torch.allclose(grads[0.0], grads[1.0])  # the diversity term reaches the backbone's gradients


def test_changed_settings_set_old_checkpoints_aside_instead_of_resuming(data, tmp_path):
    save = tmp_path / "run" / "checkpoints"
    train(spec(max_epoch=1), str(data), "de", "en", str(save))
    first = final_state(save)["progress"]["update"]
    train(spec(max_epoch=2), str(data), "de", "en", str(save))  # a larger budget resumes
    assert [r["epoch"] for r in final_state(save)["progress"]["history"]] == [1, 2]
    train(spec(max_epoch=1, lr=0.001), str(data), "de", "en", str(save))  # another lr: a new run
    state = final_state(save)
    assert [r["epoch"] for r in state["progress"]["history"]] == [1] and state["progress"]["update"] == first
    aside = tmp_path / "run" / "checkpoints.superseded-1"
    assert (aside / "checkpoint_last.pt").exists() and (aside / "checkpoint2.pt").exists()


def test_gpu_claims_are_exclusive_and_released_with_the_process(tmp_path, monkeypatch):
    """The local allocator: concurrent jobs get disjoint devices; a dead job's devices are free again; SLURM's
    allocation is left alone."""
    from layerwise_nmt import UserError
    from layerwise_nmt.training.gpu_lock import claim

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    code = (
        "import os, sys, time; from layerwise_nmt.training.gpu_lock import claim;"
        " h = claim(int(sys.argv[1]), sys.argv[2]);"
        " print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(30)"
    )
    first = subprocess.Popen([sys.executable, "-c", code, "2", str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "0,1"
    mine = claim(1, tmp_path, timeout=0, poll=0.01)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2" and len(mine) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    with pytest.raises(UserError, match="no 1 free GPU"):
        claim(1, tmp_path, timeout=0, poll=0.01)
    first.kill()
    first.wait()
    assert claim(2, tmp_path, timeout=5, poll=0.05) and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    with pytest.raises(UserError, match="asks for 4 GPUs but only 2 are visible"):
        claim(4, tmp_path)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert claim(1, tmp_path) == [] and os.environ["CUDA_VISIBLE_DEVICES"] == "5"


@pytest.mark.system
def test_two_ranks_through_torchrun_split_update_freq_and_checkpoint_on_sigterm(data, tmp_path):
    """`lwnmt train --ranks 2`: torchrun, two gloo ranks, update_freq 4 → 2 batches per rank; a SIGTERM to the
    job reaches both ranks, which checkpoint and exit; the retry resumes."""
    save_dir = tmp_path / "run"
    train_spec = spec(max_update=100000, update_freq=4, save_interval_updates=1000)
    cmd = train_command(train_spec, data, save_dir, "--final", str(tmp_path / "model.pt"), "--ranks", "2")
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not (save_dir / "checkpoint1.pt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "not a multiple" not in err, err[-3000:]
    assert "data-parallel: 2 ranks (gloo), 2 batches per rank per update" in err
    state = final_state(save_dir)
    assert state["progress"]["update"] >= 1 and not (tmp_path / "model.pt").exists()
    resumed = json.loads(cmd[cmd.index("--spec") + 1])
    resumed["train"]["max_update"] = state["progress"]["update"] + 2
    cmd[cmd.index("--spec") + 1] = json.dumps(resumed)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in result.stderr
    final = torch.load(tmp_path / "model.pt", weights_only=False)
    assert final["progress"]["update"] == state["progress"]["update"] + 2


def test_cosine_schedule_is_wu_et_al_recipe():
    """GCA's DynamicConv WMT rows: linear warm-up 1e-7 → 1e-3 over 10K updates, one 20K cosine period to 1e-7."""
    cfg = TrainConfig.from_dict(
        {
            "lr_scheduler": "cosine",
            "lr": 1e-3,
            "warmup_updates": 10000,
            "warmup_init_lr": 1e-7,
            "min_lr": 1e-7,
            "lr_period_updates": 20000,
            "max_update": 30000,
        }
    )
    assert lr_at(5000, cfg, 1024) == pytest.approx(1e-7 + (1e-3 - 1e-7) / 2)
    assert lr_at(10000, cfg, 1024) == pytest.approx(1e-3)
    assert lr_at(20001, cfg, 1024) == pytest.approx((1e-3 + 1e-7) / 2)
    assert lr_at(30000, cfg, 1024) == pytest.approx(1e-7, abs=1e-10)
    assert all(lr_at(u, cfg, 1024) >= lr_at(u + 1, cfg, 1024) for u in range(10000, 30000, 997))
    with pytest.raises(UserError, match="lr_period_updates"):
        TrainConfig.from_dict({"lr_scheduler": "cosine", "max_update": 1})


def test_final_model_best_is_the_epoch_early_stopping_chose(data, tmp_path):
    """LWC stops on validation: model.pt must be the epoch judged best (checkpoint_best.pt), not the last one."""
    import csv

    save = tmp_path / "run"
    train(
        spec(max_epoch=4, patience=3, final_model="best", lr=0.02),
        str(data),
        "de",
        "en",
        str(save),
        str(tmp_path / "model.pt"),
    )
    with open(save / "metrics.csv", newline="") as f:
        losses = [float(row["valid_loss"]) for row in csv.DictReader(f)]
    best_epoch = losses.index(min(losses)) + 1
    final, best = (torch.load(p, weights_only=False) for p in (tmp_path / "model.pt", save / "checkpoint_best.pt"))
    assert final["final_from"] == f"checkpoint_best.pt (epoch {best_epoch})"
    epoch = torch.load(save / f"checkpoint{best_epoch}.pt", weights_only=False)
    for key, tensor in final["model"].items():
        assert torch.equal(tensor, best["model"][key]) and torch.equal(tensor, epoch["model"][key]), key


def test_train_takes_fairseq_flags_over_the_spec():
    from layerwise_nmt.cli import build_parser
    from layerwise_nmt.cli.train import train_spec

    base = ["train", "--data", "d", "--src", "de", "--tgt", "en", "--save-dir", "s"]
    args = build_parser().parse_args(
        base
        + [
            "--spec",
            '{"train": {"lr": 1.0, "patience": 3}}',
            "--arch",
            "transformer_iwslt_de_en",
            "--max-tokens",
            "2048",
            "--lr",
            "5e-4",
            "--update-freq",
            "2",
            "--max-update",
            "100",
            "--dropout",
            "0.3",
        ]
    )
    assert train_spec(args) == TrainSpec(
        model="transformer",
        arch={"preset": "iwslt", "dropout": 0.3},
        train={"lr": 5e-4, "patience": 3, "max_tokens": 2048, "update_freq": 2, "max_update": 100},
    )
    assert train_spec(build_parser().parse_args(base + ["--arch", "big"])) == TrainSpec(arch={"preset": "big"})


def test_a_train_spec_crosses_the_process_boundary_with_its_kind_and_is_checked_by_key():
    """What the workflow's train rule passes and `lwnmt train --spec` reads back: the same class, or one line."""
    from layerwise_nmt.job_specs import TableSpec

    spec = TrainSpec(model="lwc", arch={"layers": 2}, train={"seed": 3}, init_from="parent/model.pt")
    text = spec.to_json()
    assert json.loads(text)["job"] == "train" and TrainSpec.from_json(text) == spec
    assert "user_model" not in json.loads(text)  # unset parts left out: a checkpoint's resume key is unchanged
    with pytest.raises(UserError, match=r"--spec: the spec of a 'table' job; expected a 'train' job's"):
        TrainSpec.from_json(json.dumps({"job": TableSpec.job}))
    with pytest.raises(UserError, match=r"--spec \(train job\): unknown key\(s\) arhc; did you mean arch\?"):
        TrainSpec.from_json('{"arhc": {}}')
    with pytest.raises(UserError, match=r"--spec \(train job\): arch=3; expected a mapping"):
        TrainSpec.from_json('{"arch": 3}')


def test_tensorboard_event_files_hold_the_curves_of_metrics_csv(data, tmp_path):
    """The run's curves are also event files beside metrics.csv (written by tensorboardX, a dependency; reading them
    back needs the optional `tensorboard` package)."""
    import csv

    pytest.importorskip("tensorboard", reason="the optional dependency (make test installs it)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(spec(max_epoch=2, log_interval=1), str(data), "de", "en", str(tmp_path / "run"), str(tmp_path / "model.pt"))
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    with open(tmp_path / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    valid = events.Scalars("epoch/valid_loss")
    assert [e.step for e in valid] == [int(r["update"]) for r in rows]
    assert [e.value for e in valid] == pytest.approx([float(r["valid_loss"]) for r in rows], rel=1e-6)
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, int(rows[-1]["update"]) + 1))
    assert {"train/lr", "train/grad_norm", "train/target_tokens_per_second"} <= set(events.Tags()["scalars"])


def test_a_hand_run_writes_only_under_its_save_dir(data, tmp_path):
    """Issue 30 item 8: metrics.csv, training.json and tensorboard/ went to the parent of --save-dir, so two hand
    runs sharing a parent overwrote each other's."""
    from layerwise_nmt.cli import main

    for name in ("a", "b"):
        run = tmp_path / name
        main(
            [
                "train",
                "--spec",
                json.dumps(spec(max_update=2)),
                "--data",
                str(data),
                "--src",
                "de",
                "--tgt",
                "en",
                "--save-dir",
                str(run),
                "--final",
                str(run / "model.pt"),
            ]
        )
        assert (run / "metrics.csv").is_file() and (run / "training.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_finished_training_run_again_trains_from_update_0_and_an_interrupted_one_resumes(
    data, tmp_path, caplog, monkeypatch
):
    """`snakemake --forcerun` of a training that wrote its model reruns it with its checkpoints in place: that is a
    retrain, its checkpoints moved aside. A run stopped before its end (a kill, a preemption) resumes."""
    import logging

    from layerwise_nmt.training import loop
    from layerwise_nmt.training.loop import Stopped

    save, final = tmp_path / "run" / "checkpoints", str(tmp_path / "run" / "model.pt")
    settings = spec(max_update=6, save_interval_updates=2)
    train(settings, str(data), "de", "en", str(save), final)
    first = torch.load(final, weights_only=False)
    with caplog.at_level(logging.INFO):
        train(settings, str(data), "de", "en", str(save), final)
    assert "resumed from" not in caplog.text
    assert (
        f"{save}: its run finished at update 6 (max_update) and wrote its final model; run again, it is trained "
        f"again; moved them to {save.parent / 'checkpoints.superseded-1'} and starting afresh from update 0"
        in caplog.text
    )
    again = torch.load(final, weights_only=False)
    assert again["progress"]["update"] == 6 and len(again["progress"]["history"]) == len(first["progress"]["history"])
    for key, tensor in first["model"].items():  # trained anew from the same seed: the same weights
        assert torch.equal(tensor, again["model"][key]), key
    assert (save.parent / "checkpoints.superseded-1" / "checkpoint_last.pt").exists()

    real = loop.accumulate

    def stopped_at_3(net, batches, *args, **kwargs):  # a SIGTERM during update 3: saved after it, then stopped
        if loop_run_updates() == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(net, batches, *args, **kwargs)

    updates = []

    def loop_run_updates():
        updates.append(1)
        return len(updates) - 1

    monkeypatch.setattr(loop, "accumulate", stopped_at_3)
    other = tmp_path / "other" / "checkpoints"
    with pytest.raises(Stopped):
        train(settings, str(data), "de", "en", str(other), str(tmp_path / "other" / "model.pt"))
    monkeypatch.setattr(loop, "accumulate", real)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        train(settings, str(data), "de", "en", str(other), str(tmp_path / "other" / "model.pt"))
    assert f"resumed from {other / 'checkpoint_last.pt'}: epoch 1, update 3" in caplog.text
    assert "starting afresh" not in caplog.text and not (tmp_path / "other" / "checkpoints.superseded-1").exists()
    resumed = torch.load(tmp_path / "other" / "model.pt", weights_only=False)
    for key, tensor in first["model"].items():  # resumed bit for bit
        assert torch.equal(tensor, resumed["model"][key]), key


def test_a_checkpoint_whose_tensors_no_longer_fit_the_model_is_refused_in_one_line(data, tmp_path):
    """Same settings, other code: the model's tensors changed (a layer renamed, a size computed differently)."""
    save = tmp_path / "run"
    train(spec(max_update=2), str(data), "de", "en", str(save))
    state = torch.load(save / "checkpoint_last.pt", weights_only=False)
    name = next(iter(state["model"]))
    state["model"][name + "_renamed"] = state["model"].pop(name)
    torch.save(state, save / "checkpoint_last.pt")
    with pytest.raises(UserError) as err:
        train(spec(max_update=4), str(data), "de", "en", str(save))
    line = str(err.value)
    assert "\n" not in line and line.startswith(
        f"{save / 'checkpoint_last.pt'}: not resumed: its tensors do not fit "
        f"model transformer as its code builds it now ("
    )
    assert name in line and line.endswith(f"to train it from update 0, move {save} aside")


def test_a_resumed_run_computes_in_the_precision_its_checkpoint_was_trained_in(data, tmp_path, monkeypatch):
    """The precision is recorded with the checkpoints and the model; a resume goes on in it rather than asking
    again, which on a machine without the cached answer would measure anew."""
    from layerwise_nmt.training import loop
    from layerwise_nmt.training.precision import Precision, device_name

    chosen = Precision("bf16", "auto", "measured: bf16 1.50x fp32", device_name(torch.device("cpu")), "bf16 1.50x fp32")
    monkeypatch.setattr(loop, "resolve", lambda *args, **kwargs: chosen)
    save = tmp_path / "run"
    train(spec(max_update=2, amp="auto"), str(data), "de", "en", str(save))
    assert Precision.from_dict(final_state(save)["precision"]) == chosen
    monkeypatch.setattr(loop, "resolve", lambda *args, **kwargs: pytest.fail("the resumed run chose again"))
    train(spec(max_update=4, amp="auto"), str(data), "de", "en", str(save), str(tmp_path / "model.pt"))
    assert Precision.from_dict(torch.load(tmp_path / "model.pt", weights_only=False)["precision"]) == chosen
    assert json.loads((save / "training.json").read_text())["precision"] == chosen.to_dict()
