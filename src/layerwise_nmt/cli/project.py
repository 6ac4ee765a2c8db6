"""The project commands, read from the config: params, plan, status and rehearse."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import UserError
from ..grid.pricing import DEFAULT_GPU, DEFAULT_MFU, GPUS
from . import common
from .common import add_config_files, command, integer

# what each rehearsal job runs in the warm process: `python -m layerwise_nmt`'s command line (__main__.py); named
# here, as the rehearsal is below the CLI and imports nothing of it
JOB_ENTRY = "layerwise_nmt.cli:run"


def add_commands(sub) -> None:
    p = command(sub, "params", "exact parameter count of each experiment's model beside the paper's", cmd_params)
    p.add_argument("experiments", nargs="*", help="default: every experiment in the config")
    add_config_files(p)
    p.add_argument("--vocab", type=integer(1), help="joint vocabulary size (no data needed)")
    p.add_argument("--src-vocab", type=integer(1))
    p.add_argument("--tgt-vocab", type=integer(1))
    p.add_argument("--format", choices=["table", "csv"], default="table")

    p = command(
        sub,
        "show",
        "an experiment exactly as its jobs receive it (model, arch, train, decode, score, average, warm start), "
        "or with --protocol a study row's differences from the paper row it scales down",
        cmd_show,
    )
    p.add_argument("experiment")
    add_config_files(p)
    p.add_argument("--seed", type=integer(0), help="the run's seed (default: the experiment's first)")
    p.add_argument("--protocol", action="store_true", help="list the differences from its paper's row, with reasons")

    p = command(sub, "plan", "GPU-hours each table needs, estimated before running anything", cmd_plan)
    add_config_files(p)
    p.add_argument("--gpu", default=DEFAULT_GPU, help=f"the GPU to price on: {', '.join(GPUS)} (default {DEFAULT_GPU})")
    p.add_argument(
        "--mfu",
        type=float,
        default=DEFAULT_MFU,
        help=f"assumed model FLOP utilisation: sustained / dense peak ({DEFAULT_MFU})",
    )
    p.add_argument(
        "--tflops",
        type=float,
        help="instead of --mfu: sustained mixed-precision TFLOP/s per GPU (tf32 "
        "and fp32 rows scaled by the GPU's peak ratios)",
    )
    p.add_argument("--format", choices=["table", "csv"], default="table")

    p = command(
        sub,
        "rehearse",
        "run every row of config.yaml at toy size on stand-in data, through Snakemake, and "
        "summarise what ran and what failed",
        cmd_rehearse,
    )
    p.add_argument("--dir", default="rehearsal", help="working directory (results, stand-ins, summary)")
    p.add_argument("--mirror", help="the data mirror (default: $LWNMT_DATA_MIRROR)")
    p.add_argument("--cores", type=integer(1), default=os.cpu_count() or 1)
    p.add_argument("snakemake_args", nargs="*", help="passed on to snakemake (after --)")

    p = command(
        sub,
        "status",
        "which tasks, experiments and table rows the config's targets need can run, and why not",
        cmd_status,
    )
    add_config_files(p)
    p.add_argument(
        "--all",
        action="store_true",
        help="every task, experiment and table row of the config, not only what its `targets:` need",
    )


def cmd_show(a) -> None:
    import json

    from ..grid import protocol
    from ..grid.names import did_you_mean

    config = common.load_config(a)
    name = a.experiment
    if name not in config["experiments"]:
        hint = did_you_mean(name, config["experiments"], "experiments")
        raise UserError(f"experiment {name!r}: not in the config{hint}")
    if a.protocol:
        print("\n".join(protocol.listing(config, [name])))
        return
    print(json.dumps(protocol.run_spec(config, name, a.seed), indent=1))


def cmd_params(a) -> None:
    from ..grid.parameter_table import parameter_rows

    config = common.load_config(a)
    sides = (a.src_vocab or a.vocab, a.tgt_vocab or a.vocab)
    if any(sides) and not all(sides):
        raise UserError("--src-vocab and --tgt-vocab: expected both, or --vocab for the side not given")
    rows = parameter_rows(config, a.experiments or list(config.get("experiments", {})), sides if all(sides) else None)
    if a.format == "csv":
        import csv

        writer = csv.DictWriter(
            sys.stdout,
            fieldnames=["experiment", "paper", "table", "row", "params", "paper_params", "other_readings"],
            extrasaction="ignore",
        )
        writer.writeheader()
        writer.writerows(
            {**r, "other_readings": ";".join(f"{k}:{v}" for k, v in r["other_readings"].items())} for r in rows
        )
        return
    print(f"{'experiment':<34} {'model':<12} {'vocab (src/tgt)':<16} {'params':>12} {'paper':>9}  row")
    for r in rows:
        paper = f"{r['paper_params']:.2f}M" if r["paper_params"] is not None else "—"
        count = f"{r['params']:,}" if r["params"] is not None else r["note"]
        readings = "".join(f"  [{k}: {v:,}]" for k, v in r["other_readings"].items())
        print(
            f"{r['experiment']:<34} {r['model']:<12} {r['vocab']:<16} {count:>12} {paper:>9}  "
            f"{r['paper']} {r['table']} {r['row']}{readings}".rstrip()
        )


def cmd_plan(a) -> None:
    from ..grid.budget_checks import render_budgets
    from ..grid.pricing import GPUS, Pricing, plan, render, rows

    if a.gpu not in GPUS:
        raise UserError(f"--gpu {a.gpu}: unknown GPU; known: {', '.join(GPUS)}")
    if not 0 < a.mfu <= 1:
        raise UserError(f"--mfu {a.mfu}: expected a fraction in (0, 1]")
    if a.tflops is not None and not a.tflops > 0:
        raise UserError(f"--tflops {a.tflops}: expected a sustained TFLOP/s per GPU above 0")
    pricing = Pricing(a.gpu, a.mfu, a.tflops)
    config = common.load_config(a)
    records = plan(config)
    if a.format == "csv":
        import csv

        table = rows(records, pricing, config)
        writer = csv.DictWriter(sys.stdout, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
        return
    print(render(records, pricing))
    print()
    print(render_budgets(config))


def cmd_rehearse(a) -> None:
    from ..rehearsal.run import rehearse

    mirror = a.mirror or os.environ.get("LWNMT_DATA_MIRROR")
    if not mirror or not Path(mirror).is_dir():
        raise UserError(
            f"--mirror {mirror!r} is not a directory; the rehearsal builds its stand-ins from the data "
            f"mirror (--mirror DIR or $LWNMT_DATA_MIRROR; docs/data.md describes its layout)"
        )
    sys.exit(rehearse(Path(a.dir), Path(mirror), a.cores, a.snakemake_args, JOB_ENTRY))


def cmd_status(a) -> None:
    from .. import grid
    from ..grid.status import summary, targeted, targeted_statuses

    config = common.load_config(a)
    rows = grid.all_statuses(config) if a.all else targeted_statuses(config)
    columns = terminal_columns()
    print(
        wrap(
            "every task, experiment and table row of the config"
            if a.all
            else "what the config's targets need (--all: every task, experiment and table row)",
            columns,
            indent=2,
        )
    )
    for kind in ("task", "experiment", "row"):
        selected = [s for s in rows if s.kind == kind]
        # a name wider than a third of the line puts its reason below it, not off the screen
        width = min(max((len(s.name) for s in selected), default=0), columns // 3 if columns else 10**6)
        print()
        print(wrap(f"{kind}s: {summary(selected)}", columns, indent=2))
        for s in selected:
            print(status_line(s, width, columns))
    tasks = list(config["tasks"]) if a.all else targeted(config)[0]
    print_budgets_and_unpinned(config, columns, datasets={config["tasks"][t]["dataset"] for t in tasks})


def terminal_columns() -> int | None:
    """The terminal's width ($COLUMNS, else the terminal's), never under 40; None when the output goes to a pipe or
    file, whose lines stay whole for grep."""
    import shutil

    if not sys.stdout.isatty():
        return None
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def wrap(text: str, columns: int | None, indent: int) -> str:
    """`text` folded to `columns`, its continuation lines indented; words (paths, URLs) are never broken."""
    import textwrap

    if columns is None:
        return text
    return textwrap.fill(text, columns, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False)


def status_line(s, width: int, columns: int | None) -> str:
    """ "  manual   name  reason", the reason folded under itself (after a name wider than the column: below it).
    An experiment or row waiting for a manual download points to its task's line, which names the files."""
    head = f"  {s.state:<8} {s.name:<{width}}"
    reason = "" if s.state == "ok" else s.reason
    if s.waits_for:
        reason = f"after the manual download of task {s.waits_for} (above)"
    if not reason:
        return wrap(head.rstrip(), columns, 13)
    if len(s.name) <= width:
        return wrap(f"{head}  {reason}", columns, len(head) + 2)
    return wrap(head.rstrip(), columns, 13) + "\n" + wrap(" " * 13 + reason, columns, 13)


def print_budgets_and_unpinned(config: dict, columns: int | None = None, datasets: set[str] | None = None) -> None:
    """`lwnmt status`'s last two sections: flagged training budgets, and downloads no published checksum pins (of
    `datasets` only, where given)."""
    from ..grid import unpinned_downloads
    from ..grid.budget_checks import budget_warnings

    flagged = budget_warnings(config)
    print()
    print(
        wrap(
            f"budgets: {len(flagged)} experiments whose averaging, early stopping, warm-up or restart cannot work "
            f"as configured (estimated from each task's `estimate`; `lwnmt plan` lists every budget)",
            columns,
            2,
        )
    )
    for line in flagged:
        print(wrap(f"  flagged {line}", columns, 10))
    unpinned = [u for u in unpinned_downloads(config) if datasets is None or set(u[0]) & datasets]
    print()
    print(
        wrap(
            f"unpinned: {len(unpinned)} downloaded files no published checksum pins (checked by Content-Length "
            f"and against the size and sha256 of their first copy, recorded beside it in <file>.sha256)",
            columns,
            2,
        )
    )
    for needed_by, name, why in unpinned:
        print(wrap(f"  unpinned {name} ({', '.join(needed_by)}): {why}", columns, 11))
