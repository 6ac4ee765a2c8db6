"""What training tells while it runs: each log line and each metrics.csv row gives the mean of the updates since the
one before (fairseq's train_inner), not a running mean since the epoch began, which jumped at every epoch start;
the epoch's end still says the epoch's mean. TensorBoard event files come with every run."""

import json
import logging
import math
import sys

import pandas as pd
import pytest

from layerwise_nmt.training.progress import Progress
from layerwise_nmt.training.reporting import Reporter
from layerwise_nmt.training.config import TrainConfig

from conftest import toy_spec as spec

# per update: (loss in bits per target token, accuracy, target tokens)
EPOCH_1 = [(8.0, 0.1, 100), (6.0, 0.2, 300), (4.0, 0.4, 200), (2.0, 0.6, 200)]
EPOCH_2 = [(1.5, 0.7, 100), (1.0, 0.8, 100)]
VALID = {"loss": 3.0, "nll": 2.5, "accuracy": 0.5}


def result(bits: float, accuracy: float, tokens: int) -> dict:
    """One update's sums as train.update_step returns them (loss in nats, summed over its target tokens)."""
    return {
        "loss": bits * tokens * math.log(2),
        "nll": 0.9 * bits * tokens * math.log(2),
        "correct": accuracy * tokens,
        "ntokens": tokens,
        "nsentences": 10,
        "grad_norm": 1.0,
    }


def mean(updates: list[tuple]) -> tuple[float, float]:
    tokens = sum(n for _, _, n in updates)
    return sum(b * n for b, _, n in updates) / tokens, sum(a * n for _, a, n in updates) / tokens


def logged(caplog, word: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "layerwise_nmt.training.reporting" and word in r.getMessage()
    ]


def test_log_lines_and_metrics_rows_give_each_intervals_mean(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.reporting")
    cfg = TrainConfig.from_dict({"max_update": 100, "log_interval": 2})
    progress, reporter = Progress(), Reporter(tmp_path, cfg)
    for update in EPOCH_1:
        progress.add(result(*update), elapsed=1.0)
        reporter.update(progress, update[2], lr=1e-3, grad_norm=1.0, updates_per_epoch=4)
        if progress.update == 2:  # a validation within the epoch (validate_interval_updates)
            reporter.epoch(progress, VALID, 1e-3, partial=True)
    reporter.epoch(progress, VALID, 1e-3, partial=False)
    progress.next_epoch()
    for update in EPOCH_2:
        progress.add(result(*update), elapsed=2.0)
        reporter.update(progress, update[2], lr=1e-3, grad_norm=1.0, updates_per_epoch=4)
    reporter.epoch(progress, VALID, 1e-3, partial=True)  # the budget ends mid-epoch
    reporter.close()

    intervals = [EPOCH_1[:2], EPOCH_1[2:], EPOCH_2]
    lines = logged(caplog, "update")
    lines = [line for line in lines if line.startswith("epoch") and ": loss " in line]
    assert len(lines) == 3
    for line, interval in zip(lines, intervals, strict=True):
        loss, accuracy = mean(interval)
        assert f"loss {loss:.3f}," in line and f"acc {accuracy:.3f}," in line, line
        assert f"ppl {2 ** (0.9 * loss):.2f}," in line, line
    # the epoch's end says the epoch's own mean
    assert f"train loss {mean(EPOCH_1)[0]:.3f} (epoch mean)" in logged(caplog, "done")[0]

    rows = pd.read_csv(tmp_path / "metrics.csv")
    assert list(rows["update"]) == [2, 4, 6]
    for (_, row), interval in zip(
        rows.iterrows(), intervals, strict=True
    ):  # each row: the updates since the row before
        loss, accuracy = mean(interval)
        assert row["train_loss"] == pytest.approx(loss) and row["train_accuracy"] == pytest.approx(accuracy)
        assert row["train_nll"] == pytest.approx(0.9 * loss)
        assert row["train_updates"] == len(interval)


def test_the_interval_survives_a_resume(tmp_path):
    """The sums since the last row are part of the checkpointed progress: a resumed run's row covers the same
    updates as an uninterrupted one's."""
    cfg = TrainConfig.from_dict({"max_update": 100, "log_interval": 1000})
    progress = Progress()
    reporter = Reporter(None, cfg)  # another rank: bookkeeping only
    progress.add(result(*EPOCH_1[0]), elapsed=1.0)
    reporter.update(progress, 100, lr=1e-3, grad_norm=1.0, updates_per_epoch=4)
    resumed = Progress.from_dict(progress.to_dict())
    resumed.add(result(*EPOCH_1[1]), elapsed=2.0)
    Reporter(tmp_path, cfg).epoch(resumed, VALID, 1e-3, partial=True)
    row = pd.read_csv(tmp_path / "metrics.csv").iloc[0]
    assert row["train_loss"] == pytest.approx(mean(EPOCH_1[:2])[0])
    assert Progress.from_dict({"update": 3}).row_stats == [0.0] * 5  # a checkpoint from before these sums


def test_event_files_without_the_tensorboard_package(toy_data, tmp_path, monkeypatch, caplog):
    """TensorBoard's event files are written by tensorboardX, a dependency (numpy and protobuf only): no optional
    package is needed, and the log names where they are."""
    from layerwise_nmt.training.loop import train

    for name in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)  # as where the optional package is not installed
    caplog.set_level(logging.INFO)
    train(
        spec(max_update=4, log_interval=1), str(toy_data), "de", "en", str(tmp_path / "run"), str(tmp_path / "model.pt")
    )
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    assert any(f"TensorBoard event files: {tmp_path / 'run' / 'tensorboard'}" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()

    pytest.importorskip("tensorboard", reason="reading them back needs the tensorboard package")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert [e.step for e in scalars.Scalars("train/loss")] == [1, 2, 3, 4]
    assert {"train/accuracy", "train/ppl", "epoch/valid_loss"} <= set(scalars.Tags()["scalars"])


def test_without_a_writer_one_line_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.reporting")
    Reporter(tmp_path, TrainConfig.from_dict({"max_update": 1})).close()
    said = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("no TensorBoard event files: tensorboardX")
    assert not (tmp_path / "tensorboard").exists()


def test_a_resumed_runs_eta_follows_its_own_pace_not_the_stopped_attempts(tmp_path, caplog):
    """A run stopped at update 100 after 50 minutes (a slow start on a busy machine) resumes at one update a
    second: its ETA for the 900 left is 15 minutes, not the 450 the whole run's mean pace would say."""
    caplog.set_level(logging.INFO, logger="layerwise_nmt.training.reporting")
    cfg = TrainConfig.from_dict({"max_update": 1000, "log_interval": 10})
    progress = Progress(update=100, elapsed=3000.0)
    reporter = Reporter(tmp_path, cfg)
    for _ in range(10):
        progress.add(result(2.0, 0.5, 100), elapsed=progress.elapsed + 1.0)
        reporter.update(progress, 100, lr=1e-3, grad_norm=1.0, updates_per_epoch=10_000)
    (line,) = logged(caplog, "ETA")
    assert line.endswith("ETA 14.8 min"), line  # 890 updates left at 1 s each
    assert Progress(update=100, elapsed=3000.0).eta_seconds(cfg, 10_000) == pytest.approx(900 * 30)  # no pace yet


def test_a_run_of_a_fraction_of_a_second_still_has_a_throughput(tmp_path):
    """training.json's minutes are rounded for people; its seconds are what a throughput divides by, so that a toy
    run of 0.2 s (a fast CPU) does not read as 0 minutes and no tokens per second."""
    from layerwise_nmt.training.reporting import trained_seconds

    progress = Progress(update=4, elapsed=0.2)
    progress.target_tokens = 800
    Reporter(tmp_path, TrainConfig.from_dict({"max_update": 4})).summary(progress)
    summary = json.loads((tmp_path / "training.json").read_text())
    assert summary["minutes"] == 0.0 and trained_seconds(summary) == pytest.approx(0.2)
    assert trained_seconds({"minutes": 2.0}) == 120.0  # a summary written before seconds were
