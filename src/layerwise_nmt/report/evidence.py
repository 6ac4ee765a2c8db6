"""Evidence committed as small text: a table's runs copied out of results/ into a folder of the repository, one seed
at a time (the score, the training summary, the validation curve, the test hypotheses; never a checkpoint), and that
folder's README written from those files alone, so that seeds trained on different machines at different times add
up, and anyone can rescore them.

    lwnmt evidence targets --config config.yaml --config config/study_cpu.yaml --table study_cpu/T1 --seed 1
    lwnmt evidence copy    ... --seed 1 --out docs/study/cpu      (after Snakemake has made those targets)
    lwnmt evidence collect ... --out docs/study/cpu --ref results/multi30k_deen/data/text/test.de-en.en

The verdict on a row compared with another (its control) is read over the seeds both have: each seed's paired
bootstrap (sacrebleu, 1,000 resamples of the test set) and, with two seeds or more, a paired t-test over the seeds'
BLEU. A claim that the row beats its control is *held* when it is better on every seed and significantly so
(bootstrap p < 0.05) on each, *not held* when it is not better on average, and *inconclusive* otherwise."""

from __future__ import annotations

import csv
import json
import math
import platform
import shutil
import statistics
import subprocess
from datetime import date
from pathlib import Path

from .. import UserError
from ..grid import experiment_dir, experiment

P_VALUE = 0.05
# what each run leaves in the repository:
# results/<task>/<experiment>/seed<k>/<source> → <out>/<experiment>/seed<k>/<name>
RUN_FILES = {"test.score.json": "test.score.json", "test.txt": "test.txt",
             "checkpoints/training.json": "training.json", "checkpoints/metrics.csv": "metrics.csv",
             "train.benchmark.tsv": "train.benchmark.tsv"}
REQUIRED = ("test.score.json", "test.txt", "training.json", "metrics.csv")
SUMMARY = "summary.json"


def table_spec(config: dict, table: str) -> tuple[str, dict]:
    paper, _, name = table.partition("/")
    tables = config.get("papers", {}).get(paper, {}).get("tables", {})
    if name not in tables:
        known = [f"{p}/{t}" for p, spec in config.get("papers", {}).items() for t in spec.get("tables", {})]
        raise UserError(f"table {table!r} is not in the config; expected one of {', '.join(known)}")
    return config["papers"][paper].get("title", ""), tables[name]


def rows(config: dict, table: str) -> list[dict]:
    return [row for row in table_spec(config, table)[1]["rows"] if "experiment" in row]


def runs(config: dict, table: str, seed: int | None = None) -> list[tuple[str, int]]:
    """(experiment, seed) of every run the table needs, or of one seed's runs (parents first: warm starts after)."""
    out = []
    for row in rows(config, table):
        seeds = experiment(config, row["experiment"])["seeds"]
        out += [(row["experiment"], s) for s in seeds if seed is None or s == seed]
    if seed is not None and not out:
        raise UserError(f"seed {seed}: no run of table {table} uses it")
    return list(dict.fromkeys(out))


def targets(config: dict, table: str, seed: int) -> list[str]:
    """What Snakemake makes for one seed: each run's test score (its training, decoding and scoring before it)."""
    return [f"{experiment_dir(config, name, s)}/test.score.json" for name, s in runs(config, table, seed)]


def machine() -> dict:
    from ..training.precision import cpu_model

    flags = ""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
    features = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags]
    return {"cpu": cpu_model(), "features": features, "python": platform.python_version()}


def commit_of(folder: Path) -> str | None:
    result = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                            text=True)
    return result.stdout.strip() or None


def copy(config: dict, table: str, seed: int, out: str | Path, results: str | Path = ".",
         partial: bool = False) -> list[Path]:
    """Copy one seed's finished runs from `results` (the folder Snakemake ran in) into `out`; a run with a missing
    file is named in a one-line error and nothing of it is copied, or, with `partial`, left out (the page then
    lists it as not run yet) while the finished ones are copied."""
    out, results = Path(out), Path(results)
    copied = []
    for name, s in runs(config, table, seed):
        run = results / experiment_dir(config, name, s)
        missing = [src for src, dst in RUN_FILES.items() if dst in REQUIRED and not (run / src).exists()]
        if missing and partial:
            continue
        if missing:
            raise UserError(f"{run}: {', '.join(missing)} missing; finish the seed first (Snakemake's targets: "
                            f"`lwnmt evidence targets --table {table} --seed {seed}`)")
        dest = out / name / f"seed{s}"
        dest.mkdir(parents=True, exist_ok=True)
        for src, dst in RUN_FILES.items():
            if (run / src).exists():
                shutil.copyfile(run / src, dest / dst)
        about = {"experiment": name, "seed": s, "commit": commit_of(results), "copied": date.today().isoformat(),
                 **machine()}
        (dest / "run.json").write_text(json.dumps(about, indent=1) + "\n")
        copied.append(dest)
    return copied


# ---------------------------------------------------------------------------------------------------------------
# Back from the files: per run, per row, per comparison


def run_record(folder: Path) -> dict:
    score = json.loads((folder / "test.score.json").read_text())
    training = json.loads((folder / "training.json").read_text())
    about = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else {}
    seconds = training.get("minutes", 0) * 60
    wall = None
    bench = folder / "train.benchmark.tsv"
    if bench.exists():
        timings = list(csv.DictReader(bench.open(), delimiter="\t"))
        wall = float(timings[-1]["s"]) if timings else None
    precision = training.get("precision") or {}
    return {"bleu": score["bleu"], "chrf": score.get("chrf"), "updates": training.get("updates"),
            "target_tokens_per_second": training["target_tokens"] / seconds if seconds else None,
            "train_minutes": training.get("minutes"), "job_wall_minutes": wall / 60 if wall else None,
            "precision": (precision.get("computes") or precision.get("amp")) if isinstance(precision, dict) else
            precision,
            "cpu": cpu_cell(about) or (precision.get("device") if isinstance(precision, dict) else None),
            "commit": about.get("commit"), "curve": validation_curve(folder / "metrics.csv")}


# What decides a CPU's bf16 speed, most capable last; a feature implied by a later one is not repeated.
CPU_FEATURES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX512_BF16", "amx_bf16": "AMX"}
IMPLIED_BY = {"avx2": "avx512f", "avx512f": "avx512_bf16"}


def cpu_cell(about: dict) -> str | None:
    """The CPU's name and its vector features, as run.json records them: 'Intel(R) Xeon(R) Processor (AVX512_BF16,
    AMX)'; model names alone do not tell an AVX2-only part from one with native bf16."""
    if not about.get("cpu"):
        return None
    features = about.get("features") or []
    shown = [CPU_FEATURES[f] for f in CPU_FEATURES if f in features and IMPLIED_BY.get(f) not in features]
    return f"{about['cpu']} ({', '.join(shown)})" if shown else about["cpu"]


def validation_curve(path: Path) -> list[tuple[int, float]]:
    """(update, validation loss) of every validation the run made, in update order."""
    with path.open(newline="") as f:
        points = {int(r["update"]): float(r["valid_loss"]) for r in csv.DictReader(f) if r.get("valid_loss")}
    return sorted(points.items())


def last_quarter_fall(curve: list[tuple[int, float]]) -> float | None:
    """The validation loss's fall over the run's last quarter of updates, in percent of where the quarter began
    (the validation at or just after 3/4 of the last update): how much the run was still improving."""
    if len(curve) < 2:
        return None
    end_update, end_loss = curve[-1]
    start = next(((u, loss) for u, loss in curve if u >= 0.75 * end_update), None)
    if start is None or start[0] == end_update:
        return None
    return 100 * (start[1] - end_loss) / start[1]


def hypotheses(out: Path, name: str, seed: int) -> list[str]:
    return (out / name / f"seed{seed}" / "test.txt").read_text(encoding="utf-8").splitlines()


def compare(out: Path, config: dict, name: str, control: str, seeds: list[int], bleu: dict, theirs: dict,
            ref: Path | None) -> dict:
    from ..scoring.score import paired_bootstrap, t_test_paired
    from ..scoring.config import ScoreConfig

    deltas = [bleu[s] - theirs[s] for s in seeds]
    result = {"control": control, "seeds": seeds, "delta": statistics.fmean(deltas), "deltas": deltas}
    if ref is not None:
        refs = ref.read_text(encoding="utf-8").splitlines()
        options = ScoreConfig.from_dict(experiment(config, name)["score"])
        result["bootstrap_p"] = [paired_bootstrap(hypotheses(out, control, s), hypotheses(out, name, s), [refs],
                                                  options)["p_value"] for s in seeds]
    result["t_test_p"] = t_test_paired([theirs[s] for s in seeds], [bleu[s] for s in seeds])
    result["claim"] = verdict(deltas, result.get("bootstrap_p"))
    # the same model trained longer against itself: no paper's claim, but what more training still buys
    result["same_model"] = experiment(config, name)["model"] == experiment(config, control)["model"]
    return result


def verdict(deltas: list[float], bootstrap_p: list[float] | None) -> str:
    """held: better on every seed, significantly on each; not held: no better on average; inconclusive: between."""
    if statistics.fmean(deltas) <= 0:
        return "not held"
    if bootstrap_p is not None and all(d > 0 for d in deltas) and all(p < P_VALUE for p in bootstrap_p):
        return "held"
    return "inconclusive"


def summarise(config: dict, table: str, out: str | Path, ref: str | Path | None) -> dict:
    """Every row of `table` from the runs present under `out`: per-run records, mean ± sd, comparisons."""
    out = Path(out)
    title, spec = table_spec(config, table)
    ref = Path(ref) if ref else None
    if ref is not None and not ref.exists():
        raise UserError(f"{ref}: no such reference file; expected the tokenized test references the runs were "
                        f"scored against (the workflow writes them under results/<task>/data/text/)")
    parents = {name: experiment(config, name).get("warm_start") for name, _ in runs(config, table)}
    records = {}
    for name, s in runs(config, table):
        folder = out / name / f"seed{s}"
        if all((folder / f).exists() for f in REQUIRED):
            records[(name, s)] = run_record(folder)
    summary_rows = []
    for row in rows(config, table):
        name = row["experiment"]
        planned = [s for n, s in runs(config, table) if n == name]
        bleu = {s: records[(name, s)]["bleu"] for s in planned if (name, s) in records}
        falls = [f for s in bleu if (f := last_quarter_fall(records[(name, s)]["curve"])) is not None]
        line = {"label": row["label"], "experiment": name, "planned_seeds": planned, "seeds": sorted(bleu),
                **seeds_stats(list(bleu.values())), "chrf": mean_or_none(records[(name, s)]["chrf"] for s in bleu),
                "last_quarter_fall_pct": mean_or_none(falls), "warm_start": parents.get(name)}
        if row.get("compare_to"):
            control = row["compare_to"]
            theirs = {s: records[(control, s)]["bleu"] for s in planned if (control, s) in records}
            common = sorted(set(bleu) & set(theirs))
            line["compare"] = (compare(out, config, name, control, common, bleu, theirs, ref) if common
                               else {"control": control, "seeds": []})
        summary_rows.append(line)
    return {"table": table, "title": title, "caption": spec.get("caption", ""), "scale": spec.get("scale", ""),
            "rows": summary_rows,
            "runs": [{"experiment": n, "seed": s, **{k: v for k, v in r.items() if k != "curve"}}
                     for (n, s), r in records.items()],
            "curves": {f"{n}/seed{s}": r["curve"] for (n, s), r in records.items()}}


def mean_or_none(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def seeds_stats(values: list[float]) -> dict:
    return {"n": len(values), "mean": statistics.fmean(values) if values else None,
            "sd": statistics.stdev(values) if len(values) > 1 else None}


# ---------------------------------------------------------------------------------------------------------------
# Written out: README.md, summary.json, the curves' figure


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
    claim = "— (the same model trained longer)" if c.get("same_model") else c["claim"]
    return (f"{c['delta']:+.2f} vs `{c['control']}`", boot,
            fmt(c["t_test_p"], 3) if c["t_test_p"] is not None else "— (one seed)", claim)


def table_lines(summary: dict, links: bool = False) -> list[str]:
    lines = ["| row | BLEU, mean ± sd | chrF | Δ BLEU vs its control | bootstrap p, per seed | paired t-test p, over "
             "seeds | the claim (row beats control) | valid-loss fall, last quarter |",
             "|---|---:|---:|---|---|---:|---|---:|"]
    for row in summary["rows"]:
        delta, boot, t, claim = comparison_cells(row)
        lines.append(f"| {row['label']} | {bleu_cell(row)} | {fmt(row['chrf'])} | {delta} | {boot} | {t} | {claim} | "
                     f"{percent(row['last_quarter_fall_pct'])} |")
    return lines


def runs_lines(summary: dict) -> list[str]:
    lines = ["| run | seed | BLEU | updates | target tokens/s | training, min | last job's wall, min | precision | "
             "CPU | commit |", "|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in summary["runs"]:
        lines.append(f"| `{r['experiment']}` | {r['seed']} | {r['bleu']:.2f} | {r['updates']:,} | "
                     f"{fmt(r['target_tokens_per_second'], 0)} | {fmt(r['train_minutes'], 1)} | "
                     f"{fmt(r['job_wall_minutes'], 1)} | {r['precision'] or '—'} | {r['cpu'] or '—'} | "
                     f"{r['commit'] or '—'} |")
    return lines


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
        parts.append(f"seed {s}, {len(done)} of {planned[s]} runs" + (f", {minutes / 60:.1f} h" if done else ""))
    return "Training per seed, summed over its runs: " + "; ".join(parts) + "."


def missing_lines(summary: dict, run_command: str, collect_command: str) -> list[str]:
    todo = [(row["label"], s) for row in summary["rows"] for s in row["planned_seeds"] if s not in row["seeds"]]
    if not todo:
        return []
    seeds = sorted({s for _, s in todo})
    return [f"Not run yet: {len(todo)} run(s), seed(s) {', '.join(map(str, seeds))} "
            f"(`{run_command}` trains and copies one seed; `{collect_command}` rewrites this page).", ""]


def write(summary: dict, out: str | Path, collect_command: str = "lwnmt evidence collect",
          run_command: str = "lwnmt evidence copy --seed <k>") -> Path:
    out = Path(out)
    (out / SUMMARY).write_text(json.dumps({k: v for k, v in summary.items() if k != "curves"}, indent=1) + "\n")
    drawn = curves_figure(summary, out / "curves.png")
    lines = [f"# {summary['title']}", "",
             f"Generated by `{collect_command}` from the run files in this folder (one folder per experiment and "
             "seed: the test score, the training summary, the validation curve and the test hypotheses), which anyone "
             "can rescore. " + summary["caption"], "", f"Scale: {summary['scale']}", ""]
    lines += missing_lines(summary, run_command, collect_command)
    lines += table_lines(summary) + [""]
    lines += ["How to read it: Δ is the mean over the seeds both rows have; a claim is *held* when the row beats its "
              "control on every seed, significantly (paired bootstrap, p < 0.05) on each; *not held* when it is no "
              "better on average; *inconclusive* otherwise. The paired t-test over seeds is given beside it (with 3 "
              "seeds it needs very consistent gaps). The last column is the fall in validation loss over each run's "
              "last quarter of updates (mean over seeds): small means the run had nearly stopped improving.", ""]
    if drawn:
        lines += ["![validation curves](curves.png)", "",
                  "Validation loss over updates, every run (warm-started rows continue from their parent's last "
                  "update).",
                  ""]
    lines += ["## Each run", "",
              "Training minutes and tokens/s count the training itself, summed over every job of a run; the last "
              "job's wall is Snakemake's benchmark of the job that finished it (set-up and validation included), so "
              "it is shorter than the training where a run was resumed after a stop.", "",
              seed_cost_line(summary), ""]
    lines += runs_lines(summary) + [""]
    path = out / "README.md"
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
            ax.plot([u + offset for u, _ in curve], [loss for _, loss in curve], color=colors[i % len(colors)],
                    alpha=1.0 if j == 0 else 0.45, linewidth=1.2, label=row["label"] if j == 0 else None)
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
        words.append(f"- **{row['label']}**: {c['delta']:+.2f} BLEU against `{c['control']}` over {n} seed(s): "
                     f"{plain_words(c)}.")
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
        if c["delta"] < 0:
            return f"training longer loses BLEU here ({how}): the budget is past where more training helps"
        return f"what training longer still buys ({how})"
    if c["claim"] == "held":
        return f"better on {on}, significantly: the claim holds at this size"
    if c["claim"] == "not held":
        if all(d < 0 for d in c["deltas"]) and significant:
            return (f"worse on {on}, significantly (paired bootstrap, p < {P_VALUE}): the claim does not hold at this "
                    "size")
        return f"{seed_by_seed(c)}: the claim does not hold at this size"
    return f"{seed_by_seed(c)}: inconclusive at this size"
