"""How a wrong name or a broken file is told in one line: the closest names that exist ("did you mean"), and a YAML
syntax error with its file, line and column. The checks that use them on config files are config_files.py."""

from __future__ import annotations

import difflib
import os

import yaml

from .. import UserError


def did_you_mean(name: str, known, what: str) -> str:
    """ "; did you mean 'x'?" with the closest of `known`, else "; expected one of a, b, …" (at most 12 named)."""
    known = list(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(map(repr, close))}?"
    if not known:
        return f"; the config declares no {what}"
    shown = ", ".join(sorted(known)[:12]) + (", …" if len(known) > 12 else "")
    return f"; expected one of {shown}"


def yaml_error(path: str | os.PathLike, err: yaml.YAMLError) -> UserError:
    """A YAML syntax error as one line: the file, the line and column where the parser stopped, what it expected,
    and where the construct it was reading began."""
    mark = getattr(err, "problem_mark", None)
    if mark is None:
        return UserError(f"{path}: not valid YAML ({' '.join(str(err).split())})")
    problem = getattr(err, "problem", None) or "syntax error"
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    began = (
        f" ({context} at line {start.line + 1}, column {start.column + 1})"
        if context and start is not None and (start.line, start.column) != (mark.line, mark.column)
        else ""
    )
    return UserError(f"{path}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}{began}")
