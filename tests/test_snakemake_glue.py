"""The rule files bind and call; what they run when Snakemake reads them is snakemake_glue/snakefile.py, tested here
as Python with stand-ins for Snakemake's objects (the dry runs in test_workflow.py run it through Snakemake)."""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT
from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.snakemake_glue import snakefile
from layerwise_nmt.snakemake_glue.job_env import WORKFLOW_PID, WORKFLOW_RUN

RULE_FILES = sorted([*(ROOT / "workflow" / "rules").glob("*.smk"), ROOT / "workflow" / "Snakefile", ROOT / "Snakefile"])
# Snakemake's own syntax: a rule and what it says, and the directives; every other line is Python
DIRECTIVE = re.compile(
    r"(rule\s+\w+|use\s+rule\s.*|checkpoint\s+\w+|localrules|wildcard_constraints|ruleorder|"
    r"configfile|include|report|envvars|workdir|container|containerized|module\s+\w+)\s*:"
)
MAX_PYTHON_LINES = 40


def python_lines(text: str) -> list[str]:
    """The lines of Python outside Snakemake's rules and directives, comments and blank lines left out."""
    lines, directive = [], False
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        if not line[0].isspace():
            directive = bool(DIRECTIVE.match(line))
        if not directive:
            lines.append(line)
    return lines


def test_the_rule_files_hold_little_python():
    counted = {path.relative_to(ROOT).as_posix(): len(python_lines(path.read_text())) for path in RULE_FILES}
    assert sum(counted.values()) <= MAX_PYTHON_LINES, f"move the logic into the package: {counted}"


def test_the_counter_skips_rules_and_directives_only():
    text = (
        "import json\n\nX = 1  # a setting\nif X:\n    print(X)\n\n\nrule a:\n    input:\n        lambda w: 1,\n"
        "\n\nwildcard_constraints:\n    seed=r'\\d+',\n\n\ndef f():\n    return 2\n"
    )
    assert python_lines(text) == [
        "import json",
        "X = 1  # a setting",
        "if X:",
        "    print(X)",
        "def f():",
        "    return 2",
    ]


def test_the_rules_reach_the_grid_through_one_object_and_each_name_is_a_rule_function():
    """No function is injected into the rule files' globals: each is `R.<name>`, a public method of RuleInputs, so
    that grep finds its definition from the rule."""
    public = {name for name in dir(grid.RuleInputs) if not name.startswith("_")}
    text = "\n".join(path.read_text() for path in RULE_FILES)
    assert "globals()" not in text
    called = set(re.findall(r"\bR\.(\w+)", text))
    assert called and called <= public, called - public
    bare = {word for word in re.findall(r"(?<![\w./])(\w+)\(", text)} & public
    assert not bare, f"rule functions called without R.: {bare}"
    with pytest.raises(AttributeError, match="no rule function '_cost'"):
        snakefile.rule_inputs(grid.load(ROOT / "config.yaml"))._cost  # noqa: B018


def test_a_config_error_in_a_rule_function_stops_snakemake_in_one_line(capsys):
    def experiment_of(wildcards, output=None):
        raise UserError(f"unknown experiment {wildcards}")

    wrapped = snakefile.stopping_on_config_errors(experiment_of)
    assert inspect.signature(wrapped) == inspect.signature(experiment_of)  # Snakemake passes what it takes
    with pytest.raises(SystemExit) as stopped:
        wrapped("demo.nope")
    assert stopped.value.code == 1 and capsys.readouterr().err == "error: unknown experiment demo.nope\n"


def test_rule_functions_answer_as_the_grid_does():
    config = grid.load(ROOT / "config.yaml")
    R = snakefile.rule_inputs(config)
    assert R.summary_inputs() == grid.RuleInputs(config).summary_inputs()
    paper, spec = next(iter(config["papers"].items()))
    table = next(iter(spec["tables"]))
    wildcards = SimpleNamespace(paper=paper, table=table)
    rows = grid.RuleInputs(config).table_spec(paper, table).rows
    assert R.table_inputs(wildcards) == sorted(
        {
            path
            for row in rows
            for key in ("scores", "baseline_scores")
            for paths in row.get(key, {}).values()
            for path in paths
        }
    )


def test_prepare_jobs_sets_what_jobs_inherit(monkeypatch):
    stops = []
    monkeypatch.setattr(snakefile, "forward_stops", lambda: stops.append(True))
    environ = {"PYTHONPATH": "/elsewhere", "PATH": "/usr/bin"}
    snakefile.prepare_jobs("/checkout/src", False, environ)
    assert environ == {
        "PYTHONPATH": f"/checkout/src{os.pathsep}/elsewhere",
        "LWNMT_ERRORS_ON_STDOUT": "1",
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin",
    }
    assert stops == []
    snakefile.prepare_jobs("/checkout/src", True, environ)
    assert environ[WORKFLOW_PID] == str(os.getpid()) and environ[WORKFLOW_RUN].startswith(f"{os.getpid()}-")
    assert stops == [True]


def workflow_of(*overlays: Path) -> SimpleNamespace:
    """Snakemake's `workflow` as the glue reads it: the Snakefile's config.yaml, then each --configfile."""
    return SimpleNamespace(
        configfiles=[ROOT / "config.yaml", *overlays], overwrite_configfiles=list(overlays), is_main_process=False
    )


def layered(*paths: Path) -> dict:
    config: dict = {}
    for path in paths:
        config.update(yaml.safe_load(path.read_text()))
    return config


def test_check_config_returns_the_targeted_tasks_and_fills_in_the_schema_defaults():
    demo = ROOT / "config" / "demo.yaml"
    config = layered(ROOT / "config.yaml", demo)
    tasks = snakefile.check_config(config, workflow_of(demo), logger=None, rehearse=None)
    assert tasks == grid.runnable_tasks(config) and tasks


def test_check_config_names_the_file_of_a_misspelt_key(tmp_path, capsys):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("gpus_per_jobs: 2\n")
    config = layered(ROOT / "config.yaml", overlay)
    with pytest.raises(SystemExit):
        snakefile.check_config(config, workflow_of(overlay), logger=None, rehearse=None)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "gpus_per_jobs" in err and len(err.splitlines()) == 1


def test_check_config_hands_a_rehearsal_to_the_rehearsal(tmp_path):
    config = {**layered(ROOT / "config.yaml"), "rehearsal": "standins"}
    asked = []

    def rehearse(config, standins):
        asked.append(standins)
        raise UserError("stopped here")

    with pytest.raises(SystemExit):
        snakefile.check_config(config, workflow_of(), logger=None, rehearse=rehearse)
    assert asked == ["standins"]


def test_the_jobs_a_stop_reaches_are_found_whatever_their_names(tmp_path):
    """A stop sent to Snakemake alone reaches its jobs through /proc, from a signal handler, where an exception
    would cancel the stop: a process whose name holds spaces, parentheses or bytes that are not UTF-8 (a name is
    cut at 15 bytes, possibly within a character), or that ended while being read, must not stop the search."""
    from layerwise_nmt.snakemake_glue.job_env import descendants, parent_of

    def process(pid: int, name: bytes, parent: int) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_bytes(b"%d (%s) S %d 1 1 0 -1 4194560" % (pid, name, parent))

    process(100, b"snakemake", 1)
    process(101, b"bash", 100)
    process(102, b"a (b) c\xc3", 101)  # the training, under a name cut within "ü"
    process(103, b"python3", 102)
    (tmp_path / "104").mkdir()  # it ended between the listing and the read
    (tmp_path / "105").mkdir()
    (tmp_path / "105" / "stat").write_bytes(b"")  # or mid-read
    process(200, b"other", 1)
    (tmp_path / "self").mkdir()
    assert sorted(descendants(100, tmp_path)) == [101, 102, 103]
    assert parent_of(tmp_path / "102" / "stat") == 101 and parent_of(tmp_path / "104" / "stat") is None
