"""`lwnmt status` tells what runs as the config stands, what waits for a person to fetch a file (which file, where
to put it), and what cannot run — in lines a terminal shows whole; the workflow's start message counts the same."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from layerwise_nmt import grid
from layerwise_nmt.grid.status import summary

from conftest import snakemake

ROOT = Path(__file__).resolve().parents[1]


def status_output(columns: int) -> str:
    """What a terminal `columns` wide shows (a pseudo-terminal: piped, the lines stay whole for grep)."""
    import pty

    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns))
    with subprocess.Popen(
        [sys.executable, "-m", "layerwise_nmt", "status", "--config", str(ROOT / "config.yaml")],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is done
                break
            if not chunk:
                break
            chunks.append(chunk)
    os.close(leader)
    assert process.returncode == 0, process.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_piped_lines_stay_whole():
    out = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "status", "--config", str(ROOT / "config.yaml")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert re.search(
        r"^  manual   iwslt14_roen +no working automatic source for 2014-01-test.tgz .* put it at "
        r"results/downloads/\w+/2014-01-test.tgz\)$",
        out,
        re.M,
    )


def test_an_archive_reported_broken_waits_for_a_person_only_without_a_mirror():
    """The CWMT zips: their FTP host is reported unreachable, and a mirror (checked against the same sha256) is
    tried next, so the task is a download, not a manual step; without the mirror, it would be one."""
    config = grid.load(ROOT / "config.yaml")
    assert grid.task_status(config, "wmt17_zhen").state == "download"
    for entry in config["datasets"]["wmt17-zh-en"]["archives"].values():
        if entry.get("reported_broken"):
            del entry["mirrors"]
    zhen = grid.task_status(config, "wmt17_zhen")
    assert zhen.state == "manual" and "casia2015.zip" in zhen.reason and "CWMT FTP host" in zhen.reason


def test_a_manual_download_is_its_own_state_counted_apart():
    config = grid.load(ROOT / "config.yaml")
    statuses = grid.all_statuses(config)
    manual = {s.name for s in statuses if s.kind == "task" and s.state == "manual"}
    assert {"iwslt14_roen", "iwslt14_esen"} <= manual
    roen = grid.task_status(config, "iwslt14_roen")
    assert roen.runnable and not roen.can_run  # in the DAG (its fetch job says what to do), but not "can run"
    assert "2014-01-test.tgz" in roen.reason and "put it at results/downloads/" in roen.reason  # where it goes
    experiment = grid.experiment_status(config, "lwc.t1.roen.transformer_small")
    assert experiment.state == "manual" and experiment.waits_for == "iwslt14_roen"
    tasks = [s for s in statuses if s.kind == "task"]
    ready = sum(s.state in ("ok", "download") for s in tasks)
    assert summary(tasks).startswith(f"{ready} of {len(tasks)} can run; {len(manual)} need a manual download first")
    rows = [s for s in statuses if s.kind == "row"]
    assert any(s.state == "manual" and s.name.startswith("lwc T1 · Ro-En") for s in rows)


def test_a_file_fetched_by_hand_into_its_download_folder_is_at_hand(tmp_path, monkeypatch):
    config = grid.load(ROOT / "config.yaml")
    dataset = config["tasks"]["iwslt14_roen"]["dataset"]
    paths = {grid.file_source(config, dataset, name).path for name in config["datasets"][dataset]["files"]}
    monkeypatch.chdir(tmp_path)
    for path in paths:
        if path.startswith("results/downloads/") and path.endswith("2014-01-test.tgz"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).touch()
    assert grid.task_status(config, "iwslt14_roen").state != "manual"


def test_status_lines_fit_the_terminal():
    for columns in (60, 100):
        out = status_output(columns)
        lines = out.splitlines()
        words = " ".join(out.split())  # the summary folds too, at 60 columns
        assert re.search(r"tasks: \d+ of \d+ can run; \d+ need a manual download first; \d+ blocked download", words)
        # a word longer than the line (a URL) is kept whole, on a line of its own
        too_wide = [line for line in lines if len(line) > columns and " " in line.strip()]
        assert not too_wide, too_wide[:3]
        assert any(line.startswith("  manual   iwslt14_roen") for line in lines)
        assert "after the manual download of task iwslt14_roen" in out


@pytest.mark.system
def test_the_workflow_start_message_counts_manual_downloads_apart(tmp_path):
    config = grid.load(ROOT / "config.yaml")  # targets: all, so the full grid
    statuses = grid.all_statuses(config)
    run = snakemake(tmp_path, "-n")
    log = run.stdout + run.stderr
    manual = sum(s.state == "manual" for s in statuses)
    blocked = sum(s.state == "blocked" for s in statuses)
    assert f"{manual} tasks/experiments/table rows need a manual download first (e.g. iwslt14_roen" in log
    assert f"{blocked} tasks/experiments/table rows cannot run yet" in log


@pytest.mark.system  # runs Snakemake
@pytest.mark.parametrize("overlay, blocked", [("config/demo.yaml", 0), ("config/ci.yaml", 2)])
def test_a_run_speaks_only_of_what_its_targets_need(tmp_path, overlay, blocked):
    """The demo and CI runs said the full grid's "25 … cannot run yet" and "23 … need a manual download" (with an
    invitation to write into the data mirror); their targets need nothing of it."""
    run = snakemake(tmp_path, "-n", "--configfile", str(ROOT / overlay))
    log = run.stdout + run.stderr
    assert "need a manual download" not in log and "nist_zhen" not in log and "budget: " not in log
    assert ("cannot run yet" in log) == bool(blocked)
    if blocked:  # ci.yaml's own row of a model not trained yet, and its experiment
        assert f"{blocked} tasks/experiments/table rows cannot run yet (e.g. ci.missing: " in log


def test_status_lists_what_the_targets_need_and_all_with_all():
    def status(*args):
        return subprocess.run(
            [sys.executable, "-m", "layerwise_nmt", "status", "--config", "config.yaml", *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout

    demo = status("--config", "config/demo.yaml")
    names = re.findall(r"^  \w+ +(\S+)", demo, re.M)
    config = grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml")
    assert set(names) == {"multi30k_deen", "demo", *[e for e in config["experiments"] if e.startswith("demo.")]}
    assert "tasks: 1 of 1 can run" in demo and "rows: 6 of 6 can run" in demo and "--all" in demo.splitlines()[0]
    every = status("--config", "config/demo.yaml", "--all")
    statuses = grid.all_statuses(config)
    assert len(every.splitlines()) > 5 * len(demo.splitlines()) and "nist_zhen" in every
    assert f"tasks: {summary([s for s in statuses if s.kind == 'task'])}" in every
    for out in (demo, every):  # where a file goes: the user's own download cache, never the data mirror
        assert "LWNMT_DATA_MIRROR" not in out and "<data_mirror" not in out


def test_targets_all_means_every_declared_name_and_an_empty_list_none():
    """`targets: tasks: []` prepares no task for its own sake (the targeted rows still need theirs), unlike "all"."""
    from layerwise_nmt.grid.status import runnable_tasks, targeted

    config = grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml")
    config["targets"]["tasks"] = []
    assert targeted(config)[0] == ["multi30k_deen"] and runnable_tasks(config) == []
    config["targets"] = {"tasks": "all", "tables": [], "figures": []}
    assert targeted(config) == (list(config["tasks"]), [])
    assert len(runnable_tasks(config)) == sum(grid.status.task_status(config, t).runnable for t in config["tasks"])


def test_a_task_lists_only_the_downloads_its_own_splits_read(monkeypatch):
    """CI's WMT16 En-Ro task trains on newsdev2016 and tests on newstest2016: it fetches the dev and test archives,
    not the dataset's training archives that only the full task reads."""
    monkeypatch.delenv("LWNMT_DATA_MIRROR", raising=False)
    config = grid.load(ROOT / "config.yaml", ROOT / "config/ci.yaml")
    ci = grid.task_status(config, "wmt16_enro_ci")
    assert ci.fetch == "download" and "dev.tgz" in ci.reason and "test.tgz" in ci.reason
    assert "training-parallel-ep-v8.tgz" not in ci.reason and "SETIMES2" not in ci.reason
    assert "training-parallel-ep-v8.tgz" in grid.task_status(config, "wmt16_enro").reason
