"""The workflow on a real SLURM cluster (one node on this machine: `make test-slurm` starts it with
scripts/slurm-up.sh and stops it with scripts/slurm-down.sh). Jobs go through sbatch via profiles/slurm; a training
job killed mid-run by SLURM (SIGTERM, as on preemption) checkpoints, fails, and its retry resumes; a stop sent to
Snakemake cancels its jobs, which checkpoint."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, default_sigint, snakemake

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster():
    idle = shutil.which("sinfo") and subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True
    ).stdout.split()[:1] == ["idle"]
    if not idle:
        if os.environ.get("LWNMT_REQUIRE_SLURM"):
            pytest.fail("no idle SLURM node: `make test-slurm` starts one (scripts/slurm-up.sh)")
        pytest.skip("no SLURM cluster here (make test-slurm starts one)")


TARGET = "results/tables/ci/T2.md"


def through_slurm(tmp_path: Path, mirror: Path, **popen) -> tuple[subprocess.Popen, Path]:
    """Snakemake running the CI table with everything from training on submitted through profiles/slurm (the data
    made locally first: quick, many small jobs), and the training's checkpoint folder."""
    overlay = tmp_path / "longer.yaml"  # long enough a training to be killed mid-run
    overlay.write_text(yaml.safe_dump({"experiments": {"ci.enro": {"train": {"max_epoch": 40}}}}))
    configs = ["--configfile", str(ROOT / "config.yaml"), str(ROOT / "config/ci.yaml"), str(overlay)]
    snakemake(tmp_path, *configs, "--omit-from", "train", TARGET, mirror=mirror)
    env = dict(
        os.environ,
        LWNMT_SLURM_ACCOUNT="root",
        LWNMT_SLURM_PARTITION="debug",
        LWNMT_SLURM_FIRST_CHECK="2",
        LWNMT_GPUS_PER_JOB="0",
        LWNMT_TRAIN_CPUS="1",
        LWNMT_TRAIN_MEM_MB="2000",
        LWNMT_DATA_MIRROR=str(mirror),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(tmp_path),
        TARGET,
        "--profile",
        str(ROOT / "profiles/slurm"),
        *configs,
    ]
    run = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint, **popen
    )
    return run, tmp_path / "results/wmt16_enro_ci/ci.enro/seed1/checkpoints"


def running_training(run: subprocess.Popen, checkpoints: Path) -> str:
    """The SLURM id of the training job, once it has written its second epoch's checkpoint."""
    deadline = time.time() + 300
    while not (checkpoints / "checkpoint2.pt").exists():
        assert time.time() < deadline and run.poll() is None, "the training job never got going"
        time.sleep(0.5)
    jobs = subprocess.run(["squeue", "-h", "-o", "%i %k"], capture_output=True, text=True).stdout.splitlines()
    return next(line.split()[0] for line in jobs if "rule_train" in line)


def test_ci_workflow_through_sbatch_with_a_preempted_training(cluster, mirror, tmp_path):
    run, checkpoints = through_slurm(tmp_path, mirror)
    train_job = running_training(run, checkpoints)
    # SIGTERM to the batch step and everything in it, as a preemption grace signal: the trainer checkpoints and
    # exits 75, the job FAILs, Snakemake submits the retry (rule train: retries: 2)
    subprocess.run(["scancel", "--full", "--signal=TERM", train_job], check=True)
    # then a plain `scancel` of the retry, as a user does: sacct says "CANCELLED by 0", which the plugin (2.8.0)
    # would wait on forever; layerwise_nmt.snakemake_glue.slurm makes it a failure, and the third attempt resumes
    retry_job = wait_for_retry(run, train_job, checkpoints)
    subprocess.run(["scancel", retry_job], check=True)
    try:
        out, _ = run.communicate(timeout=900)
    finally:
        run.kill()
    assert run.returncode == 0, out[-4000:]
    assert f"SLURM-job '{retry_job}' failed, SLURM status is: 'CANCELLED'" in out, out[-4000:]

    table = (tmp_path / TARGET).read_text()
    assert "Transformer 1+1" in table and "(n=1)" in table
    log = (tmp_path / "results/wmt16_enro_ci/ci.enro/seed1/train.log").read_text()  # the retry's (Snakemake
    resumed = re.search(r"resumed from \S+: epoch (\d+), update (\d+)", log)  # clears a failed job's log)
    assert resumed and int(resumed.group(2)) > 0, log[:3000]  # the retry went on from a checkpoint
    assert "Trying to restart job" in out
    submitted = list(dict.fromkeys(re.findall(r"SLURM jobid (\d+)", out)))
    assert len(submitted) == 4, out[-4000:]  # train (three times), translate; score and table are localrules
    assert re.search(r"localrule score:", out) and re.search(r"localrule table:", out), out[-4000:]
    accounting = {
        job: fields
        for job, *fields in (
            line.split("|")
            for line in subprocess.run(
                ["sacct", "-n", "-X", "-P", "-o", "JobID,State,AllocCPUS", "-j", ",".join(submitted)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
        )
    }
    states = {job: state for job, (state, _) in accounting.items()}
    assert states[train_job] == "FAILED" and states[retry_job].startswith("CANCELLED by ")
    assert list(states.values()).count("COMPLETED") == 2, states
    translate_job = submitted[-1]  # after the last training
    assert accounting[translate_job][1] == "2", accounting  # the rule's threads: 2, not a profile-wide 1
    assert accounting[train_job][1] == "1", accounting  # LWNMT_TRAIN_CPUS
    assert json.loads((tmp_path / "results/wmt16_enro_ci/ci.enro/seed1/test.score.json").read_text())["bleu"] >= 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_sent_to_snakemake_alone_cancels_its_slurm_jobs_which_checkpoint(cluster, mirror, tmp_path, stop):
    """A Ctrl-C that reaches only Snakemake's process (tmux, a supervisor) or a scheduler's SIGTERM: Snakemake
    scancels its jobs, SLURM's SIGTERM makes the training save checkpoint_last.pt, and nothing is retried."""
    run, checkpoints = through_slurm(tmp_path, mirror, start_new_session=True)  # no terminal's process group
    try:
        train_job = running_training(run, checkpoints)
        sent = time.time()
        run.send_signal(stop)
        out, _ = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode != 0, out[-4000:]
    # the cancel is on record the moment Snakemake sends it; the job then leaves the queue once its training has
    # saved and exited, or at the latest when SLURM kills it KillWait (30 s, scripts/slurm-up.sh) after the SIGTERM
    exited = time.time()
    while not sacct_state(train_job).startswith("CANCELLED"):  # accounting hears from the controller within seconds
        assert time.time() < exited + 15, f"Snakemake exited without cancelling SLURM job {train_job}"
        time.sleep(0.5)
    while (queued := squeue_state(train_job)) is not None:
        assert time.time() < exited + 60, f"SLURM job {train_job} still queued ({queued}) 60 s after Snakemake exited"
        time.sleep(0.5)
    assert (checkpoints / "checkpoint_last.pt").stat().st_mtime > sent, out[-4000:]  # saved on the stop
    log = (tmp_path / "results/wmt16_enro_ci/ci.enro/seed1/train.log").read_text()
    assert re.search(r"signal SIGTERM: saved checkpoint_last.pt at update \d+", log), log[-3000:]
    assert len(set(re.findall(r"SLURM jobid (\d+)", out))) == 1, out[-4000:]  # no retry submitted
    assert sacct_state(train_job).startswith("CANCELLED")


def sacct_state(job: str) -> str:
    """The job's state in SLURM's accounting: "CANCELLED by 0" as soon as a cancel is sent."""
    return subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job], capture_output=True, text=True, check=True
    ).stdout.split("\n")[0]


def squeue_state(job: str) -> str | None:
    """The job's compact state in the queue (R, CG, ...), or None once it has left it."""
    for line in subprocess.run(["squeue", "-h", "-o", "%i %t"], capture_output=True, text=True).stdout.splitlines():
        queued, state = line.split()
        if queued == job:
            return state
    return None


def wait_for_retry(run: subprocess.Popen, failed_job: str, checkpoints: Path) -> str:
    """The SLURM id of the train job submitted after `failed_job`, once it has written a checkpoint of its own."""
    deadline, started = time.time() + 300, None
    while True:
        assert time.time() < deadline and run.poll() is None, "the retry never got going"
        jobs = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING", "-o", "%i %k"], capture_output=True, text=True
        ).stdout.splitlines()
        retry = next((line.split()[0] for line in jobs if "rule_train" in line and line.split()[0] != failed_job), None)
        if retry and started is None:
            started = time.time()
        last = checkpoints / "checkpoint_last.pt"
        if retry and last.exists() and last.stat().st_mtime > started:
            return retry
        time.sleep(0.5)
