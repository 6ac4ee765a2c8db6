"""The report commands: table, summary, figure, readme, docs and evidence."""

from __future__ import annotations

import logging
from pathlib import Path

from .. import UserError
from .common import add_config_files, command, load_config

log = logging.getLogger("layerwise_nmt")


def add_commands(sub) -> None:
    p = command(sub, "table", "regenerate one paper table (md, csv, tex, html) from score.json files", cmd_table)
    p.add_argument(
        "--spec", required=True, help="the table job's spec, JSON (job_specs.TableSpec, built by the table rule)"
    )
    p.add_argument("--out-prefix", required=True)

    p = command(sub, "summary", "every row of every table in one md + csv (paper, ours, delta, status)", cmd_summary)
    p.add_argument("tables", nargs="+", help="the tables' CSV files (results/tables/<paper>/<table>.csv)")
    p.add_argument("--out-prefix", required=True)

    p = command(sub, "figure", "draw one paper figure (png + pdf) from our runs", cmd_figure)
    p.add_argument(
        "--spec", required=True, help="the figure job's spec, JSON (job_specs.FigureSpec, built by the figure rule)"
    )
    p.add_argument("--out-prefix", required=True)

    p = command(sub, "readme", "put a run's table and figures into the README's results section", cmd_readme)
    p.add_argument("--readme", default="README.md")
    p.add_argument("--table", required=True, help="a results/tables/<paper>/<table>.md")
    p.add_argument("--figure", nargs="*", default=[], help="figures to show (copied to docs/demo/)")
    p.add_argument("--commit", help="the commit the run was made from (default: this checkout's HEAD)")
    p.add_argument("--machine", help="the machine the run was made on (default: this one's cores and CPU)")

    p = command(
        sub,
        "docs",
        "rewrite the generated blocks of README.md and docs/*.md (plan, parameter counts, "
        "figure kinds) from config.yaml",
        cmd_docs,
    )
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 naming every stale block")

    p = command(
        sub,
        "evidence",
        "a table's runs as small text in the repository (report/evidence.py): `targets` "
        "(what Snakemake makes for one seed), `copy` (a seed's finished runs, or every seed's, into --out), `collect` "
        "(--out's README.md, summary.json and curves.png from the files there)",
        cmd_evidence,
    )
    p.add_argument("action", choices=["targets", "copy", "collect", "depth"])
    add_config_files(p)
    p.add_argument("--table", help="targets, copy, collect: paper/table, e.g. study_cpu/T1")
    p.add_argument(
        "--study",
        action="append",
        metavar="DEPTH=DIR",
        default=[],
        help="depth: a collected study and its depth, shallowest first, e.g. --study 3+3=docs/study/cpu "
        "--study 6+6=docs/study/cpu6",
    )
    p.add_argument("--figure", help="depth: where to draw Δ BLEU against depth (PNG)")
    p.add_argument("--seed", type=int, help="targets: the seed; copy: the seed (default: each of the table's in turn)")
    p.add_argument(
        "--out",
        help="copy, collect: the evidence folder, e.g. docs/study/cpu; targets: refuse a seed "
        "whose runs there trained on another kind of machine (CPU, GPU)",
    )
    p.add_argument(
        "--results", default=".", help="copy, targets --trained: the folder Snakemake runs in (default: here)"
    )
    p.add_argument(
        "--trained",
        action="store_true",
        help="targets: only the runs whose model is trained already (for Snakemake's --prioritize)",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="copy: the seed's finished runs only (default: refuse while one is unfinished)",
    )
    p.add_argument("--ref", help="collect: the tokenized test references, for the paired bootstrap")
    p.add_argument(
        "--run-command",
        default="lwnmt evidence copy --seed <k>",
        help="collect: the command the page names for running a missing seed",
    )
    p.add_argument(
        "--collect-command",
        default="lwnmt evidence collect",
        help="collect: the command the page names for rewriting it",
    )


def cmd_table(a) -> None:
    from ..job_specs import TableSpec
    from ..report.tables import write

    write(TableSpec.from_json(a.spec), a.out_prefix)
    print(Path(f"{a.out_prefix}.md").read_text(encoding="utf-8"))


def cmd_summary(a) -> None:
    from ..report.tables import summary

    summary(a.tables, a.out_prefix)


def cmd_figure(a) -> None:
    from ..job_specs import FigureSpec
    from ..report.figures import write

    missing = write(FigureSpec.from_json(a.spec), a.out_prefix)
    print(f"wrote {a.out_prefix}.png and .pdf" + (f"; not drawn: {'; '.join(missing)}" if missing else ""))


def cmd_readme(a) -> None:
    import subprocess

    from ..report.readme import update

    commit = (
        a.commit
        or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        or None
    )
    update(a.readme, a.table, a.figure, commit, machine=a.machine or this_machine())


def this_machine() -> str:
    """'2-core AMD EPYC (AVX512_BF16)': what a demo table's numbers depend on (the CPU type and its bf16 support)."""
    import os

    from ..report.evidence import cpu_cell, machine

    return f"{os.cpu_count()}-core {cpu_cell(machine())}"


def doc_generators(parser) -> dict:
    """Every generated block's writer: the report's, and the command-line reference from lwnmt's `parser`."""
    from ..report.doc_blocks import GENERATORS
    from .reference import cli_block

    return {**GENERATORS, "cli-reference": lambda config: cli_block(config, parser)}


def cmd_docs(a) -> None:
    from ..report.doc_blocks import update

    stale = update(check=a.check, generators=doc_generators(a.parser))
    if a.check and stale:
        raise UserError(f"stale generated blocks: {'; '.join(stale)}; run `lwnmt docs` (or `make docs`)")
    print(
        f"{len(stale)} generated block(s) {'stale' if a.check else 'rewritten'}"
        + (f": {'; '.join(stale)}" if stale else "")
    )


def cmd_evidence(a) -> None:
    from ..report import evidence, evidence_page

    if a.action == "depth":
        from ..report import depth

        studies = [tuple(spec.split("=", 1)) for spec in a.study]
        if not studies or any(len(spec) != 2 for spec in studies) or not a.figure:
            raise UserError(
                "evidence depth: expected --study DEPTH=DIR for each study (e.g. --study "
                "3+3=docs/study/cpu) and --figure FILE.png"
            )
        summary = depth.depth_summary(studies)
        print(depth.depth_block(summary), end="")
        print(f"wrote {depth.depth_figure(summary, a.figure)}")
        return
    if not a.table:
        raise UserError(f"evidence {a.action}: --table is required (paper/table, e.g. study_cpu/T1)")
    config = load_config(a)
    if a.action == "targets" and a.seed is None:
        raise UserError(f"evidence {a.action}: --seed is required")
    if a.action in ("copy", "collect") and not a.out:
        raise UserError(f"evidence {a.action}: --out is required")
    if a.action == "targets":
        if note := evidence.heldout_note(config, a.table):
            log.warning("%s", note)
        print("\n".join(evidence.targets(config, a.table, a.seed, a.out, a.results if a.trained else None)))
    elif a.action == "copy":
        for seed in [a.seed] if a.seed is not None else evidence.seeds(config, a.table):
            for folder in evidence.copy(config, a.table, seed, a.out, a.results, a.partial):
                print(f"copied {folder}")
    else:
        summary = evidence.summarise(config, a.table, a.out, a.ref)
        for line in summary["incomplete"]:
            log.warning("half-written run, not tabulated: %s", line)
        print(f"wrote {evidence_page.write(summary, a.out, a.collect_command, a.run_command)}")
