"""The conda envs users get (envs/*.yaml) pin the versions of constraints.txt, which make demo / make test / CI
install from; pyproject.toml's ranges admit every one of them."""

import ast
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
        "settings.py",
        "__init__.py",
    ],  # data/batching.py is training's
    "train.yaml": [
        "training/loop.py",
        "training/progress.py",
        "training/reporting.py",
        "training/average.py",
        "inference/decode.py",
        "inference/translation.py",
        "data/tokenize.py",  # translating raw text (held-out sets): the Moses or jieba tokenizer
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
        "settings.py",
    ],
}
DISTRIBUTIONS = {"yaml": "pyyaml", "subword_nmt": "subword-nmt", "torch": "torch", "tensorboardX": "tensorboardx"}


def run_on_import(node):
    """The nodes of the statements a module runs as it is imported: all but its functions' bodies and what only a
    type checker reads (`if TYPE_CHECKING:`)."""
    yield node
    for child in ast.iter_child_nodes(node):
        checking = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
        if not checking and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from run_on_import(child)


def imported_names(path, module_level: bool = False):
    """The top-level names a file imports: anywhere in it, or (module_level) only where it runs on import."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in run_on_import(tree) if module_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


PACKAGE = ROOT / "src/layerwise_nmt"


def module_level_closure(start: str) -> set:
    """The package's files a module loads as it is imported, followed through the package's own modules (relative
    imports included): what `python -m layerwise_nmt <any command>` loads before the command runs."""
    seen, todo = set(), [PACKAGE / start]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        here = path.parent.relative_to(PACKAGE.parent).parts
        for node in run_on_import(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else ()
                parts = (*base, *(node.module or "").split(".")) if node.level else tuple(node.module.split("."))
                if parts[0] != "layerwise_nmt":
                    continue
                targets = [parts] + [(*parts, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [tuple(a.name.split(".")) for a in node.names if a.name.startswith("layerwise_nmt")]
            else:
                continue
            for target in (tuple(t for t in target if t) for target in targets):
                todo += [
                    PACKAGE.parent.joinpath(*target).with_suffix(".py"),
                    PACKAGE.parent.joinpath(*target, "__init__.py"),
                ]
                todo += [PACKAGE.parent.joinpath(*target[:i], "__init__.py") for i in range(1, len(target))]
    return seen


def test_every_import_of_a_rule_is_in_its_conda_env():
    """Each env holds what its rules' commands import: the modules every `python -m layerwise_nmt` command loads
    (the CLI's own imports, followed), and the modules its rules' commands run, lazy imports included."""
    import sys

    every_command = module_level_closure("__main__.py")
    assert PACKAGE / "data/bpe.py" in every_command  # the CLI imports it for its flags' defaults
    for env, patterns in ENV_MODULES.items():
        spec = yaml.safe_load((ROOT / "envs" / env).read_text())
        entries = [d for d in spec["dependencies"] if isinstance(d, str)]
        entries += [p for d in spec["dependencies"] if isinstance(d, dict) for p in d.get("pip", [])]
        have = {ALIASES.get(n, n) for n in (re.match(r"[A-Za-z0-9_.-]+", e).group(0).lower() for e in entries)}
        for pattern in patterns:
            assert list(PACKAGE.glob(pattern)), f"{env}: {pattern} matches no file of the package"
        modules = {path for pattern in patterns for path in PACKAGE.glob(pattern)}
        needed = set().union(*(imported_names(m) for m in modules), *(imported_names(m, True) for m in every_command))
        needed -= set(sys.stdlib_module_names) | {"layerwise_nmt"}
        missing = {DISTRIBUTIONS.get(n, n) for n in needed} - have
        assert not missing, f"envs/{env} lacks {sorted(missing)} (imported by {patterns} or by every command)"


def test_pytorch_builds_are_the_ones_the_comments_promise():
    deps = {
        env: yaml.safe_load((ROOT / "envs" / env).read_text())["dependencies"] for env in ("train.yaml", "report.yaml")
    }
    assert "pytorch=2.13.0=cuda*" in deps["train.yaml"]
    cuda = [d for d in deps["train.yaml"] if isinstance(d, str) and d.startswith("cuda-version")]
    assert cuda and "<" in cuda[0], "train.yaml: the CUDA runtime needs an upper bound the cluster's drivers meet"
    assert "pytorch=2.13.0=cpu*" in deps["report.yaml"]


def test_conda_jobs_find_the_package_though_snakemake_removes_pythonpath(tmp_path):
    """`--use-conda` deletes PYTHONPATH from a conda job's environment, and no env installs the package: every
    job's shell prefix puts the checkout's src/ back, and leaves a PYTHONPATH that has it as it was."""
    import os
    import subprocess

    from layerwise_nmt.snakemake_glue.snakefile import job_shell_prefix

    src = tmp_path / "check out {1}" / "src"  # a space, as a user's home may have; braces, as Snakemake formats
    from snakemake.utils import format as snakemake_format

    prefix = snakemake_format(job_shell_prefix(src, "/bin/bash"))  # as shell.prefix formats it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for before, after in [(None, f"{src}"), (f"{src}:/x", f"{src}:/x"), ("/x", f"{src}:/x"), ("", f"{src}")]:
        given = env | ({} if before is None else {"PYTHONPATH": before})
        run = subprocess.run(
            ["bash", "-c", prefix + 'echo "$PYTHONPATH"; false | true'], env=given, capture_output=True
        )
        assert (run.returncode, run.stdout.decode().strip()) == (1, after), (before, run)  # pipefail kept
    assert "pipefail" not in job_shell_prefix(src, "/bin/sh")
    common = (ROOT / "workflow/rules/common.smk").read_text()
    assert "shell.prefix(snakefile.job_shell_prefix(SOURCES, shell.get_executable()))" in common
