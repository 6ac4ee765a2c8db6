"""An evidence folder's page, written from its runs' files alone (`lwnmt evidence collect`): README.md with the table,
what each claim's tests found in plain words and every run's hardware and cost, summary.json, the validation curves'
figure, and the short block the project README shows (report/evidence.py gathers what these write)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .evidence import P_VALUE, SUMMARY, page_files


def fmt(value: float | None, digits: int = 2, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def bleu_cell(row: dict) -> str:
    if not row["n"]:
        return f"— (0 of {len(row['planned_seeds'])} seeds run)"
    sd = f" ± {row['sd']:.2f}" if row["sd"] is not None else ""
    return f"{row['mean']:.2f}{sd} (n={row['n']})"


def comparison_cells(row: dict) -> tuple[str, str, str, str]:
    c = row.get("compare")
    if not c:
        return "", "", "", ""
    if not c["seeds"]:
        return f"not yet (`{c['control']}`)", "", "", ""
    boot = ", ".join(f"{p:.3f}" for p in c["bootstrap_p"]) if "bootstrap_p" in c else "—"
    claim = c["claim"]
    if c.get("same_model"):
        changed = ", ".join(c.get("changed") or [])
        claim = f"— (a recipe check: {changed})" if changed else "— (the same model trained longer)"
    return (
        f"{c['delta']:+.2f} vs `{c['control']}`",
        boot,
        fmt(c["t_test_p"], 3) if c["t_test_p"] is not None else "— (one seed)",
        claim,
    )


def table_lines(summary: dict, links: bool = False) -> list[str]:
    lines = [
        "| row | BLEU, mean ± sd | chrF | Δ BLEU vs its control | bootstrap p, per seed | paired t-test p, over "
        "seeds | the claim (row beats control) | valid-loss fall, last quarter |",
        "|---|---:|---:|---|---|---:|---|---:|",
    ]
    for row in summary["rows"]:
        delta, boot, t, claim = comparison_cells(row)
        lines.append(
            f"| {row['label']} | {bleu_cell(row)} | {fmt(row['chrf'])} | {delta} | {boot} | {t} | {claim} | "
            f"{percent(row['last_quarter_fall_pct'])} |"
        )
    return lines


def runs_lines(summary: dict) -> list[str]:
    heldout = any(r.get("heldout") for r in summary["runs"])
    lines = [
        "| run | seed | BLEU | updates | target tokens/s | training, min | last job's wall, min | precision | "
        f"{'CPU or GPU' if any(r.get('kind') == 'cuda' for r in summary['runs']) else 'CPU'} | "
        + ("held-out sets translated | " if heldout else "")
        + "commit |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|" + ("---|" if heldout else "") + "---|",
    ]
    for r in summary["runs"]:
        lines.append(
            f"| `{r['experiment']}` | {r['seed']} | {r['bleu']:.2f} | {r['updates']:,} | "
            f"{fmt(r['target_tokens_per_second'], 0)} | {fmt(r['train_minutes'], 1)} | "
            f"{fmt(r['job_wall_minutes'], 1)} | {r['precision'] or '—'} | {r['cpu'] or '—'} | "
            + (f"{len(r.get('heldout') or [])} | " if heldout else "")
            + f"{r['commit'] or '—'} |"
        )
    return lines


def incomplete_lines(summary: dict) -> list[str]:
    if not summary.get("incomplete"):
        return []
    return (
        ["Half-written runs, not tabulated (copy them again: `lwnmt evidence copy`):", ""]
        + [f"- {line}" for line in summary["incomplete"]]
        + [""]
    )


def seed_cost_line(summary: dict) -> str:
    """Training time per seed, summed over its runs: what the next seed will cost on a similar machine."""
    planned: dict[int, int] = {}
    for row in summary["rows"]:
        for s in row["planned_seeds"]:
            planned[s] = planned.get(s, 0) + 1
    parts = []
    for s in sorted(planned):
        done = [r for r in summary["runs"] if r["seed"] == s]
        minutes = sum(r["train_minutes"] or 0 for r in done)
        # where it ran: what the hours mean (a seed's runs all train on one kind of machine)
        where = sorted({"GPU" if r.get("kind") == "cuda" else "CPU" for r in done if r.get("kind")})
        parts.append(
            f"seed {s}, {len(done)} of {planned[s]} runs"
            + (f", {minutes / 60:.1f} h" if done else "")
            + (f" on {' and '.join(where)}" if where else "")
        )
    return "Training per seed, summed over its runs: " + "; ".join(parts) + "."


def missing_lines(summary: dict, run_command: str, collect_command: str) -> list[str]:
    todo = [(row["label"], s) for row in summary["rows"] for s in row["planned_seeds"] if s not in row["seeds"]]
    if not todo:
        return []
    seeds = sorted({s for _, s in todo})
    return [
        f"Not run yet: {len(todo)} run(s), seed(s) {', '.join(map(str, seeds))} "
        f"(`{run_command}` trains and copies one seed; `{collect_command}` rewrites this page).",
        "",
    ]


def write(
    summary: dict,
    out: str | Path,
    collect_command: str = "lwnmt evidence collect",
    run_command: str = "lwnmt evidence copy --seed <k>",
) -> Path:
    out, files = Path(out), page_files(summary["table"])
    kept = {k: v for k, v in summary.items() if k != "curves"}
    (out / files["summary"]).write_text(json.dumps(kept, indent=1) + "\n")
    drawn = curves_figure(summary, out / files["curves"])
    lines = [
        f"# {summary['title']}",
        "",
        f"Generated by `{collect_command}` from the run files in this folder (one folder per experiment and "
        "seed: the test score, the training summary, the validation curve and the test hypotheses), which anyone "
        "can rescore. " + summary["caption"],
        "",
        f"Scale: {summary['scale']}",
        "",
    ]
    lines += missing_lines(summary, run_command, collect_command)
    lines += incomplete_lines(summary)
    lines += table_lines(summary) + [""]
    lines += [
        "How to read it: Δ is the mean over the seeds both rows have; a claim is *held* when the row beats its "
        "control on every seed, significantly (paired bootstrap, p < 0.05) on each; *not held* when it is no "
        "better on average; *inconclusive* otherwise. The paired t-test over seeds is given beside it (with 3 "
        "seeds it needs very consistent gaps). The last column is the fall in validation loss over each run's "
        "last quarter of updates (mean over seeds): small means the run had nearly stopped improving.",
        "",
    ]
    if drawn:
        lines += [
            f"![validation curves]({files['curves']})",
            "",
            "Validation loss over updates, every run (warm-started rows continue from their parent's last update).",
            "",
        ]
    lines += [
        "## Each run",
        "",
        "Training minutes and tokens/s count the training itself, summed over every job of a run; the last "
        "job's wall is Snakemake's benchmark of the job that finished it (set-up and validation included), so "
        "it is shorter than the training where a run was resumed after a stop.",
        "",
        seed_cost_line(summary),
        "",
    ]
    lines += runs_lines(summary) + [""]
    if summary.get("protocol"):
        lines += [
            "## Each row against its paper's row",
            "",
            "Every setting in which a row differs from the row of config.yaml it scales down (`lwnmt show "
            "<experiment> --protocol`): the changes any scale-down makes (data, width, depth, budget), then each "
            "departure with its reason. The suite refuses a difference without one.",
            "",
            *summary["protocol"],
            "",
        ]
    path = out / files["page"]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def curves_figure(summary: dict, path: Path) -> bool:
    if not summary["curves"]:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parent_updates = {}
    for r in summary["runs"]:
        parent_updates[(r["experiment"], r["seed"])] = r["updates"] or 0
    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, row in enumerate(summary["rows"]):
        for j, seed in enumerate(row["seeds"]):
            curve = summary["curves"][f"{row['experiment']}/seed{seed}"]
            offset = parent_updates.get((row["warm_start"], seed), 0) if row["warm_start"] else 0
            ax.plot(
                [u + offset for u, _ in curve],
                [loss for _, loss in curve],
                color=colors[i % len(colors)],
                alpha=1.0 if j == 0 else 0.45,
                linewidth=1.2,
                label=row["label"] if j == 0 else None,
            )
    ax.set_xlabel("updates (warm starts: counted from their parent's start)")
    ax.set_ylabel("validation loss (bits per token)")
    ax.set_title("Validation loss, every seed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def readme_block(folder: str | Path, shown: str | None = None) -> str:
    """The short section of the project README: the table and what it says of each claim, from summary.json."""
    path = Path(folder) / SUMMARY
    if not path.exists():
        return f"No seed has been run yet ({shown or folder}/{SUMMARY} is missing).\n"
    summary = json.loads(path.read_text())
    lines = table_lines(summary) + [""]
    words = []
    for row in summary["rows"]:
        c = row.get("compare")
        if not c or not c.get("seeds"):
            continue
        n = len(c["seeds"])
        fixed = row.get("departures_fixed_by_protocol")
        recipe = f" (on a recipe that departs from its paper: {'; '.join(fixed)})" if fixed else ""
        words.append(
            f"- **{row['label']}**: {c['delta']:+.2f} BLEU against `{c['control']}` over {n} seed(s): "
            f"{plain_words(c)}{recipe}."
        )
    return "\n".join(lines + words) + "\n"


def seed_by_seed(c: dict) -> str:
    """What each test found for a row that is not better on every seed, significantly, seed by seed: the mean alone
    hides a seed that went the other way, or one that was significant."""
    n = len(c["seeds"])
    better = c["delta"] > 0
    on_average = "better" if better else "worse" if c["delta"] < 0 else "no better"
    direction = "better" if better else "worse"
    counted = [i for i, d in enumerate(c["deltas"]) if (d > 0 if better else d < 0)]
    words = f"{on_average} on average; {direction} on {len(counted)} of {n} seed{'s' if n > 1 else ''}"
    if c.get("bootstrap_p"):
        significant = sum(1 for i in counted if c["bootstrap_p"][i] < P_VALUE)
        words += f", significantly on {significant or 'none'} (paired bootstrap, p < {P_VALUE})"
    if c.get("t_test_p") is not None:
        words += f"; the t-test over seeds p {c['t_test_p']:.3f}"
    return words


def plain_words(c: dict) -> str:
    on = "its one seed" if len(c["seeds"]) == 1 else "every seed"
    boot = c.get("bootstrap_p") or []
    significant = bool(boot) and all(p < P_VALUE for p in boot)
    if c.get("same_model"):
        how = f"{'significant' if significant else 'not significant'} by the paired bootstrap"
        if c.get("changed"):
            if c["delta"] < 0:
                return f"the recipe's own settings do better here ({how})"
            return f"{', '.join(c['changed'])} does better here ({how}); the recipe chose by validation loss"
        if c["delta"] < 0:
            return f"training longer loses BLEU here ({how}): the budget is past where more training helps"
        return f"what training longer still buys ({how})"
    if c["claim"] == "held":
        return f"better on {on}, significantly: the claim holds at this size"
    if c["claim"] == "not held":
        if all(d < 0 for d in c["deltas"]) and significant:
            return (
                f"worse on {on}, significantly (paired bootstrap, p < {P_VALUE}): the claim does not hold at this size"
            )
        return f"{seed_by_seed(c)}: the claim does not hold at this size"
    return f"{seed_by_seed(c)}: inconclusive at this size"
