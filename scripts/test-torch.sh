#!/usr/bin/env bash
# The test suite on another PyTorch than constraints.txt's (default 2.11.0, what GPU images commonly ship), to keep
# pyproject.toml's lower bound honest: a venv of its own with that torch from PyPI (Linux wheels carry the CUDA
# libraries: ~3 GB; the tests run on the CPU) and every other package at constraints.txt's version.
#   bash scripts/test-torch.sh [VERSION [pytest arguments ...]]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-2.11.0}
shift || true
venv=.venv-torch$version
python3 -m venv "$venv"
grep -v '^torch==' constraints.txt > "$venv/constraints.txt"
"$venv/bin/pip" install --quiet --disable-pip-version-check -c "$venv/constraints.txt" "torch==$version" \
    -e '.[test,slurm,tensorboard,ctranslate2,lint]'
"$venv/bin/python" -c "import torch; print('PyTorch', torch.__version__, 'CPU capability', torch.backends.cpu.get_cpu_capability())"
PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -m "not slurm" "$@"
