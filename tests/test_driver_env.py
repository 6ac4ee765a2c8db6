"""The workflow reads with Snakemake alone: in an environment that holds only Snakemake at its pinned version (and
what Snakemake itself pulls in) — the way Snakemake's documentation installs it, and the driver of
`snakemake --use-conda` — the DAG builds, the linter passes and a config typo still stops the dry run in one line.
The jobs themselves get PyTorch from envs/*.yaml (or the project's own venv)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.system  # a Snakemake-only virtualenv built and run

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / ".venv-driver"


def pinned_snakemake() -> str:
    return next(
        line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines() if line.startswith("snakemake==")
    )


# Named apart from the fixture, so that a test module importing it does not see each test's `driver` parameter
# shadow the import.
@pytest.fixture(scope="session", name="driver")
def driver_fixture() -> Path:
    """A venv with `pip install -c constraints.txt snakemake` and nothing else, made once per set of pins.

    Under `make test` several workers may ask for it at once: the first makes it under a lock beside the venv while
    the others wait, then find the stamp (two `venv --clear` at once leave a pip with half its files)."""
    stamp = DRIVER / ".pins"
    pins = hashlib.sha256((ROOT / "constraints.txt").read_bytes()).hexdigest()
    with open(ROOT / ".venv-driver.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text() == pins):
            make_driver(stamp, pins)
    return DRIVER


def make_driver(stamp: Path, pins: str) -> None:
    """`python -m venv --clear`, then pip installs the pinned Snakemake; the stamp is written last."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(DRIVER)], check=True)
    result = subprocess.run(
        [
            str(DRIVER / "bin" / "pip"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            str(ROOT / "constraints.txt"),
            pinned_snakemake(),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        reason = f"could not install {pinned_snakemake()} from the package index: {result.stderr[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    stamp.write_text(pins)


def run(driver: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{driver / 'bin'}{os.pathsep}/usr/bin:/bin"  # no other Python before the driver's
    return subprocess.run(
        [str(driver / "bin" / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir), "--cores", "2", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_driver_env_holds_neither_torch_nor_numpy(driver):
    code = "import importlib.util as u; print([m for m in ('torch', 'numpy', 'pandas') if u.find_spec(m)])"
    out = subprocess.run([str(driver / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("configfile", [[], ["--configfile", str(ROOT / "config" / "demo.yaml")]], ids=["full", "demo"])
def test_dry_run_and_lint_with_snakemake_alone(driver, tmp_path, configfile):
    dry = run(driver, tmp_path, "-n", "--quiet", "rules", *configfile)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-3000:]
    assert "train" in dry.stdout and "translate" in dry.stdout
    lint = run(driver, tmp_path, "--lint", *configfile)
    assert lint.returncode == 0 and "Congratulations" in lint.stdout + lint.stderr, lint.stdout[-3000:]


def test_a_typo_still_stops_the_dry_run_in_one_line(driver, tmp_path):
    overlay = tmp_path / "typo.yaml"
    overlay.write_text(yaml.safe_dump({"experiments": {"demo.transformer": {"train": {"max_tokenz": 512}}}}))
    result = run(driver, tmp_path, "-n", "--configfile", str(ROOT / "config" / "demo.yaml"), str(overlay))
    assert result.returncode != 0
    line = next(text for text in (result.stdout + result.stderr).splitlines() if "max_tokenz" in text)
    assert line.startswith(f"error: {overlay}: config key experiments/demo.transformer/train"), line
    assert "did you mean max_tokens?" in line
