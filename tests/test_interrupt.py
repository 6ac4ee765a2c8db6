"""Ctrl-C under Snakemake means stop: one SIGINT to the workflow's process group (what a terminal sends) checkpoints
the running training, which exits without a retry and says so in one line on the console; the next run resumes at
the saved update, and the log of every attempt is kept."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT, default_sigint, snakemake

pytestmark = pytest.mark.system  # trainings killed and resumed under Snakemake

RUN = Path("results/multi30k_ci/ci.transformer/seed1")
TARGET = str(RUN / "model.pt")


def budget(tmp_path: Path, max_update: int) -> list[str]:
    overlay = tmp_path / f"budget-{max_update}.yaml"
    overlay.write_text(
        yaml.safe_dump({"experiments": {"ci.transformer": {"train": {"max_epoch": 0, "max_update": max_update}}}})
    )
    return ["--configfile", str(ROOT / "config/ci.yaml"), str(overlay)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mirror) -> Path:
    """The task's data, made once (copied into each test's directory, times kept: Snakemake takes it as made)."""
    root = tmp_path_factory.mktemp("prepared")
    snakemake(
        root,
        str(RUN.parent.parent / "data/bin-separate/valid.de-en.en.tokens.npy"),
        *budget(root, 100000),
        mirror=mirror,
    )
    return root / "results"


def start_a_long_training(tmp_path, mirror, prepared, preexec_fn=default_sigint) -> tuple[subprocess.Popen, Path]:
    """Snakemake in its own process group, training far past the test's end, returned once the training is
    mid-epoch (its first checkpoint written): the process and the run's checkpoint folder."""
    shutil.copytree(prepared, tmp_path / "results")
    env = dict(
        os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", LWNMT_DATA_MIRROR=str(mirror)
    )
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(tmp_path),
        "--cores",
        "2",
        TARGET,
        *budget(tmp_path, 100000),
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    save_dir = tmp_path / RUN / "checkpoints"
    deadline = time.time() + 120
    while not (save_dir / "checkpoint1.pt").exists():
        if time.time() > deadline or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the training never got going")
        time.sleep(0.2)
    time.sleep(0.5)  # mid-epoch
    return proc, save_dir


def group_processes(group: int) -> list[str]:
    """The command lines of the processes still in process group `group` (Snakemake's and everything it
    started)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == group:
                found.append((entry / "cmdline").read_text().replace("\0", " "))
        except OSError:
            continue
    return found


# A stop ends the training at its next update, after its checkpoint writes (each fsync'ed, which on a disk busy with
# other work can take seconds); a training not stopped would run for many minutes more (100,000 updates)
STOP_WITHIN_S = 90


def stuck(proc: subprocess.Popen, save_dir: Path, what: str) -> str:
    """Why a stop did not finish: what is still running, then (after killing it) Snakemake's output and the
    training's log, whose last lines say whether the training saw the stop and where it was."""
    running = group_processes(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    log = save_dir.parent / "train.log"
    return (
        f"{what}: still running after {STOP_WITHIN_S} s: {running}\n--- Snakemake ---\n{out[-3000:]}"
        f"\n--- {log.name} ---\n{log.read_text()[-3000:] if log.exists() else '(none)'}"
    )


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "sigint-ignored"])
def test_one_ctrl_c_stops_the_workflow_and_the_rerun_resumes(tmp_path, mirror, prepared, sigint_ignored):
    """foreground: Snakemake gets the Ctrl-C too, as in a terminal. sigint-ignored: a Snakemake started where
    SIGINT is ignored (a non-interactive shell's background job) sees only its training stop, and must not retry
    it (it says "Trying to restart job", but starts none). In the foreground Snakemake may say so too: on a loaded
    machine the training's exit can reach its scheduler before its own Ctrl-C does. Either way no retry starts."""
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else default_sigint
    proc, save_dir = start_a_long_training(tmp_path, mirror, prepared, ignore)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # one Ctrl-C
        try:
            out, _ = proc.communicate(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(stuck(proc, save_dir, "one Ctrl-C"))
    finally:
        if proc.poll() is None:  # still training (a retry): nothing of it may outlive the test
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert proc.returncode != 0, out[-3000:]
    stopped = re.findall(
        r"^lwnmt train: \S+: stopped at update (\d+) \(Ctrl-C; saved checkpoint_last.pt\); "
        r"rerun the same command to resume$",
        out,
        flags=re.M,
    )
    assert len(stopped) == 1, out[-3000:]  # one line for the one training
    update = int(stopped[0])
    assert torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["progress"]["update"] == update
    assert not (tmp_path / TARGET).exists()
    assert len(re.findall(r"^rule train:|^localrule train:", out, flags=re.M)) == 1, out[-3000:]  # no retry ran

    rerun = snakemake(tmp_path, TARGET, *budget(tmp_path, update + 2), mirror=mirror)
    assert "Trying to restart job" not in rerun.stdout + rerun.stderr
    final = torch.load(tmp_path / TARGET, weights_only=False)["progress"]
    assert final["update"] == update + 2
    history = (save_dir / "train.log").read_text()  # both runs' logs: Snakemake deleted its train.log before the rerun
    assert history.count(" started (pid ") == 2, history[-3000:]
    assert f"stopped at update {update} (Ctrl-C" in history
    assert re.search(rf"resumed from \S+/checkpoint_last.pt: epoch \d+, update {update}, batch", history), history


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_sent_to_snakemake_alone_stops_the_training_with_its_checkpoint(tmp_path, mirror, prepared, signum):
    """What a supervisor, a scheduler or `kill <pid>` sends: one signal to Snakemake's process, not to its group.
    The training checkpoints and stops, as after a terminal's Ctrl-C, rather than running on; nothing is left
    running."""
    proc, save_dir = start_a_long_training(tmp_path, mirror, prepared)
    try:
        os.kill(proc.pid, signum)  # Snakemake's process only
        try:
            out, _ = proc.communicate(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(stuck(proc, save_dir, f"{signal.Signals(signum).name} to Snakemake alone"))
        left = group_processes(proc.pid)
    finally:
        if proc.poll() is None or group_processes(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert not left, left
    assert proc.returncode != 0, out[-3000:]
    stopped = re.findall(
        r"^lwnmt train: \S+: stopped at update (\d+) \(Ctrl-C; saved checkpoint_last.pt\); "
        r"rerun the same command to resume$",
        out,
        flags=re.M,
    )
    assert len(stopped) == 1, out[-3000:]
    assert torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["progress"]["update"] == int(stopped[0])
    assert not (tmp_path / TARGET).exists()
    assert len(re.findall(r"^rule train:|^localrule train:", out, flags=re.M)) == 1, out[-3000:]  # no retry ran


def test_forcerun_of_a_trained_model_trains_it_again_from_update_0(tmp_path, mirror, prepared):
    """`snakemake -R <model.pt>`: the finished training runs again with its checkpoints in place, and trains anew
    rather than resuming at its last update; the old checkpoints are kept aside."""
    shutil.copytree(prepared, tmp_path / "results")
    snakemake(tmp_path, TARGET, *budget(tmp_path, 3), mirror=mirror)
    first = torch.load(tmp_path / TARGET, weights_only=False)
    snakemake(tmp_path, TARGET, "--forcerun", TARGET, *budget(tmp_path, 3), mirror=mirror)
    log = (tmp_path / RUN / "train.log").read_text()  # the rerun's stderr
    assert "resumed from" not in log, log[-3000:]
    aside = tmp_path / RUN / "checkpoints.superseded-1"
    assert (
        f"its run finished at update 3 (max_update) and wrote its final model; run again, it is trained again; "
        f"moved them to {aside.relative_to(tmp_path)} and starting afresh from update 0"
    ) in log, log[-3000:]
    again = torch.load(tmp_path / TARGET, weights_only=False)
    assert again["progress"]["update"] == 3 and (aside / "checkpoint_last.pt").exists()
    for key, tensor in first["model"].items():  # the same three updates from the same seed, trained anew
        assert torch.equal(tensor, again["model"][key]), key
