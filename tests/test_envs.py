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
