"""The conda envs users get (envs/*.yaml) pin the same versions as pyproject.toml, which pip users get."""

import re
import tomllib

import yaml

from conftest import ROOT

ALIASES = {"pytorch": "torch"}


def pins():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {name.lower(): version for name, version in (d.split("==") for d in deps)}


def test_env_pins_match_pyproject():
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
    "preprocess.yaml": ["data/[!b]*.py", "data/bpe.py", "data/binarize.py", "config.py", "settings.py",
                        "__init__.py"],  # data/batching.py is training's
    "train.yaml": ["train.py", "average.py", "decode.py", "params.py", "models/*.py", "data/batching.py",
                   "data/binarize.py", "data/vocab.py", "data/io.py", "settings.py"],
    "report.yaml": ["score.py", "report/*.py", "decode.py", "models/*.py", "data/vocab.py", "data/io.py",
                    "config.py", "settings.py"],
}
DISTRIBUTIONS = {"yaml": "pyyaml", "subword_nmt": "subword-nmt", "torch": "torch"}


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
    deps = {env: yaml.safe_load((ROOT / "envs" / env).read_text())["dependencies"] for env in ("train.yaml",
                                                                                               "report.yaml")}
    assert "pytorch=2.13.0=cuda*" in deps["train.yaml"]
    cuda = [d for d in deps["train.yaml"] if isinstance(d, str) and d.startswith("cuda-version")]
    assert cuda and "<" in cuda[0], "train.yaml: the CUDA runtime needs an upper bound the cluster's drivers meet"
    assert "pytorch=2.13.0=cpu*" in deps["report.yaml"]
