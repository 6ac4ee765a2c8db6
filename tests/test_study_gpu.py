"""scripts/study_gpu.sh, node_wheels.py and study_status.py, the parts that need no GPU and no network: each step's
time budget against the allocation (a static check), the node's tools, its imports, a second allocation's data, the
results file and the report's claims on synthetic collected results. The whole path (the node's image rebuilt, the
copy that travels, `run` and `check` in it, the returned files' limits, collect, a second allocation) is
`make node-rehearsal`, which CI runs."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("node_wheels", ROOT / "scripts" / "node_wheels.py")
node_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(node_wheels)


def study(*args, env=None):
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "study_gpu.sh"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_the_first_shard_is_the_whole_small_table():
    assert study("shards").stdout.split() == [
        "small",
        "seed1",
        "seed2",
        "seed3",
        "lwc-mlrf",
        "depth6-seed1",
        "depth6-seed2",
        "depth6-seed3",
        "depth6-seed4",
        "paper6-seed1",
        "paper6-seed2",
        "paper6-seed3",
    ]
    bad = study("shard", "big", env={k: str(v) for k, v in ALLOCATION.items()})
    assert bad.returncode == 2
    assert "unknown shard big; known: small seed1 seed2 seed3 lwc-mlrf depth6-seed1" in bad.stderr


def test_shards_keep_a_baseline_with_the_rows_warm_started_from_it():
    """Models cannot travel back from the GPU machine: a warm-started row must be in its baseline's shard."""
    targets = {}
    for name in ("small", "seed1", "seed2", "seed3", "lwc-mlrf"):
        code = (
            f"source <(sed -n '/^shard_targets()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); TASK=multi30k_deen; "
            f"shard_targets {name}"
        )
        out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True).stdout.split()
        targets[name] = {tuple(t.split("/")[2:4]) for t in out}
    assert len(targets["small"]) == 18
    iwslt = targets["seed1"] | targets["seed2"] | targets["seed3"] | targets["lwc-mlrf"]
    assert len(iwslt) == 18 and sum(map(len, (targets[n] for n in ("seed1", "seed2", "seed3", "lwc-mlrf")))) == 18
    for name in ("seed1", "seed2", "seed3"):
        for _, seed in targets[name]:
            assert seed == f"seed{name[-1]}"
        assert ("study.transformer", f"seed{name[-1]}") in targets[name]
        assert {e for e, _ in targets[name]} == {
            "study.transformer",
            "study.gca_full",
            "study.dou_deep",
            "study.transformer_longer",
        }


def test_wheels_are_what_the_image_lacks_and_nothing_it_has(tmp_path):
    needed = node_wheels.closure()
    assert {"snakemake", "sacremoses", "subword-nmt", "jsonschema", "connection-pool", "tensorboardx"} <= set(needed)
    image = node_wheels.image_packages(ROOT / "scripts" / "node-image-packages.txt")
    assert {"torch", "numpy", "pyyaml", "pandas", "sacrebleu", "nvidia-ml-py"} <= image
    assert not {"snakemake", "jsonschema", "sacremoses", "subword-nmt", "tensorboardx"} & image  # carried


def test_a_machine_without_the_wheels_says_what_is_missing(tmp_path):
    """The node's step checks its imports before anything runs, and names the missing one."""
    code = (
        f"source <(sed -n '/^setup_env()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); ROOT={tmp_path}; "
        f"SITE={tmp_path}/site; PATH={tmp_path}/bin:$PATH; setup_env"
    )
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "python3"  # a python3 with torch-less site-packages: every import but yaml fails
    fake.write_text(f'#!/bin/sh\nif [ "$2" = \'import yaml\' ]; then exec {sys.executable} "$@"; fi\nexit 1\n')
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
    fake.write_text(f'#!/bin/sh\nif [ "$2" = --install ]; then echo "$@" >> {calls}; fi\nexit 0\n')
    fake.chmod(0o755)
    code = (
        f"source <(sed -n '/^setup_env()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); ROOT={tmp_path}; "
        f"SITE={site}; PATH={tmp_path}/bin:$PATH; setup_env && setup_env"
    )
    result = subprocess.run(["bash", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(calls.read_text().splitlines()) == 1  # the second call found these wheels installed
    assert not (site / "rpds_py_cp311.so").exists()
    assert (site / ".installed").read_text() == "python 3.12 new\n"


# an allocation to check the arithmetic against: 20 minutes in all, 2 of them the node's start, 12 per command
ALLOCATION = {"ALLOCATION_S": 1200, "NODE_START_S": 120, "NODE_COMMAND_S": 720}


def budget(**env):
    return study("budget", env={k: str(v) for k, v in {**ALLOCATION, **env}.items()})


def test_the_node_commands_refuse_to_start_without_the_nodes_limits():
    """No cluster's limits are assumed: without them `run`, `check`, `shard` and `budget` stop, naming each."""
    unset = {"ALLOCATION_S": "", "NODE_COMMAND_S": "", "NODE_START_S": ""}
    for command in ("run", "check", "budget", "shard seed1"):
        refused = study(*command.split(), env=unset)
        assert refused.returncode == 2, (command, refused.stdout)
        assert refused.stderr.startswith(f"study_gpu.sh {command.split()[0]}: set your node's limits: ALLOCATION_S")
        assert "NODE_COMMAND_S (the most seconds one command may run)" in refused.stderr
    one = study("budget", env={**unset, "ALLOCATION_S": "1200"})
    assert "limits: NODE_COMMAND_S (the most" in one.stderr and "ALLOCATION_S (" not in one.stderr
    assert study("shards", env=unset).returncode == 0  # listing needs no node


def test_each_step_has_a_budget_and_they_fit_the_allocation():
    """Command 1 (checks <= 90 s, the probe, the study) a minute short of a command's limit, then the full gpu-check
    in what the allocation has left. Plans of two commands that overran the allocation must fail this check."""
    fits = budget()
    assert fits.returncode == 0 and "budget: fits" in fits.stdout, fits.stdout
    assert "command 1, run (660 s)" in fits.stdout and "command 2, check (420 s)" in fits.stdout
    assert budget(STUDY_S=640, KILL_S=60).returncode == 1  # setup + 640 s + 60 s of grace: over command 1
    assert budget(RUN_S=740).returncode == 1  # longer than a command may run
    assert budget(FAMILIES_S=80).returncode == 1  # the checks before the study over 90 s
    over = budget(RUN_S=660, CHECK_S=450)  # a second command longer than what is left
    assert over.returncode == 1 and "OVER: node start + command 1 + command 2" in over.stdout
    long = budget(ALLOCATION_S=3600, NODE_START_S=0, NODE_COMMAND_S=1800)  # what is left exceeds one command
    assert "command 2, check (1740 s)" in long.stdout and "budget: fits" in long.stdout, long.stdout


def test_the_probe_is_off_unless_asked_for_and_its_seconds_go_to_the_study():
    """On an H100 the probe's two stages (a Python start, CUDA's set-up and 8 s of training each) overran its 45 s and
    measured nothing; nine at once, its usual answer, is the default, and the study gets those seconds."""
    listed = budget().stdout
    assert re.search(r"probe: sizes the study \(PROBE_S\) +0 s", listed), listed
    assert re.search(r"the small study \(STUDY_S\) +545 s", listed), listed
    assert re.search(r"the small study \(STUDY_S\) +485 s", budget(PROBE_S=60).stdout)
    script = (ROOT / "scripts" / "study_gpu.sh").read_text()
    assert 'if [ "$PROBE_S" -gt 0 ]; then' in script


def test_every_timeout_in_the_node_commands_is_a_budgeted_step():
    """No step outside the budget: each `timeout` runs under one of the budget's variables (through `bounded`)."""
    script = (ROOT / "scripts" / "study_gpu.sh").read_text()
    timeouts = [line for line in script.splitlines() if re.match(r"\s*timeout ", line)]
    assert timeouts == ['    timeout -s TERM -k "$KILL_S" "$seconds" "$@" || status=$?']
    budgeted = re.findall(r'bounded [\w"$ -]+? "\$(\w+)"', script)
    assert set(budgeted) == {"ENV_S", "INSTALL_S", "FAMILIES_S", "DRYRUN_S", "PROBE_S", "GPUCHECK_S", "seconds"}
    listed = budget().stdout
    for name in ("ENV_S", "INSTALL_S", "FAMILIES_S", "DRYRUN_S", "PROBE_S", "STUDY_S", "KILL_S", "PACK_S"):
        assert f"({name})" in listed


def test_the_node_commands_need_no_make_or_git():
    """The node's image has bash and python3; `make` and `git` are not known to exist there."""
    script = (ROOT / "scripts" / "study_gpu.sh").read_text()
    node = script[script.index("tools() {") : script.index("collect() {")]
    node = re.sub(r'"[^"\n]*"|#.*', "", node)  # what is said is not what is called
    assert not re.search(r"(^|[\s;(|&])(make|git)\s", node, re.M), "make or git called on the node"
    tools = re.search(r'TOOLS="([^"]+)"', script).group(1).split()
    assert {"bash", "python3", "timeout", "tar", "awk"} <= set(tools) and not {"make", "git"} & set(tools)


def test_a_collected_study_unpacks_its_data_again(tmp_path):
    """collect leaves data/text/test.* in .study/small: the next allocation must still unpack bin-joint."""
    data = tmp_path / "pack" / "results" / "multi30k_deen" / "data"
    (data / "bin-joint").mkdir(parents=True)
    (data / "bin-joint" / "train.de-en.de.bin").write_text("")
    subprocess.run(["tar", "-czf", str(tmp_path / "data.tar.gz"), "-C", str(tmp_path / "pack"), "results"], check=True)
    collected = tmp_path / "small" / "results" / "multi30k_deen" / "data" / "text"
    collected.mkdir(parents=True)
    (collected / "test.de-en.en").write_text("a\n")
    code = (
        f"source <(sed -n '/^unpack_data()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); STUDY={tmp_path}; "
        f"TASK=multi30k_deen; unpack_data small"
    )
    subprocess.run(["bash", "-c", code], check=True)
    assert (tmp_path / "small" / "results" / "multi30k_deen" / "data" / "bin-joint" / "train.de-en.de.bin").exists()
    assert (collected / "test.de-en.en").exists()


def test_an_import_error_is_shown_not_only_named(tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "python3"  # jsonschema's import raises; the rest import
    fake.write_text(
        "#!/bin/sh\nif [ \"$2\" = 'import jsonschema' ]; then"
        " echo 'Traceback (most recent call last):' >&2;"
        " echo \"ModuleNotFoundError: No module named 'rpds.rpds'\" >&2; exit 1; fi\nexit 0\n"
    )
    fake.chmod(0o755)
    code = (
        f"source <(sed -n '/^setup_env()/,/^}}/p' {ROOT}/scripts/study_gpu.sh); ROOT={tmp_path}; "
        f"SITE={tmp_path}/site; PATH={tmp_path}/bin:$PATH; setup_env"
    )
    result = subprocess.run(["bash", "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "cannot import jsonschema" in result.stdout and "No module named 'rpds.rpds'" in result.stdout
    assert (tmp_path / "site" / "bin" / "python").exists()  # the rules' `python` is this python3


def test_wheels_unpack_like_pip_target(tmp_path):
    import zipfile

    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo/__init__.py", "X = 1\n")
        z.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
        z.writestr("demo-1.0.data/purelib/extra_mod.py", "Y = 2\n")
    assert node_wheels.main(["--install", str(tmp_path / "site"), str(wheel)]) == 0
    site = tmp_path / "site"
    assert (site / "demo" / "__init__.py").exists() and (site / "extra_mod.py").exists()
    assert not (site / "demo-1.0.data").exists()


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(study_dir, experiment, seed, hyps, bleu, training=None):
    import json

    run = study_dir / "small" / "results" / "multi30k_deen" / experiment / f"seed{seed}"
    (run / "checkpoints").mkdir(parents=True)
    (run / "test.txt").write_text("\n".join(hyps) + "\n")
    (run / "test.score.json").write_text(json.dumps({"bleu": bleu}))
    (run / "checkpoints" / "training.json").write_text(
        json.dumps(
            training
            or {
                "updates": 400,
                "epochs_completed": 12,
                "target_tokens": 1_200_000,
                "minutes": 2.0,
                "stopped_by": "max_minutes",
                "peak_gpu_memory_gib": 1.5,
            }
        )
    )
    (run / "train.benchmark.tsv").write_text("s\th:m:s\tmax_rss\n130.5\t0:02:10\t2048.5\n")


def test_the_results_file_lists_every_run_with_its_numbers(tmp_path):
    import json

    status = load_script("study_status")
    write_run(tmp_path, "study.transformer", 1, ["a b"], 31.234)
    started = tmp_path / "small" / "results" / "multi30k_deen" / "study.lwc" / "seed1"
    started.mkdir(parents=True)
    out = tmp_path / "results.json"
    assert status.node_results(tmp_path / "small", out) == 1
    result = json.loads(out.read_text())
    assert result["scored"] == 1 and result["started"] == 2
    scored = next(r for r in result["runs"] if r["experiment"] == "study.transformer")
    assert scored == {
        "experiment": "study.transformer",
        "seed": 1,
        "bleu": 31.23,
        "updates": 400,
        "epochs": 12,
        "stopped_by": "max_minutes",
        "train_seconds": 120,
        "peak_gpu_memory_gib": 1.5,
        "target_tokens_per_second": 10000,
        "job_wall_seconds": 130,
        "max_rss_mib": 2048,
    }
    assert not list(tmp_path.glob(".results.json*"))  # written beside, then renamed


def test_a_run_trained_in_a_fraction_of_a_second_has_its_throughput(tmp_path):
    """A toy run on a fast CPU: 0.25 s of training is 0.0 minutes rounded, not 0 tokens per second."""
    import json

    status = load_script("study_status")
    training = {"updates": 4, "target_tokens": 1000, "minutes": 0.0, "seconds": 0.25}
    write_run(tmp_path, "study.transformer", 3, ["a b"], 1.0, training=training)
    status.node_results(tmp_path / "small", tmp_path / "results.json")
    (run,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert run["target_tokens_per_second"] == 4000 and run["train_seconds"] == 0.2


def test_collected_scores_give_mean_sd_bootstrap_and_each_claim(tmp_path):
    """Synthetic collected results: LWC translates every test sentence right, its control drops words (claim held);
    MLRF is its control's equal (not held); Dou's row has no runs yet."""
    import random

    status = load_script("study_status")
    rng = random.Random(0)
    refs = [" ".join(rng.choice("abcdefghijklmnopqrstuvwxyz") * 3 for _ in range(12)) for _ in range(60)]
    text = tmp_path / "small" / "results" / "multi30k_deen" / "data" / "text"
    text.mkdir(parents=True)
    (text / "test.de-en.en").write_text("\n".join(refs) + "\n")
    worse = [" ".join(w for i, w in enumerate(r.split()) if (i + k) % 3) for k, r in enumerate(refs)]
    for seed, (good, bad) in enumerate([(40.0, 30.0), (41.0, 31.0), (42.0, 29.0)], start=1):
        write_run(tmp_path, "study.transformer", seed, worse, bad)
        write_run(tmp_path, "study.lwc", seed, refs, good)
        write_run(tmp_path, "study.mlrf_dec_sa", seed, worse, bad)
        write_run(tmp_path, "study.transformer_longer", seed, worse, bad)
        write_run(tmp_path, "study.gca_full", seed, refs, good)
    rows = {r["experiment"]: r for r in status.summary_rows(tmp_path, "small", [])}
    assert rows["study.lwc"]["mean"] == pytest.approx(41.0) and rows["study.lwc"]["sd"] == pytest.approx(1.0)
    assert rows["study.lwc"]["claim"] == "held" and rows["study.lwc"]["p_value"] < 0.05
    assert rows["study.lwc"]["delta"] == pytest.approx(41.0 - 30.0) and rows["study.lwc"]["seeds"] == [1, 2, 3]
    assert rows["study.mlrf_dec_sa"]["claim"] == "not held"
    assert rows["study.gca_full"]["claim"] == "held" and rows["study.gca_full"]["control"] == "study.transformer_longer"
    assert rows["study.dou_deep"]["n"] == 0 and "claim" not in rows["study.dou_deep"]
    docs = tmp_path / "docs"
    assert status.main(["--study", str(tmp_path), "--docs", str(docs), "--no-report"]) == 0
    page = (docs / "README.md").read_text()
    assert "## the demo's model size (3+3 layers, d=256): 15 of 18 runs" in page
    assert "| 41.00 ± 1.00 (3 of 3) | max_minutes × 3 | +11.00, p = 0.0" in page
    assert "| held |" in page and "| not held |" in page
    assert "not yet (`study.transformer_longer`)" in page
