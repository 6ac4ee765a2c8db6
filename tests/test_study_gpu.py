"""scripts/study_gpu.sh and scripts/node_wheels.py, the parts that need no GPU and no network. The whole path (the
node's image rebuilt, the copy that travels, `first` and `shard small` in it, the returned files' limits, collect)
is `make node-rehearsal`, which CI runs."""

import importlib.util
import os
import subprocess
import sys

from conftest import ROOT

spec = importlib.util.spec_from_file_location("node_wheels", ROOT / "scripts" / "node_wheels.py")
node_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(node_wheels)


def study(*args, env=None):
    return subprocess.run(["bash", str(ROOT / "scripts" / "study_gpu.sh"), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_the_first_shard_is_the_whole_small_table():
    assert study("shards").stdout.split() == ["small", "seed1", "seed2", "seed3", "lwc-mlrf"]
    bad = study("shard", "big")
    assert bad.returncode == 2 and "unknown shard big; known: small seed1 seed2 seed3 lwc-mlrf" in bad.stderr


def test_shards_keep_a_baseline_with_the_rows_warm_started_from_it():
    """Models cannot travel back from the GPU machine: a warm-started row must be in its baseline's shard."""
    targets = {}
    for name in ("small", "seed1", "seed2", "seed3", "lwc-mlrf"):
        code = (f"source <(sed -n '/^shard_targets()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); TASK=multi30k_deen; "
                f"shard_targets {name}")
        out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True).stdout.split()
        targets[name] = {tuple(t.split("/")[2:4]) for t in out}
    assert len(targets["small"]) == 18
    iwslt = targets["seed1"] | targets["seed2"] | targets["seed3"] | targets["lwc-mlrf"]
    assert len(iwslt) == 18 and sum(map(len, (targets[n] for n in ("seed1", "seed2", "seed3", "lwc-mlrf")))) == 18
    for name in ("seed1", "seed2", "seed3"):
        for experiment, seed in targets[name]:
            assert seed == f"seed{name[-1]}"
        assert ("study.transformer", f"seed{name[-1]}") in targets[name]
        assert {e for e, _ in targets[name]} == {"study.transformer", "study.gca_full", "study.dou_deep",
                                                 "study.transformer_longer"}


def test_wheels_are_what_the_image_lacks_and_nothing_it_has(tmp_path):
    needed = node_wheels.closure()
    assert {"snakemake", "sacremoses", "subword-nmt", "jsonschema", "connection-pool"} <= set(needed)
    image = node_wheels.image_packages(ROOT / "scripts" / "node-image-packages.txt")
    assert {"torch", "numpy", "pyyaml", "pandas", "sacrebleu", "nvidia-ml-py"} <= image
    assert not {"snakemake", "jsonschema", "sacremoses", "subword-nmt"} & image  # the image lacks these: carried


def test_a_machine_without_the_wheels_says_what_is_missing(tmp_path):
    """The node's step checks its imports before anything runs, and names the missing one."""
    code = (f"source <(sed -n '/^setup_env()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); ROOT={tmp_path}; "
            f"SITE={tmp_path}/site; PATH={tmp_path}/bin:$PATH; setup_env")
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "python3"  # a python3 with torch-less site-packages: every import but yaml fails
    fake.write_text(f"#!/bin/sh\nif [ \"$2\" = 'import yaml' ]; then exec {sys.executable} \"$@\"; fi\nexit 1\n")
    fake.chmod(0o755)
    result = subprocess.run(["bash", "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "study: python3 cannot import torch (carry .whl: make study-prepare)" in result.stdout


def test_wheels_of_another_prepare_are_installed_again_and_the_same_ones_once(tmp_path):
    """The site on the node is keyed by the wheels' own key (Python version, image, pins): a site installed from
    other wheels (another Python's, an older prepare) is replaced, never reused; the same wheels install once."""
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / ".complete").write_text("python 3.12 new\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / ".installed").write_text("python 3.11 old\n")
    (site / "rpds_py_cp311.so").write_text("")
    (tmp_path / "bin").mkdir()
    calls = tmp_path / "pip-calls"
    fake = tmp_path / "bin" / "python3"  # records wheel installs; every import succeeds
    fake.write_text(f"#!/bin/sh\nif [ \"$2\" = --install ]; then echo \"$@\" >> {calls}; fi\nexit 0\n")
    fake.chmod(0o755)
    code = (f"source <(sed -n '/^setup_env()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); ROOT={tmp_path}; "
            f"SITE={site}; PATH={tmp_path}/bin:$PATH; setup_env && setup_env")
    result = subprocess.run(["bash", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(calls.read_text().splitlines()) == 1  # the second call found these wheels installed
    assert not (site / "rpds_py_cp311.so").exists()
    assert (site / ".installed").read_text() == "python 3.12 new\n"
