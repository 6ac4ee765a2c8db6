"""Nothing lost, nothing silent: a hard kill, an unreadable checkpoint, a full disk, a diverging run."""

import errno
import json
import logging
import math
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import toy_spec, train_command

from layerwise_nmt import UserError
from layerwise_nmt.training import loop as training
from layerwise_nmt.training.checkpoint import LAST, PREVIOUS, load
from layerwise_nmt.training.loop import train
from layerwise_nmt.training.optim import unscale_and_clip


def assert_same_weights(a: dict, b: dict) -> None:
    assert a["progress"]["update"] == b["progress"]["update"]
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key


# `lwnmt train` on a clock that advances one minute per update (a demo-sized model on a slow CPU, in milliseconds),
# SIGKILLed by itself after update 117 of a 240-update epoch, once its writes are on disk.
ONE_MINUTE_PER_UPDATE = """
import os, signal, sys, time
from layerwise_nmt.training import after_update, loop as training
from layerwise_nmt.cli import main

class Clock:
    offset = 0.0
    def time(self):
        return time.time() + self.offset
    def __getattr__(self, name):
        return getattr(time, name)

clock, update = Clock(), training.update_step
def one_minute_later(run, *args, **kwargs):
    if run.progress.update >= 117:  # counted, and checkpointed if that was due
        run.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    clock.offset += 60.0
    return update(run, *args, **kwargs)
training.time, after_update.time, training.update_step = clock, clock, one_minute_later
main(sys.argv[1:])
"""


@pytest.mark.system
def test_with_the_default_settings_a_kill_mid_epoch_loses_at_most_five_minutes(toy_data, tmp_path):
    """A demo run's epoch is ~470 updates, minutes on a CPU: with only epoch-end checkpoints a kill lost up to
    all of it. checkpoint_last.pt is refreshed every save_interval_minutes, by default 5, whatever the run's size."""
    spec = toy_spec(max_tokens=None, max_sentences=1, max_update=100000)  # no save setting: the defaults
    run = tmp_path / "killed"
    killed = subprocess.run(
        [sys.executable, "-c", ONE_MINUTE_PER_UPDATE, *train_command(spec, toy_data, run)[3:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    kept = load(run / LAST)["progress"]
    assert kept["epoch"] == 1 and 0 < kept["next_batch"] < 240  # mid-epoch: only the clock writes those
    assert 117 - kept["update"] <= 5  # updates of a minute each since the last refresh

    total = {**spec, "train": {**spec["train"], "max_update": 120}}
    resumed = subprocess.run(train_command(total, toy_data, run), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resumed from {run / LAST}: epoch 1, update {kept['update']}" in resumed.stderr


def logged_update(log) -> int:
    """The last update a training's log reports in its first epoch (0 before the first)."""
    updates = [
        int(line.split(" update ")[1].split(":")[0])
        for line in log.read_text().splitlines()
        if "reporting: epoch 1 update" in line
    ]
    return updates[-1] if updates else 0


@pytest.mark.system
def test_a_hard_kill_mid_epoch_loses_at_most_the_save_interval(toy_data, tmp_path):
    minutes = 0.005  # 0.3 s; one-sentence batches make an epoch 240 updates long, so the kill lands mid-epoch
    spec = toy_spec(max_tokens=None, max_sentences=1, max_update=100000, save_interval_minutes=minutes, log_interval=1)
    run, log = tmp_path / "killed", tmp_path / "killed.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(train_command(spec, toy_data, run), stderr=stderr)
        deadline = time.time() + 120
        while time.time() < deadline:  # until a time-based checkpoint exists some way into the first epoch
            if (run / LAST).exists():
                progress = load(run / LAST)["progress"]
                if progress["epoch"] == 1 and progress["update"] >= 30:
                    break
            time.sleep(0.05)
        # killed once the log shows updates past the last checkpoint: a fixed sleep on a loaded machine could
        # land the kill right after a save, with nothing lost to show
        while time.time() < deadline and logged_update(log) <= load(run / LAST)["progress"]["update"] + 2:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        proc.wait(timeout=30)
    saved = load(run / LAST)
    kept = saved["progress"]
    last_logged = logged_update(log)
    lost_seconds = killed_at - (run / LAST).stat().st_mtime
    print(
        f"SIGKILL at update {last_logged}: checkpoint_last.pt holds update {kept['update']} "
        f"(batch {kept['next_batch']} of epoch {kept['epoch']}); lost {last_logged - kept['update']} updates, "
        f"{lost_seconds:.2f} s with save_interval_minutes {minutes}"
    )
    assert kept["epoch"] == 1 and kept["next_batch"] > 0  # a mid-epoch checkpoint: only the clock writes those
    assert last_logged > kept["update"]  # the kill did lose work, …
    assert lost_seconds <= minutes * 60 + 1.0  # … at most one interval of it (+ the time a save takes)
    (run / f".tmp-{LAST}.{proc.pid}").write_bytes(b"half a checkpoint")  # as a kill during a save leaves it

    total = {**spec, "train": {**spec["train"], "max_update": kept["update"] + 25}}
    resumed = subprocess.run(train_command(total, toy_data, run), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resumed from {run / LAST}: epoch 1, update {kept['update']}" in resumed.stderr
    assert not list(run.glob(".tmp-*"))  # the dead writer's half-written file is gone
    straight = subprocess.run(
        train_command(total, toy_data, tmp_path / "straight"), capture_output=True, text=True, timeout=300
    )
    assert straight.returncode == 0, straight.stderr[-2000:]
    assert_same_weights(load(run / LAST), load(tmp_path / "straight" / LAST))  # bit for bit from the checkpoint on


def test_an_unreadable_checkpoint_falls_back_to_the_one_before(toy_data, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    run = tmp_path / "run"
    train(toy_spec(max_update=8, save_interval_updates=3), str(toy_data), "de", "en", str(run))
    assert load(run / PREVIOUS)["progress"]["update"] == 6 and load(run / LAST)["progress"]["update"] == 8
    with open(run / LAST, "r+b") as f:  # a truncated copy
        f.truncate(f.seek(0, 2) // 2)
    train(toy_spec(max_update=14, save_interval_updates=3), str(toy_data), "de", "en", str(run))
    warning = next(r.getMessage() for r in caplog.records if "resuming from" in r.getMessage())
    assert f"cannot read {LAST} (" in warning and f"resuming from {PREVIOUS} (update 6)" in warning
    assert any(r.getMessage().startswith(f"resumed from {run / PREVIOUS}: epoch 1, update 6") for r in caplog.records)
    train(toy_spec(max_update=14, save_interval_updates=3), str(toy_data), "de", "en", str(tmp_path / "straight"))
    assert_same_weights(load(run / LAST), load(tmp_path / "straight" / LAST))

    for name in (LAST, PREVIOUS):
        (run / name).write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=f"cannot read {LAST} .* or {PREVIOUS} .*nothing to resume from"):
        train(toy_spec(max_update=20), str(toy_data), "de", "en", str(run))
    assert (run / LAST).read_bytes() == b"not a checkpoint"  # left for a person to look at


@pytest.mark.parametrize("kept", [0.1, 0.5, 0.9, 0.99])
def test_a_checkpoint_cut_anywhere_is_one_line_naming_it(tmp_path, kept):
    """Where the cut falls decides what torch raises (an OSError from the zip reader among them); every case is
    the same one-line refusal, whichever command loads the file."""
    whole, cut = tmp_path / "whole.pt", tmp_path / "model.pt"
    torch.save({"model": torch.nn.Linear(64, 64).state_dict(), "model_name": "transformer"}, whole)
    data = whole.read_bytes()
    cut.write_bytes(data[: int(len(data) * kept)])
    with pytest.raises(UserError, match=f"^{cut}: not a readable checkpoint, truncated or corrupt"):
        load(cut)


def test_a_full_disk_keeps_the_previous_checkpoint_and_fails_in_one_line(toy_data, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(toy_spec(max_update=4, save_interval_updates=2), str(toy_data), "de", "en", str(run))
    before = {name: (run / name).read_bytes() for name in (LAST, PREVIOUS)}

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"\0" * 4096)  # part of the checkpoint made it to disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(UserError) as err:
        train(toy_spec(max_update=8, save_interval_updates=2), str(toy_data), "de", "en", str(run))
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"{run / 'checkpoint_1_6.pt'}: cannot write the checkpoint")
    assert "No space left on device" in str(err.value)
    assert {name: (run / name).read_bytes() for name in (LAST, PREVIOUS)} == before
    assert not list(run.glob(".tmp-*"))


def poison(monkeypatch, calls_to_poison, how: str = "grad") -> None:
    """Make the given forward/backward passes (1-based) yield an inf gradient or a nan loss."""
    real, calls = training.accumulate, {"n": 0}

    def accumulate(model, micro_batches, cfg, device, autocast, scaler=None):
        result = real(model, micro_batches, cfg, device, autocast, scaler)
        calls["n"] += 1
        if calls["n"] in calls_to_poison:
            if how == "grad":
                next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = math.inf
            else:
                result["loss"] = torch.tensor(math.nan)
        return result

    monkeypatch.setattr(training, "accumulate", accumulate)


@pytest.mark.parametrize("how", ["grad", "loss"])
def test_nonfinite_updates_are_skipped(toy_data, tmp_path, monkeypatch, caplog, how):
    poison(monkeypatch, {3, 4}, how)
    progress = train(toy_spec(max_update=10), str(toy_data), "de", "en", str(tmp_path / "run"))
    assert progress["update"] == 10 and progress["skipped_updates"] == 2
    skipped = [r.getMessage() for r in caplog.records if "update skipped" in r.getMessage()]
    assert len(skipped) == 2 and skipped[0].startswith("epoch 1, update 3: loss ")
    weights = load(tmp_path / "run" / LAST)["model"]
    assert all(torch.isfinite(t).all() for t in weights.values() if t.is_floating_point())


def test_a_diverged_run_stops_with_its_last_good_checkpoint(toy_data, tmp_path, monkeypatch):
    poison(monkeypatch, set(range(7, 1000)))
    run = tmp_path / "run"
    with pytest.raises(
        UserError,
        match=r"training diverged: 9 updates in a row .* after update 6; "
        r"checkpoint_last.pt \(update 6\) is the last good state",
    ):
        train(toy_spec(max_update=50, save_interval_updates=3), str(toy_data), "de", "en", str(run))
    kept = load(run / LAST)
    assert kept["progress"]["update"] == 6
    assert all(torch.isfinite(t).all() for t in kept["model"].values() if t.is_floating_point())


def test_an_fp16_overflow_is_skipped_with_half_the_loss_scale():
    """The loop's fp16 sequence on a CPU GradScaler (CUDA's behaves the same): unscale, norm, skip, update."""
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**7)
    scaler.scale(model(torch.ones(2, 3)).sum()).backward()
    model.weight.grad[0, 0] = math.inf
    before = model.weight.detach().clone()
    assert float(unscale_and_clip(model, optimizer, scaler, clip_norm=1.0)) == math.inf
    optimizer.zero_grad(set_to_none=True)
    scaler.update()
    assert scaler.get_scale() == 2.0**6 and torch.equal(model.weight, before)
    scaler.scale(model(torch.ones(2, 3)).sum()).backward()  # the next update goes through, clipped
    assert 1.0 < float(unscale_and_clip(model, optimizer, scaler, clip_norm=1.0)) < math.inf
    assert torch.linalg.vector_norm(torch.cat([p.grad.view(-1) for p in model.parameters()])) <= 1.0 + 1e-6
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(model.weight, before)


def test_a_row_cut_by_the_clock_says_so_in_its_table(toy_data, tmp_path):
    from layerwise_nmt.report.tables import write

    run = tmp_path / "seed1"
    train(
        toy_spec(max_update=1000, max_minutes=0.0001),
        str(toy_data),
        "de",
        "en",
        str(run / "checkpoints"),
        final=str(run / "model.pt"),
    )
    summary = json.loads((run / "checkpoints" / "training.json").read_text())
    assert summary["stopped_by"] == "max_minutes" and 0 < summary["updates"] < 1000
    assert summary["budget"] == {"max_update": 1000, "max_epoch": 0, "max_minutes": 0.0001}
    (run / "test.score.json").write_text(json.dumps({"bleu": 1.0}))
    spec = {
        "paper": "demo",
        "table": "T1",
        "metric": "bleu",
        "rows": [
            {"label": "cut", "state": "ok", "scores": {"test": [str(run / "test.score.json")]}, "runs": [str(run)]}
        ],
    }
    status = write(spec, str(tmp_path / "T1")).to_dict("records")[0]["status"]
    assert status == f"ours; cut by max_minutes: seed1 at update {summary['updates']} of max_update 1,000"

    train(
        toy_spec(max_update=3),
        str(toy_data),
        "de",
        "en",
        str(tmp_path / "full" / "checkpoints"),
        final=str(tmp_path / "full" / "model.pt"),
    )
    assert json.loads((tmp_path / "full" / "checkpoints" / "training.json").read_text())["stopped_by"] == "max_update"
