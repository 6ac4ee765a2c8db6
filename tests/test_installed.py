"""A non-editable install (the wheel `pip install .` builds) carries every file the package reads: the config's
schema and the rehearsal's release listings are package data, so the config commands and `translate --experiment`
work from any folder given the checkout's config files, with the output the checkout's own sources give."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, TOY_ARCH, toy_spec
from layerwise_nmt import cli
from layerwise_nmt.training.loop import train

pytestmark = pytest.mark.system  # the package installed into fresh virtualenvs

CONFIG = ["--config", str(ROOT / "config.yaml")]
DEMO = [*CONFIG, "--config", str(ROOT / "config/demo.yaml")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ of a venv holding only the wheel of the checkout's sources: the project venv's libraries are on its
    path (a .pth), the checkout's src/ is not (the editable install's own .pth is not read from there)."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"  # the wheel is built from a copy: setuptools writes build/ beside pyproject.toml
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(root / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = (root / "dist").glob("*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: the project venv's editable layerwise-nmt is seen through the .pth, and stays untouched
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    return venv / "bin"


def env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def lwnmt(bin_dir: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [bin_dir / "lwnmt", *map(str, args)], cwd=cwd, env=env(), capture_output=True, text=True, timeout=300
    )


def from_sources(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_installed_package_is_the_wheels_not_the_checkouts(installed, tmp_path):
    code = "import layerwise_nmt, sys; print(layerwise_nmt.__file__); print(*sys.path, sep='\\n')"
    out = subprocess.run(
        [installed / "python", "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert Path(out[0]).is_relative_to(installed.parent) and str(ROOT / "src") not in out[1:]


@pytest.mark.parametrize(
    "args, shown",
    [
        (["status", *CONFIG], "experiments:"),
        (["status", *DEMO], "demo.transformer"),
        (["plan", *CONFIG], "GPU-hours"),
        (["params", *CONFIG], "lwc.t1.deen.lwc_small"),
        (["params", *DEMO, "--vocab", "7880", "demo.lwc", "demo.transformer"], "7880/7880"),
    ],
    ids=["status", "status-demo", "plan", "params", "params-demo"],
)
def test_config_commands_from_any_folder(installed, tmp_path, args, shown):
    result = lwnmt(installed, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert shown in result.stdout and result.stdout == from_sources(*args, cwd=tmp_path).stdout


def test_a_config_mistake_is_still_one_line_naming_the_key(installed, tmp_path):
    overlay = tmp_path / "typo.yaml"
    overlay.write_text(yaml.safe_dump({"experiments": {"demo.lwc": {"arch": {"layers": "seven"}}}}))
    result = lwnmt(installed, "status", *DEMO, "--config", overlay, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "experiments/demo.lwc/arch/layers" in line and "seven" in line


def test_translate_an_experiment_from_any_folder(installed, toy_data, tmp_path, monkeypatch, capsys):
    """A toy model where the workflow puts experiment toy.exp's (the toy architecture on the demo's task), run in
    a folder of its own: the installed package translates with it as the checkout's sources do."""
    data = tmp_path / "results/multi30k_deen/data"
    shutil.copytree(toy_data, data / "bin-joint")
    shutil.copytree(toy_data.parent / "vocab", data / "vocab")
    (data / "bpe").mkdir()
    (data / "bpe/code").write_text("#version: 0.2\nq z\n")
    run = tmp_path / "results/multi30k_deen/toy.exp/seed1"
    train(toy_spec(max_update=3), str(data / "bin-joint"), "de", "en", str(run / "checkpoints"), str(run / "model.pt"))
    overlay = tmp_path / "toy.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "experiments": {
                    "toy.exp": {
                        "task": "multi30k_deen",
                        "model": "transformer",
                        "arch": TOY_ARCH,
                        "average": None,
                        "decode": {"beam": 2, "batch_size": 8},
                    }
                }
            }
        )
    )
    (tmp_path / "raw.de").write_text("W1 W2 W3\nW4 W5 .\n")
    args = ["translate", "raw.de", "--experiment", "toy.exp", *DEMO, "--config", str(overlay)]
    result = lwnmt(installed, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    monkeypatch.chdir(tmp_path)
    cli.main(args)  # the checkout's sources
    assert len(result.stdout.splitlines()) == 2 and result.stdout == capsys.readouterr().out


def test_the_rehearsals_release_listings_travel_with_it(installed, tmp_path):
    code = "from layerwise_nmt.rehearsal.standins import load_listings; print(len(load_listings()))"
    counts = [
        subprocess.run([python, "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True, check=True).stdout
        for python in (installed / "python", sys.executable)
    ]
    assert counts[0] == counts[1] and int(counts[0]) > 20


def test_the_checkout_commands_name_what_they_need_outside_one(installed, tmp_path):
    """`lwnmt rehearse` runs the checkout's workflow and `lwnmt docs` rewrites its documents: from an installed
    package they work in the checkout's folder, elsewhere they say so in one line."""
    for command in (["rehearse", "--mirror", tmp_path], ["docs", "--check"]):
        result = lwnmt(installed, *command, cwd=tmp_path)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr.strip() == (
            f"lwnmt {command[0]}: error: {tmp_path} is not a checkout of layerwise-nmt "
            f"(no workflow/Snakefile and config.yaml); run it in one"
        )
    docs, reference = lwnmt(installed, "docs", "--check", cwd=ROOT), from_sources("docs", "--check", cwd=ROOT)
    assert "generated block(s) stale" in docs.stdout
    assert (docs.returncode, docs.stdout) == (reference.returncode, reference.stdout)
    code = "from layerwise_nmt.rehearsal import run; print(run.SNAKEMAKE[-1])"
    snakefile = subprocess.run(
        [installed / "python", "-c", code], cwd=ROOT, env=env(), capture_output=True, text=True, check=True
    ).stdout.strip()
    assert snakefile == str(ROOT / "Snakefile")
