"""The conda envs users get (envs/*.yaml) pin the versions of constraints.txt, which make demo / make test / CI
install from; pyproject.toml's ranges admit every one of them."""

import re
import tomllib

import yaml
from packaging.requirements import Requirement

from conftest import ROOT

ALIASES = {"pytorch": "torch"}


def pins():
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {
        name.lower(): version
        for name, version in (line.split("==") for line in lines if line and not line.startswith("#"))
    }


def test_pyproject_ranges_admit_the_pinned_versions_and_pytorch_2_11():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(d) for d in project["dependencies"]]
    requirements += [Requirement(d) for extra in project["optional-dependencies"].values() for d in extra]
    pinned = pins()
    for req in requirements:
        name = req.name.lower()
        assert name in pinned, f"constraints.txt does not pin {name}"
        assert req.specifier.contains(pinned[name]), f"pyproject.toml: {req} excludes the pinned {pinned[name]}"
    torch = next(r for r in requirements if r.name == "torch")
    assert torch.specifier.contains("2.11.0") and not torch.specifier.contains("2.10.0")  # what GPU images ship


def test_env_pins_match_constraints():
    expected = pins()
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        spec = yaml.safe_load(env.read_text())
        entries = [d for d in spec["dependencies"] if isinstance(d, str)]
        entries += [p for d in spec["dependencies"] if isinstance(d, dict) for p in d.get("pip", [])]
        for entry in entries:
            match = re.match(r"([A-Za-z0-9_.-]+)\s*==?\s*([^=\s]+)", entry)
            if not match or match.group(1) in ("python", "pip"):
                continue
            name = ALIASES.get(match.group(1).lower(), match.group(1).lower())
            assert name in expected, f"{env.name}: {name} is not a pinned project dependency"
            assert match.group(2) == expected[name], f"{env.name}: {name} {match.group(2)} != {expected[name]}"


# What each conda env must be able to import: the package modules its rules run (import statements anywhere in
# them, lazy ones included), mapped from import names to distribution names.
ENV_MODULES = {
    "preprocess.yaml": [
        "data/[!b]*.py",
        "data/bpe.py",
        "data/binarize.py",
        "config.py",
        "settings.py",
        "__init__.py",
    ],  # data/batching.py is training's
    "train.yaml": [
        "training/loop.py",
        "training/progress.py",
        "training/reporting.py",
        "training/average.py",
        "inference/decode.py",
        "grid/parameter_table.py",
        "models/*.py",
        "data/batching.py",
        "data/binarize.py",
        "data/vocab.py",
        "data/io.py",
        "settings.py",
    ],
    "report.yaml": [
        "scoring/score.py",
        "report/*.py",
        "inference/decode.py",
        "models/*.py",
        "data/vocab.py",
        "data/io.py",
        "config.py",
        "settings.py",
    ],
}
DISTRIBUTIONS = {"yaml": "pyyaml", "subword_nmt": "subword-nmt", "torch": "torch", "tensorboardX": "tensorboardx"}


def imported_names(path):
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_import_of_a_rule_is_in_its_conda_env():
    import sys

    package = ROOT / "src/layerwise_nmt"
    for env, patterns in ENV_MODULES.items():
        spec = yaml.safe_load((ROOT / "envs" / env).read_text())
        entries = [d for d in spec["dependencies"] if isinstance(d, str)]
        entries += [p for d in spec["dependencies"] if isinstance(d, dict) for p in d.get("pip", [])]
        have = {ALIASES.get(n, n) for n in (re.match(r"[A-Za-z0-9_.-]+", e).group(0).lower() for e in entries)}
        modules = [path for pattern in patterns for path in package.glob(pattern)]
        assert modules, env
        needed = set().union(*(imported_names(m) for m in modules)) - set(sys.stdlib_module_names) - {"layerwise_nmt"}
        missing = {DISTRIBUTIONS.get(n, n) for n in needed} - have
        assert not missing, f"envs/{env} lacks {sorted(missing)} (imported by {patterns})"


def test_pytorch_builds_are_the_ones_the_comments_promise():
    deps = {
        env: yaml.safe_load((ROOT / "envs" / env).read_text())["dependencies"] for env in ("train.yaml", "report.yaml")
    }
    assert "pytorch=2.13.0=cuda*" in deps["train.yaml"]
    cuda = [d for d in deps["train.yaml"] if isinstance(d, str) and d.startswith("cuda-version")]
    assert cuda and "<" in cuda[0], "train.yaml: the CUDA runtime needs an upper bound the cluster's drivers meet"
    assert "pytorch=2.13.0=cpu*" in deps["report.yaml"]
