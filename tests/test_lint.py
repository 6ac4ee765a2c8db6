"""The code's form: ruff's lint, ruff's format check and mypy pass with pyproject.toml's settings (`make lint` runs
the same three), so that an unused import, an undefined name, a wrong type or an unformatted file fails the suite,
not a later reader."""

import subprocess
import sys

from conftest import ROOT
import pytest

pytestmark = pytest.mark.system  # ruff and mypy over the whole tree (`make lint`)


def test_ruff_check_passes():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_ruff_format_would_change_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_mypy_passes():
    # no cache: the suite writes nothing into the checkout
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
