"""`lwnmt docs`: the blocks of README.md and docs/*.md that the code can write, rewritten from it so that they
cannot drift: the GPU-hour plan (`lwnmt plan`), parameter counts beside the papers' (`lwnmt params`), which
figures of config.yaml use each figure kind, a committed study's table (`lwnmt evidence collect`'s summary.json) and a
committed report table's rows (`table file=docs/study/small/T1.md`). A block sits between

    <!-- generated: KIND [key=value ...] -->
    ...
    <!-- end generated -->

and is always computed from config.yaml (the full grid), whatever else is on the machine. `lwnmt docs --check`
(tests/test_docs.py) names every stale block and changes nothing."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from .. import UserError
from .. import grid
from ..checkout import required
from . import reference

BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(?P<close><!-- end generated -->)", re.S
)


def require_markers(path: str | Path, start: str, end: str, what: str = "generated-part") -> str:
    """The document's text, or a one-line error naming it and the marker lines it lacks."""
    text = Path(path).read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise UserError(f"{path}: no {what} markers; expected a line {start!r} and a line {end!r}")
    return text


def replace_between(path: str | Path, start: str, end: str, body: str, what: str = "generated-part") -> None:
    """The one way a document's generated part is rewritten: the text between the lines `start` and `end` becomes
    `body` (markers kept); a document without both markers is named in a one-line error and left as it is."""
    text = require_markers(path, start, end, what)
    head, rest = text.split(start, 1)
    Path(path).write_text(head + start + "\n" + body + end + rest.split(end, 1)[1], encoding="utf-8")


def documents() -> list[Path]:
    docs = grid.ROOT / "docs"
    return [grid.ROOT / "README.md", *sorted(docs.glob("*.md")), *sorted((docs / "reference").glob("*.md"))]


@contextmanager
def in_checkout():
    """Relative paths of the config (warm-start files, results/) resolve in the checkout, not where docs is run."""
    here = os.getcwd()
    os.chdir(required())
    try:
        yield
    finally:
        os.chdir(here)


def plan_block(config: dict) -> str:
    from ..grid.pricing import plan, render

    return f"```\n{render(plan(config))}\n```\n"  # the default pricing: A100, 33% of peak


def params_block(config: dict, paper: str, tables: str, vocab: str) -> str:
    """One line per experiment of the paper's `tables` (comma-separated), counted at one joint vocabulary size,
    with the rows that run it and the paper's printed count; other readings the model can build in brackets."""
    from ..grid.parameter_table import parameter_rows

    wanted = tables.split(",")
    names = list(
        dict.fromkeys(
            row.spec["experiment"]
            for row in grid.rows(config, ("tables",))
            if row.paper == paper and row.name in wanted and "experiment" in row.spec
        )
    )
    by_experiment: dict[str, list[dict]] = {}
    for r in parameter_rows(config, names, (int(vocab), int(vocab))):
        if r["paper"] == paper and r["table"] in wanted:
            by_experiment.setdefault(r["experiment"], []).append(r)
    lines = ["| rows | experiment | ours | paper |", "|---|---|---:|---:|"]
    for name, records in by_experiment.items():
        first = records[0]
        ours = f"{first['params']:,}" if first["params"] is not None else first["note"]
        ours += "".join(f" ({k}: {v:,})" for k, v in first["other_readings"].items())
        printed = [f"{r['paper_params']:.2f}M" for r in records if r["paper_params"] is not None]
        rows = " / ".join(f"{r['table']} {r['row']}" for r in records)
        lines.append(f"| {rows} | `{name}` | {ours} | {printed[0] if printed else '—'} |")
    return "\n".join(lines) + "\n"


def figure_kinds_block(config: dict) -> str:
    """Each figure kind the code draws, with the figures of config.yaml that use it."""
    from .figures import KINDS

    used: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for paper, figure in grid.tables(config, "figures", targeted=False):
        used[config["papers"][paper]["figures"][figure]["kind"]].append(f"{paper} {figure}")
    return (
        "\n".join(
            f"- `{kind}`: {', '.join(names) if names else 'no figure of config.yaml'}" for kind, names in used.items()
        )
        + "\n"
    )


def evidence_block(config: dict, dir: str) -> str:
    """A committed study's table and what it says of each claim, from its summary.json (`lwnmt evidence collect`)."""
    from .evidence_page import readme_block

    return readme_block(grid.ROOT / dir, dir)


def depth_block(config: dict, studies: str) -> str:
    """The same rows at several depths side by side (`lwnmt evidence depth`), from each study's summary.json:
    studies=3+3:docs/study/cpu,6+6:docs/study/cpu6, shallowest first."""
    from . import depth

    pairs = [(label, folder) for label, folder in (spec.split(":", 1) for spec in studies.split(","))]
    return depth.depth_block(depth.depth_summary(pairs))  # relative: lwnmt docs runs in the checkout


def depth_brief_block(config: dict, studies: str) -> str:
    """The README's short form of the depth block: each method's Δ on both recipes at each depth."""
    from . import depth

    pairs = [(label, folder) for label, folder in (spec.split(":", 1) for spec in studies.split(","))]
    return depth.brief_block(depth.depth_summary(pairs))


def table_block(config: dict, file: str) -> str:
    """A committed report table (a table's .md, as `make study-collect` writes it): its rows and the precision line
    under it, so that a page shows the numbers without copying them by hand."""
    path = grid.ROOT / file
    if not path.is_file():
        raise UserError(f"{file}: no such table (a generated block 'table file=...' names a committed table's .md)")
    lines = path.read_text().splitlines()
    rows = [line for line in lines if line.startswith("|")]
    if not rows:
        raise UserError(f"{file}: no table rows (lines starting with '|') to show")
    notes = [line for line in lines if line.startswith("Our runs' precision")]
    return "\n".join(rows + ([""] + notes if notes else [])) + "\n"


GENERATORS: dict[str, Callable[..., str]] = {
    "plan": plan_block,
    "params": params_block,
    "figure-kinds": figure_kinds_block,
    "evidence": evidence_block,
    "depth": depth_block,
    "depth-brief": depth_brief_block,
    "table": table_block,
    "config-reference": reference.config_block,
}


def render_block(spec: str, config: dict, where: str, generators: dict[str, Callable[..., str]]) -> str:
    kind, *arguments = spec.split()
    if kind not in generators:
        raise UserError(f"{where}: unknown generated block {kind!r}; expected one of {', '.join(generators)}")
    options = dict(a.split("=", 1) for a in arguments)
    return generators[kind](config, **options)


def update(check: bool = False, generators: dict[str, Callable[..., str]] = GENERATORS) -> list[str]:
    """Rewrite every generated block (check=True: only compare); returns the stale ones as "file: kind". The layers
    above add their own generators (the command-line reference comes from the CLI's parser: cli/reference.py)."""
    with in_checkout():
        config = grid.load(grid.ROOT / "config.yaml")
        stale = []
        for path in documents():
            text = path.read_text(encoding="utf-8")

            def fill(match: re.Match) -> str:
                where = f"{path.relative_to(grid.ROOT)}: {match['spec']}"  # noqa: B023  (BLOCK.sub calls it here)
                body = render_block(match["spec"], config, where, generators)
                if body != match["body"]:
                    stale.append(where)
                return match["open"] + body + match["close"]

            new = BLOCK.sub(fill, text)
            if new != text and not check:
                path.write_text(new, encoding="utf-8")
    return stale
