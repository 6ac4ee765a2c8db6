"""The workflow profile (profiles/default), which Snakemake reads beside any --profile: on a machine that sees GPUs
it lets one training per GPU run at a time, but a run handed to a cluster's executor keeps the cluster profile's
own GPU count (the submit host's GPUs are not the jobs')."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.system  # Snakemake itself reads the profiles: ~11 s of its start-up per case

PARSED = """
import json, sys
from snakemake.cli import parse_args
sys.argv = ["snakemake", *sys.argv[1:]]
_, args = parse_args(sys.argv[1:])
print(json.dumps({name: resource.value for name, resource in (args.resources or {}).items()}))
"""


def resources(*argv: str, gpus: str = "0,1") -> dict:
    """The resources Snakemake's command line parses to, on a host whose CUDA_VISIBLE_DEVICES lists `gpus`."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "SNAKEMAKE_PROFILE")}
    run = subprocess.run(
        [sys.executable, "-c", PARSED, *argv, "-n"],
        cwd=ROOT,
        env=dict(env, CUDA_VISIBLE_DEVICES=gpus),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_gpu_machine_runs_one_training_per_visible_gpu():
    assert resources("--cores", "all") == {"gpu": 2}
    assert resources("--cores", "all", gpus="") == {}


@pytest.mark.parametrize(
    "argv",
    [
        ("--profile", "profiles/slurm"),
        ("--profile=profiles/slurm",),
    ],
)
def test_a_cluster_run_from_a_host_with_gpus_keeps_the_cluster_profiles_count(argv):
    """The SLURM profile's 10,000 (the scheduler enforces the real limit), not the login node's two GPUs."""
    assert resources(*argv) == {"gpu": 10000}


def test_a_cluster_executor_named_on_the_command_line_takes_no_count_from_the_host():
    assert "gpu" not in resources("--executor", "slurm", "--jobs", "4")


def test_every_rule_that_asks_for_a_gpu_gets_the_slurm_profiles_gpu_settings():
    """translate_heldout asked for a GPU but got the cluster's default partition, memory and an hour: on a cluster
    whose GPUs are in their own partition, sbatch refused it."""
    import re

    import yaml

    rules, gpu_rules = {}, set()
    for path in sorted((ROOT / "workflow/rules").glob("*.smk")):
        text = path.read_text()
        for block in re.split(r"\n(?=rule |use rule )", text):
            header = re.match(r"(?:rule (\w+)|use rule (\w+) as (\w+))", block)
            if not header:
                continue
            name = header.group(1) or header.group(3)
            rules[name] = header.group(2)
            if re.search(r"^\s+gpu=", block, re.M):
                gpu_rules.add(name)
    gpu_rules |= {name for name, parent in rules.items() if parent in gpu_rules}
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert {"train", "translate", "translate_heldout", "translate_lenpen"} <= gpu_rules
    missing = sorted(gpu_rules - set(profile["set-resources"]))
    assert missing == [], f"profiles/slurm/config.yaml set-resources lacks {missing}"
    for name in gpu_rules:
        assert "slurm_partition" in profile["set-resources"][name] and "gpu" in profile["set-resources"][name]
