"""Jobs run the Python of the environment that runs the workflow, whatever `python` a user's PATH finds first."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT
from layerwise_nmt.snakemake_glue.job_env import job_path
import pytest

pytestmark = pytest.mark.system  # Snakemake jobs' interpreters


def test_a_job_runs_the_workflows_python_with_another_python_first_on_path(tmp_path):
    """The venv's snakemake started by its path, not activated, with a `python` first on PATH that is not the
    venv's (here one that fails): a real job (extract of a user-supplied file) still runs and succeeds."""
    snakemake = Path(sys.executable).parent / "snakemake"
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    for name in ("python", "python3"):
        (decoy / name).write_text("#!/bin/sh\necho 'the wrong python' >&2\nexit 1\n")
        (decoy / name).chmod(0o755)
    ldc = tmp_path / "ldc"
    ldc.mkdir()
    (ldc / "train.en").write_text("a small file\nof two lines\n")
    overlay = tmp_path / "user-data.yaml"
    overlay.write_text(yaml.safe_dump({"datasets": {"nist-zh-en": {"user_path": str(ldc)}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "LWNMT_DATA_MIRROR")}
    env["PATH"] = os.pathsep.join([str(decoy), "/usr/local/bin", "/usr/bin", "/bin"])
    cmd = [
        str(snakemake),
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(tmp_path),
        "--cores",
        "1",
        "results/raw/nist-zh-en/train.en",
        "--configfile",
        str(ROOT / "config.yaml"),
        str(overlay),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (tmp_path / "results/raw/nist-zh-en/train.en").read_text() == "a small file\nof two lines\n"


def test_the_interpreters_directory_goes_first_once():
    bin_dir = os.path.dirname(sys.executable)
    assert job_path("/usr/bin:/bin").split(os.pathsep) == [bin_dir, "/usr/bin", "/bin"]
    assert job_path(job_path("/usr/bin")) == job_path("/usr/bin")  # a job's own Snakemake (SLURM) re-reads it
    assert job_path(None) == bin_dir
