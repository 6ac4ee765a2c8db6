"""The config files a user names, checked before anything is merged or planned: a file that is not YAML (file, line,
column), an overlay that edits an experiment, table or figure no file before it declares, a name in `targets:` that
the config does not have; each one line, with the closest names that exist (names.py)."""

from __future__ import annotations

import os

from .. import UserError
from .load import deep_update, read
from .names import did_you_mean
from .papers import targeted_names


def check_overlay(overlay: dict, base: dict, path: str | os.PathLike) -> None:
    """An overlay's experiments, tables and figures either exist in `base` (the files before it, merged) or are
    declared whole (an experiment with task/model or extends, a table or figure with rows); anything else is a
    misspelt name, which merging would turn into a half-declared new entry and a schema error naming no name."""
    for key in ("experiments", "papers"):
        mapping(overlay.get(key), key, path)
    experiments = base.get("experiments") or {}
    for name, spec in (overlay.get("experiments") or {}).items():
        if name not in experiments and isinstance(spec, dict) and not ({"task", "model", "extends"} & set(spec)):
            raise UserError(
                f"{path}: config key experiments/{name}: no experiment {name!r} to change"
                f"{did_you_mean(name, experiments, 'experiments')} (a new experiment needs task and "
                f"model, or extends)"
            )
    papers = base.get("papers") or {}
    for paper, spec in (overlay.get("papers") or {}).items():
        if not isinstance(spec, dict):
            continue
        if paper not in papers and not spec.get("title"):
            raise UserError(
                f"{path}: config key papers/{paper}: no paper {paper!r} to change"
                f"{did_you_mean(paper, papers, 'papers')} (a new paper needs a title)"
            )
        for kind in ("tables", "figures"):
            declared = (papers.get(paper) or {}).get(kind) or {}
            mapping(spec.get(kind), f"papers/{paper}/{kind}", path)
            for name, table in (spec.get(kind) or {}).items():
                if name not in declared and isinstance(table, dict) and not {"rows", "append_rows"} & set(table):
                    raise UserError(
                        f"{path}: config key papers/{paper}/{kind}/{name}: no {kind[:-1]} "
                        f"{paper}/{name} to change{did_you_mean(name, declared, kind)} (a new "
                        f"{kind[:-1]} needs rows)"
                    )


def mapping(value, key: str, path: str | os.PathLike) -> None:
    """A section that names its entries (experiments:, papers:, tables:) must be a mapping, not a name or a list."""
    if value is not None and not isinstance(value, dict):
        raise UserError(
            f"{path}: config key {key}: a {type(value).__name__}; expected a mapping of names to settings "
            f"({key.rsplit('/', 1)[-1]}: {{name: {{...}}}})"
        )


def check_files(paths, read) -> None:
    """Every config file read on its own (`read`: load.read, whose YAML errors name file, line and column), each
    overlay checked against the files before it."""
    merged: dict = {}
    for index, path in enumerate(paths):
        data = read(path)
        if index:
            check_overlay(data, merged, path)
        deep_update(merged, data)


def check_targets(config: dict) -> None:
    """`targets:` names only tasks, tables and figures the (validated) config has: one line with the closest names,
    before anything is planned or listed."""
    for task in targeted_names(config, "tasks") or []:
        if task not in config["tasks"]:
            raise UserError(
                f"config key targets/tasks: unknown task {task!r}{did_you_mean(task, config['tasks'], 'tasks')}"
            )
    for kind in ("tables", "figures"):
        declared = [
            f"{paper}/{name}" for paper, spec in (config.get("papers") or {}).items() for name in (spec.get(kind) or {})
        ]
        for name in targeted_names(config, kind) or []:
            if name not in declared:
                raise UserError(
                    f"config key targets/{kind}: unknown {kind[:-1]} {name!r}"
                    f"{did_you_mean(name, declared, kind)} (<paper>/<{kind[:-1]}>)"
                )


def command_line_config_files(argv: list[str]) -> list[str]:
    """The files of Snakemake's --configfile/--configfiles (each takes every word up to the next option)."""
    files, taking = [], False
    for word in argv:
        if word.startswith("-"):
            option, _, value = word.partition("=")
            taking = option in ("--configfile", "--configfiles") and not value
            if value and option in ("--configfile", "--configfiles"):
                files.append(value)
        elif taking:
            files.append(word)
    return files


def check_command_line(argv: list[str]) -> None:
    """Snakemake's --configfile files read as `lwnmt --config` reads them, before Snakemake does: a file that is
    not YAML stops the run with one line naming file, line and column on stderr (Snakemake's own message names
    neither). Called from the workflow profile (profiles/default), which Snakemake reads first."""
    import sys

    for path in command_line_config_files(argv):
        if not os.path.isfile(path):
            continue  # Snakemake's own "not present or accessible" names it
        try:
            read(path)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
