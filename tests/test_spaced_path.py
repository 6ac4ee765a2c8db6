"""A checkout in a folder whose path has spaces and non-ASCII letters (".../my lab ü/lwnmt"): `make demo` and
`make test` run their real recipes there, and the GPU node's script keeps such paths whole. Make splits words on
spaces, so no recipe may hold the checkout's path as words."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.system  # a checkout whose path has a space, through Snakemake

COPIED = [
    "Makefile",
    "pyproject.toml",
    "constraints.txt",
    "README.md",
    "LICENSE",
    "Snakefile",
    "config.yaml",
    "config",
    "workflow",
    "src",
    "envs",
    "profiles",
    "scripts",
    "tests/conftest.py",
]
# make test here runs only this, in the copy's venv: which Python and which package it got
WHERE = """import sys
from pathlib import Path

import layerwise_nmt


def test_the_venv_and_the_package_are_this_checkouts():
    here = Path(__file__).resolve().parents[1]
    assert Path(sys.prefix) == here / ".venv"
    assert Path(layerwise_nmt.__file__).resolve().is_relative_to(here / "src")
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spaced") / "my lab ü" / "lwnmt"
    for name in COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, root / name)
    (root / "tests" / "test_where.py").write_text(WHERE)
    return root


@pytest.fixture(scope="module")
def make_env(tmp_path_factory) -> dict:
    """make's environment: a PYTHON whose `-m venv DIR` makes a venv in seconds that reaches the project venv's
    packages (all but layerwise-nmt, which the recipe installs from the copy), pip offline and without the
    dependencies it would find installed anyway, and a Snakemake profile that makes `make demo` a dry run."""
    tools = tmp_path_factory.mktemp("tools")
    site = tools / "site"
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("layerwise_nmt", "__editable__")) and entry.suffix != ".pth":
            (site / entry.name).symlink_to(entry)
    python = tools / "python"
    python.write_text(f'''#!/bin/sh
# -m venv DIR
"{sys.executable}" "$@" --without-pip || exit 1
purelib=$("$3/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "{site}" > "$purelib/project.pth"
''')
    python.chmod(0o755)
    (tools / "dry").mkdir()
    (tools / "dry" / "config.yaml").write_text("dry-run: true\nquiet: [rules]\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "PYTEST_", "SNAKEMAKE_", "MAKE")) and k != "PYTHONPATH"
    }
    # PIP_NO_BUILD_ISOLATION=0 is pip's --no-build-isolation: the project venv's setuptools builds the copy
    return {
        **env,
        "PYTHON": str(python),
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "SNAKEMAKE_PROFILE": str(tools / "dry"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        "PYTEST_XDIST_AUTO_NUM_WORKERS": "1",
        "PYTEST_ADDOPTS": "-p no:cacheprovider tests/test_where.py",
    }


def make(checkout: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=300)


def test_no_recipe_holds_the_checkouts_path(checkout, make_env):
    for target in ("demo", "test"):
        planned = make(checkout, make_env, "-n", "-B", target)
        assert planned.returncode == 0, planned.stderr
        assert "-m venv .venv" in planned.stdout and str(checkout) not in planned.stdout, planned.stdout


def test_make_demo_and_make_test_run_there(checkout, make_env):
    installed = make(checkout, make_env, ".venv/.installed")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    demo = make(checkout, make_env, "demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "This was a dry-run" in demo.stdout and "train " in demo.stdout  # the demo's whole DAG, from the copy
    test = make(checkout, make_env, "test")
    assert test.returncode == 0 and "1 passed" in test.stdout, test.stdout + test.stderr


def functions(*names: str) -> str:
    script = ROOT / "scripts" / "study_gpu.sh"
    return "".join(f"source <(sed -n '/^{name}()/,/^}}/p' '{script}'); " for name in names)


def test_the_node_script_keeps_paths_with_spaces_whole(checkout, tmp_path):
    """study_gpu.sh on a node where the copy's path has spaces: the config files reach snakemake whole, functions
    run by `bash -c` get ROOT and SITE whole, and the `python` it makes runs a python3 whose path has them."""
    bin_dir = tmp_path / "my bin ü"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')  # prints its arguments, one a line
    (bin_dir / "python3").chmod(0o755)
    extra = tmp_path / "my extra ü.yaml"
    code = (
        functions("snake", "size_configs", "extra_configs", "in_bash", "setup_env")
        + f"PATH='{bin_dir}':$PATH; ROOT='{checkout}'; STUDY='{tmp_path}/study'; SITE='{tmp_path}/my site'; "
        + f"EXTRA='{extra}'; snake small -n; show() {{ echo \"ROOT=$ROOT SITE=$SITE\"; }}; "
        + 'bash -c "$(in_bash show)"; setup_env > /dev/null; "$SITE/bin/python" shim'
    )
    result = subprocess.run(["bash", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    configs = [
        str(checkout / "config.yaml"),
        str(checkout / "config/study.yaml"),
        str(checkout / "config/study_small.yaml"),
        str(extra),
    ]
    assert lines[:6] == ["-m", "snakemake", "-s", str(checkout / "Snakefile"), "-d", f"{tmp_path}/study/small"]
    assert lines[6:12] == ["-n", "--configfile", *configs]
    assert lines[12] == f"ROOT={checkout} SITE={tmp_path}/my site" and lines[-1] == "shim"
