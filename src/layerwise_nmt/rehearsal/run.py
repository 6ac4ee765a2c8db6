"""`lwnmt rehearse`: build the stand-ins, run the whole rehearsal through Snakemake, write the summary.

The summary (`<dir>/summary.md`, `summary.json`) puts the jobs executed per rule beside the full config's own dry
run (with the licensed NIST data supplied, so that every row counts), names every failed job with the table rows it
belongs to, and checks that each rehearsal run ended where its real run would (whole epochs or mid-epoch).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from .. import UserError
from .. import grid
from ..checkout import ROOT, required
from . import standins, warm

# The stages that make a table row; their job counts must equal the full config's. Data jobs differ by design:
# the stand-ins come from a mirror (no fetch), and NIST's extra sets are prepared from the stand-in directory.
ROW_RULES = (
    "train",
    "average",
    "translate_lenpen",
    "score_lenpen",
    "pick_lenpen",
    "translate",
    "score",
    "inspect",
    "table",
    "figure",
)
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
# The run itself: Snakemake with its re-evaluation timers coalesced (scheduler.py), many short jobs on few cores.
RUN = [sys.executable, "-m", "layerwise_nmt.rehearsal.scheduler", "-s", str(ROOT / "Snakefile")]


def job_counts(output: str) -> Counter:
    """Rule → jobs from Snakemake's "Job stats" table (the first one printed)."""
    counts: Counter = Counter()
    table = output.split("Job stats:", 1)[-1].split("\n\n", 1)[0] if "Job stats:" in output else output
    for line in table.splitlines():
        match = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if match and match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


def dry_run(workdir: Path, *args: str, env: dict) -> Counter:
    workdir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        SNAKEMAKE + ["-d", str(workdir), "-n", "--cores", "1", "--quiet", "rules", *args],
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        raise UserError(f"snakemake -n {' '.join(args)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return job_counts(result.stdout)


def parse_log(text: str) -> tuple[Counter, list[dict]]:
    """(finished jobs per rule, failed jobs with their rule, outputs and log) from a Snakemake log."""
    finished = Counter(re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", text))
    failures: list[dict] = []
    for block in re.split(r"\n(?=Error in rule )", text)[1:]:
        rule = block[len("Error in rule ") :].split(":", 1)[0]
        output = re.search(r"\n\s+output: (.*)", block)
        log = re.search(r"\n\s+log: (\S+)", block)
        failure = {
            "rule": rule,
            "output": output.group(1).strip() if output else "",
            "log": log.group(1) if log else "",
        }
        same = next((f for f in failures if f["output"] == failure["output"]), None)
        if same:  # Snakemake's retries: one failure, several attempts
            same["attempts"] += 1
        else:
            failures.append({**failure, "attempts": 1})
    return finished, failures


def owner(path: str, config: dict) -> tuple[str, list[str]]:
    """The experiment (or task, for data jobs) a job output belongs to, and the table rows that need it."""
    rows = grid.rows_by_experiment(config)
    match = re.match(r"results/([^/]+)/([^/]+)/seed\d+/", path)
    if match and match.group(2) in config.get("experiments", {}):
        return match.group(2), rows.get(match.group(2), [])
    match = re.match(r"results/(?:tables|figures)/([^/]+)/([^/.]+)", path)
    if match:
        return f"{match.group(1)} {match.group(2)}", [f"{match.group(1)} {match.group(2)} (whole)"]
    match = re.match(r"results/([^/]+)/data/", path)
    if match:
        task = match.group(1)
        names = [n for n, e in config.get("experiments", {}).items() if e["task"] == task]
        return f"task {task}", sorted({r for n in names for r in rows.get(n, [])})
    return path, []


def fidelity(directory: Path, config: dict) -> list[dict]:
    """Per experiment: how the real run is estimated to end (plan.budget) and how the rehearsal run did end."""
    out = []
    for name, note in config["rehearsal"]["experiments"].items():
        real = note.get("real")
        e = grid.experiment(config, name)
        metrics = directory / grid.save_dir(grid.experiment_dir(config, name, e["seeds"][0])) / "metrics.csv"
        if real is None or not metrics.is_file():
            out.append({"experiment": name, "real": real, "rehearsal": None, "agree": None})
            continue
        with open(metrics, newline="") as f:
            history = list(csv.DictReader(f))
        last = history[-1] if history else {}
        mid = last.get("partial") == "True"
        whole = int(last.get("epoch", 0)) - (1 if mid else 0)
        seen = {"epochs_completed": whole, "ends_mid_epoch": mid, "updates": int(last.get("update", 0))}
        agree = mid == real["ends_mid_epoch"] and (whole == 0) == (real["epochs"] < 1)
        out.append({"experiment": name, "real": real, "rehearsal": seen, "agree": agree})
    return out


def rehearse(directory: Path, mirror: Path, cores: int, extra: list[str], entry: str) -> int:
    """The rehearsal in `directory`; its jobs run `entry` ("module:function": the CLI's run) in a warm process."""
    started = time.time()
    required()  # the workflow it runs is the checkout's
    directory = directory.resolve()
    config = grid.load(ROOT / "config.yaml")
    print(f"building stand-ins in {directory / 'standins'} from {mirror}", flush=True)
    manifest = standins.build(config, mirror, directory / "standins")
    # the toy models' precision probes are kept with the rehearsal, not in the user's cache
    env = dict(os.environ, LWNMT_DATA_MIRROR=str(mirror), LWNMT_CACHE_DIR=str(directory / "cache"))
    rehearsal_args = ["--config", f"rehearsal={directory / 'standins'}"]
    server = warm.start(directory, env, entry)  # its imports overlap the dry runs
    try:
        full, full_as_is, planned = plan(directory, manifest, rehearsal_args, env)
        log_path = directory / "snakemake.log"
        print(f"running the rehearsal ({sum(planned.values())} jobs); log: {log_path}", flush=True)
        # the user's targets first: after an option that takes several values (--config, --set-threads) argparse
        # would read them as its values
        command = RUN + [
            *extra,
            "-d",
            str(directory),
            "--cores",
            str(cores),
            "--keep-going",
            "--scheduler",
            "greedy",
            "--set-threads",
            "train=1",
            "translate=1",
            "translate_lenpen=1",
            "tokenize=1",
            "apply_bpe=1",
            *rehearsal_args,
        ]
        returncode = run_logged(command, log_path, warm.wait_ready(server).job_env(env))
    finally:
        warm_account = server.stop()
        print(warm_account, flush=True)
    finished, failures = parse_log(log_path.read_text())
    left = dry_run(directory, *rehearsal_args, env=env)

    rehearsal_config = grid.load(ROOT / "config.yaml")
    from . import apply

    apply(rehearsal_config, directory / "standins")
    for failure in failures:
        failure["owner"], failure["rows"] = owner(failure["output"], rehearsal_config)
    checks = fidelity(directory, rehearsal_config)
    mismatched = [r for r in ROW_RULES if finished[r] != full[r]]
    summary = {
        "wall_seconds": round(time.time() - started),
        "snakemake_returncode": returncode,
        "command": " ".join(command),
        "fork_server": warm_account,
        "jobs": {
            rule: {
                "full_config": full[rule],
                "full_config_as_is": full_as_is[rule],
                "rehearsal_planned": planned[rule],
                "executed_ok": finished[rule],
                "left_undone": left[rule],
            }
            for rule in sorted(set(full) | set(planned) | set(finished), key=_rule_order)
        },
        "failures": failures,
        "row_rules_equal": not mismatched,
        "budget_fidelity": checks,
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    (directory / "summary.md").write_text(render(summary), encoding="utf-8")
    print(render(summary))
    return 0 if returncode == 0 and not failures and not mismatched and not sum(left.values()) else 1


def plan(directory: Path, manifest: standins.Manifest, rehearsal_args: list[str], env: dict) -> tuple[Counter, ...]:
    """Jobs per rule of the full config (NIST's LDC directory supplied, as a user with every dataset runs it: here
    the stand-in's), of the full config as is, and of the rehearsal."""
    supplied = directory / "full-config-nist-supplied.yaml"
    supplied.write_text(
        yaml.safe_dump({"datasets": {name: {"user_path": path} for name, path in manifest.user_paths.items()}})
    )
    full = dry_run(directory / "dry-run-full", "--configfile", str(ROOT / "config.yaml"), str(supplied), env=env)
    full_as_is = dry_run(directory / "dry-run-full", env=env)
    return full, full_as_is, dry_run(directory, *rehearsal_args, env=env)


def run_logged(command: list[str], log_path: Path, env: dict) -> int:
    """Snakemake's output to the log, every 50th step and each error also to the console; its exit code."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in process.stdout or ():
            log.write(line)
            step = re.match(r"(\d+) of (\d+) steps", line)
            if (step and (int(step.group(1)) % 50 == 0 or step.group(1) == step.group(2))) or line.startswith(
                "Error in rule"
            ):
                print(line.rstrip(), flush=True)
        return process.wait()


def _rule_order(rule: str) -> int:
    order = [
        "fetch",
        "extract",
        "tokenize",
        "normalize",
        "assemble",
        "assemble_eval",
        "references",
        "learn_bpe",
        "apply_bpe",
        "vocab_joint",
        "vocab_separate",
        "binarize",
        "check_reference",
        *ROW_RULES,
        "all",
    ]
    return order.index(rule) if rule in order else len(order)


def render(summary: dict) -> str:
    from .overlay import NOTICE

    minutes = summary["wall_seconds"] / 60
    lines = [
        f"# Rehearsal summary\n\n{NOTICE} It proves that every row runs end to end through the real rules, "
        f"not what it scores.\n",
        f"Wall time {minutes:.1f} min; Snakemake exit code {summary['snakemake_returncode']}; "
        f"{summary.get('fork_server', 'fork server: not recorded')} (a declined job started its own Python).\n",
        "## Jobs per rule\n",
        "Full config: `snakemake -n` on config.yaml with the NIST directory supplied (as is, NIST's rows wait "
        "for the LDC data: second column). The row stages (train … figure) must match the rehearsal's.\n",
        "| rule | full config | full config as is | rehearsal planned | executed ok | left undone |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for rule, n in summary["jobs"].items():
        mark = " ✗" if rule in ROW_RULES and n["executed_ok"] != n["full_config"] else ""
        lines.append(
            f"| {rule}{mark} | {n['full_config']} | {n['full_config_as_is']} | {n['rehearsal_planned']} "
            f"| {n['executed_ok']} | {n['left_undone']} |"
        )
    lines += ["", f"## Failures ({len(summary['failures'])})", ""]
    if summary["failures"]:
        lines += ["| rule | job output | attempts | belongs to | rows | log |", "|---|---|---:|---|---|---|"]
        lines += [
            f"| {f['rule']} | {f['output']} | {f['attempts']} | {f['owner']} | {'; '.join(f['rows'][:4])}"
            f"{' …' if len(f['rows']) > 4 else ''} | {f['log']} |"
            for f in summary["failures"]
        ]
    else:
        lines.append("None: every job of every row ran with exit code 0.")
    checks = summary["budget_fidelity"]
    off = [c for c in checks if c["agree"] is False]
    lines += [
        "",
        "## Budgets: the real run (estimated) and its rehearsal",
        "",
        f"{sum(c['agree'] is True for c in checks)} of {len(checks)} experiments end the same way as their real "
        f"run is estimated to (mid-epoch or on an epoch boundary; before the first epoch or after it)"
        + (f"; these do not: {', '.join(c['experiment'] for c in off)}" if off else "")
        + ".",
        "",
        "| experiment | real: epochs (est.) | real: ends mid-epoch | rehearsal: epochs done | rehearsal: "
        "ends mid-epoch | updates |",
        "|---|---:|---|---:|---|---:|",
    ]
    for c in checks:
        if c["real"] is None or c["rehearsal"] is None:
            lines.append(f"| {c['experiment']} | — | — | — | — | — |")
            continue
        r, s = c["real"], c["rehearsal"]
        lines.append(
            f"| {c['experiment']} | {r['epochs']:.3g} | {'yes' if r['ends_mid_epoch'] else 'no'} | "
            f"{s['epochs_completed']} | {'yes' if s['ends_mid_epoch'] else 'no'} | {s['updates']} |"
        )
    return "\n".join(lines) + "\n"
