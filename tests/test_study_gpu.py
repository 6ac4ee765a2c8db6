"""scripts/study_gpu.sh end to end at toy size on the CPU: prepare (data) here, the device step in the same folder
(what the GPU machine runs, resumable), collect into a fresh folder that has only the archive the device step
packed: the study's table is built there without any model."""

import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

TINY = {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1, "decoder_layers": 1}
STUDY = ("study.transformer", "study.lwc", "study.mlrf_dec_sa", "study.gca_full", "study.dou_deep",
         "study.transformer_longer")


def toy_overlay(path):
    experiments = {name: {"arch": {**TINY, **({"layers": 2} if name == "study.lwc" else {})},
                          "train": {"max_tokens": 512, "warmup_updates": 5, "max_epoch": 2, "patience": 0,
                                    "amp": "none"},
                          "decode": {"beam": 2}, "average": {"num": 2, "by": "epoch"}, "seeds": [1]}
                   for name in STUDY}
    experiments["study.lwc"]["arch"] = {k: v for k, v in experiments["study.lwc"]["arch"].items()
                                        if not k.endswith("_layers")}
    experiments["study.dou_deep"]["arch"].update(encoder_layers=2, decoder_layers=2)  # diversity: adjacent layers
    task = {"splits": {"train": {"max_lines": 200}, "valid": {"max_lines": 30}, "test": {"max_lines": 30}},
            "bpe": {"merges": 150}}
    path.write_text(yaml.safe_dump({"tasks": {"multi30k_deen": task}, "experiments": experiments}))


def driver(step, *args, env, timeout=900):
    result = subprocess.run(["bash", str(ROOT / "scripts" / "study_gpu.sh"), step, *args], env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{step}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.mark.skipif(os.environ.get("LWNMT_TEST_STUDY") != "1",
                    reason="~40 Snakemake jobs: minutes on an idle 2-core machine; LWNMT_TEST_STUDY=1 runs it")
def test_prepare_device_collect_at_toy_size(tmp_path, mirror):
    overlay = tmp_path / "toy.yaml"
    toy_overlay(overlay)
    gpu_side, cpu_side, out = tmp_path / "gpu", tmp_path / "cpu", tmp_path / "out"
    for d in (gpu_side, cpu_side, out):
        d.mkdir()
    env = dict(os.environ, STUDY_EXTRA=str(overlay), STUDY_WHEELS="0", STUDY_CARRY=str(tmp_path / "carry"),
               STUDY_WORKDIR=str(gpu_side), LWNMT_DATA_MIRROR=str(mirror), OUT=str(out), STUDY_JOBS="2",
               PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    driver("prepare", env=env)
    assert (tmp_path / "carry" / "data.tar.gz").stat().st_size > 0
    assert not list(gpu_side.glob("results/*/study.*"))  # prepare trains nothing
    for _ in range(4):  # as on the GPU machine: call again until done (a call stopped by STUDY_SECONDS resumes)
        if "study: done" in driver("device", env=env):
            break
    else:
        raise AssertionError("the device step did not finish in 4 calls")
    assert len(list(out.iterdir())) <= 8
    driver("collect", str(out), env=dict(env, STUDY_WORKDIR=str(cpu_side)))
    table = (cpu_side / "results" / "tables" / "study" / "T1.md").read_text()
    assert "LWC, He et al. 2018" in table and "Dou et al. 2018" in table
    assert {p.name for p in (cpu_side / "results" / "figures" / "study").glob("*.png")} == {"accuracy.png",
                                                                                           "buckets.png"}
    assert not list(cpu_side.rglob("*.pt"))  # no model came back: table and figures are built from the scores
    assert list(cpu_side.rglob("training.json"))
