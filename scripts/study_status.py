"""docs/study/: what the GPU node has done so far, from the runs merged into .study/<size>/ by
`scripts/study_gpu.sh collect` — each row × seed scored or not ("n of 18 runs"), each row's mean ± sd over the seeds
scored, the paired bootstrap of each method against its control and whether the paper's claim (the method beats
its control) held at this size; for a model size whose runs are all scored, the study's table and figures built
there (the report rules only: the models stayed on the GPU). On the node, `--node-results` writes the results file
of one size's runs (BLEU, updates, tokens/s, wall time, peak memory per run), read from their own files only.

    python scripts/study_status.py [--study .study] [--docs docs/study]
    python scripts/study_status.py --node-results .study/small --out OUT/results.json
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SIZES = {  # folder under .study → (overlays after config.yaml, what it is)
    "small": (["config/study.yaml", "config/study_small.yaml"], "the demo's model size (3+3 layers, d=256)"),
    "iwslt": (["config/study.yaml"], "transformer_iwslt_de_en size (6+6 layers, d=512)"),
}
TASK = "multi30k_deen"
P_VALUE = 0.05


def overlays(size: str, extra: list[str]) -> list[str]:
    return [str(ROOT / f) for f in SIZES[size][0]] + list(extra)


def study_config(size: str, extra: list[str]) -> dict:
    from layerwise_nmt import grid as cfg

    return cfg.load(ROOT / "config.yaml", *overlays(size, extra))


def runs(size: str, extra: list[str], config: dict | None = None) -> list[tuple[str, str, int]]:
    """(row label, experiment, seed) of every run the study's table needs at this size."""
    from layerwise_nmt import grid as cfg

    config = config or study_config(size, extra)
    rows = config["papers"]["study"]["tables"]["T1"]["rows"]
    return [
        (row["label"], row["experiment"], seed)
        for row in rows
        for seed in cfg.experiment(config, row["experiment"])["seeds"]
    ]


def run_dir(study: Path, size: str, experiment: str, seed: int) -> Path:
    return study / size / "results" / TASK / experiment / f"seed{seed}"


def scored(study: Path, size: str, experiment: str, seed: int) -> dict | None:
    path = run_dir(study, size, experiment, seed) / "test.score.json"
    return json.loads(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------------------------------------------------------
# On the node: the results file, rewritten after every scored run


def run_result(run: Path) -> dict:
    """One run's numbers from its own files: test.score.json, checkpoints/training.json, train.benchmark.tsv."""
    from layerwise_nmt.training.reporting import trained_seconds

    row: dict = {"experiment": run.parent.name, "seed": int(run.name[4:])}
    score, training = run / "test.score.json", run / "checkpoints" / "training.json"
    if score.exists():
        row["bleu"] = round(json.loads(score.read_text())["bleu"], 2)
    if training.exists():
        t = json.loads(training.read_text())
        seconds = trained_seconds(t)
        row.update(
            updates=t.get("updates"),
            epochs=t.get("epochs_completed"),
            stopped_by=t.get("stopped_by"),
            train_seconds=round(seconds) if seconds >= 1 else round(seconds, 1),
            peak_gpu_memory_gib=t.get("peak_gpu_memory_gib"),
            target_tokens_per_second=round(t["target_tokens"] / seconds) if seconds else None,
        )
    bench = run / "train.benchmark.tsv"
    if bench.exists():
        rows = list(csv.DictReader(bench.open(), delimiter="\t"))
        if rows:
            row.update(job_wall_seconds=round(float(rows[-1]["s"])), max_rss_mib=_number(rows[-1].get("max_rss")))
    return row


def _number(text: str | None) -> float | None:
    try:
        return round(float(text))
    except (TypeError, ValueError):
        return None


def node_results(size_dir: Path, out: Path) -> int:
    """OUT/results.json: every run that has started, scored or not; returns how many are scored."""
    found = sorted((size_dir / "results" / TASK).glob("study.*/seed*"))
    rows = [run_result(run) for run in found if run.is_dir()]
    scored_rows = [r for r in rows if "bleu" in r]
    result = {"scored": len(scored_rows), "started": len(rows), "runs": rows}
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(out)
    return len(scored_rows)


# ---------------------------------------------------------------------------------------------------------------
# Back here: mean ± sd, the bootstrap against each control, the claims


def hypotheses(study: Path, size: str, experiment: str, seeds: list[int]) -> list[str]:
    return [line for s in seeds for line in (run_dir(study, size, experiment, s) / "test.txt").read_text().splitlines()]


def compare(study: Path, size: str, config: dict, experiment: str, control: str, seeds: list[int]) -> dict:
    """Paired bootstrap over the seeds both rows have, their test sets concatenated (seed k against seed k)."""
    from layerwise_nmt import grid as cfg
    from layerwise_nmt.scoring.score import paired_bootstrap
    from layerwise_nmt.scoring.config import ScoreConfig

    e = cfg.experiment(config, experiment)
    ref = study / size / "results" / TASK / "data" / "text" / f"test.{e['pair']}.{e['tgt']}"
    refs = ref.read_text().splitlines() * len(seeds)
    result = paired_bootstrap(
        hypotheses(study, size, control, seeds),
        hypotheses(study, size, experiment, seeds),
        [refs],
        ScoreConfig.from_dict(e["score"]),
    )
    return {"p_value": result["p_value"], "seeds": seeds}


def summary_rows(study: Path, size: str, extra: list[str], config: dict | None = None) -> list[dict]:
    """Per table row: mean ± sd over the scored seeds, and for a method, Δ to its control, p, the claim."""
    config = config or study_config(size, extra)
    out = []
    for row in config["papers"]["study"]["tables"]["T1"]["rows"]:
        needed = [s for _, e, s in runs(size, extra, config) if e == row["experiment"]]
        bleu = {s: v["bleu"] for s in needed if (v := scored(study, size, row["experiment"], s))}
        values = list(bleu.values())
        line = {
            "label": row["label"],
            "experiment": row["experiment"],
            "n": len(values),
            "of": len(needed),
            "mean": statistics.fmean(values) if values else None,
            "sd": statistics.stdev(values) if len(values) > 1 else None,
            "stopped_by": stopped_by(study, size, row["experiment"], sorted(bleu)),
        }
        control = row.get("compare_to")
        if control:
            theirs = {s: v["bleu"] for s in needed if (v := scored(study, size, control, s))}
            common = sorted(set(bleu) & set(theirs))
            line["control"] = control
            if common:
                delta = statistics.fmean(bleu[s] for s in common) - statistics.fmean(theirs[s] for s in common)
                line.update(delta=delta, **compare(study, size, config, row["experiment"], control, common))
                line["claim"] = "held" if delta > 0 and line["p_value"] < P_VALUE else "not held"
        out.append(line)
    return out


def stopped_by(study: Path, size: str, experiment: str, seeds: list[int]) -> str:
    """Why each seed's training stopped ("patience" is converged; "max_minutes" is the node's time budget)."""
    reasons = []
    for seed in seeds:
        path = run_dir(study, size, experiment, seed) / "checkpoints" / "training.json"
        reasons.append(json.loads(path.read_text()).get("stopped_by") or "?" if path.exists() else "?")
    return ", ".join(f"{r} × {reasons.count(r)}" for r in dict.fromkeys(reasons))


def summary_table(rows: list[dict]) -> list[str]:
    lines = [
        "| row | BLEU, mean ± sd (seeds) | training stopped by | vs control: Δ BLEU, bootstrap p | "
        "the paper's claim at this size |",
        "|---|---:|---|---:|---|",
    ]
    for r in rows:
        mean = "—" if r["mean"] is None else f"{r['mean']:.2f}" + (f" ± {r['sd']:.2f}" if r["sd"] is not None else "")
        cell = f"{mean} ({r['n']} of {r['of']})"
        vs, claim = "", ""
        if "control" in r:
            vs = (
                f"{r['delta']:+.2f}, p = {r['p_value']:.3f} (`{r['control']}`, seeds {', '.join(map(str, r['seeds']))})"
                if "delta" in r
                else f"not yet (`{r['control']}`)"
            )
            claim = r.get("claim", "—")
        lines.append(f"| {r['label']} (`{r['experiment']}`) | {cell} | {r['stopped_by']} | {vs} | {claim} |")
    return lines


def build_report(study: Path, size: str, extra: list[str]) -> bool:
    """The table and figures through the workflow's report rules, with the scores that came back."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(study / size),
        "tables",
        "--config",
        "models_elsewhere=True",
        "--cores",
        "2",
        "--allowed-rules",
        "table",
        "figure",
        "summary",
        "tables",
        "--quiet",
        "rules",
        "--configfile",
        str(ROOT / "config.yaml"),
        *overlays(size, extra),
    ]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode:
        print(f"study_status: {size}: the report rules failed:\n{result.stderr[-2000:]}", file=sys.stderr)
    return result.returncode == 0


def size_section(study: Path, docs: Path, size: str, extra: list[str], report: bool) -> list[str]:
    config = study_config(size, extra)
    needed = runs(size, extra, config)
    done = {(e, s): scored(study, size, e, s) for _, e, s in needed}
    count = sum(v is not None for v in done.values())
    lines = [f"## {SIZES[size][1]}: {count} of {len(needed)} runs", ""]
    seeds = sorted({s for _, _, s in needed})
    lines += ["| row | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|" + "---:|" * len(seeds)]
    for label in dict.fromkeys(label for label, _, _ in needed):
        experiment = next(e for lab, e, _ in needed if lab == label)
        cells = [f"{done[(experiment, s)]['bleu']:.2f}" if done.get((experiment, s)) else "—" for s in seeds]
        lines.append(f"| {label} (`{experiment}`) | " + " | ".join(cells) + " |")
    lines.append("")
    if count:
        lines += [
            f"Over the seeds scored; a claim holds when the method's mean beats its control's and the paired "
            f"bootstrap (1,000 samples over the seeds' test sets together) gives p < {P_VALUE}. "
            f"A training stopped by `patience` converged; one stopped by `max_minutes` was cut by the "
            f"node's time budget, and its claim is about that budget:",
            "",
        ]
        lines += summary_table(summary_rows(study, size, extra, config)) + [""]
    if count == len(needed) and report and build_report(study, size, extra):
        out = docs / size
        out.mkdir(exist_ok=True)
        for produced in (study / size / "results" / "tables" / "study").glob("T1.*"):
            shutil.copy(produced, out / produced.name)
        for produced in (study / size / "results" / "figures" / "study").glob("*.png"):
            shutil.copy(produced, out / produced.name)
        lines += [f"All runs scored: the table is [{size}/T1.md]({size}/T1.md), figures beside it.", ""]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default=str(ROOT / ".study"))
    parser.add_argument("--docs", default=str(ROOT / "docs" / "study"))
    parser.add_argument("--no-report", action="store_true", help="the status page only (no Snakemake)")
    parser.add_argument("--extra", nargs="*", default=[], help="more overlays (STUDY_EXTRA: the rehearsal's toy size)")
    parser.add_argument("--node-results", metavar="SIZE_DIR", help="on the node: write --out from these runs")
    parser.add_argument("--out", help="with --node-results: the results file")
    args = parser.parse_args(argv)
    if args.node_results:
        print(node_results(Path(args.node_results), Path(args.out)))
        return 0
    study, docs = Path(args.study), Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    lines = [
        "# The converged study on a GPU: what is done",
        "",
        "Generated by `scripts/study_gpu.sh collect` (scripts/study_status.py) from the runs that came back from "
        'the GPU node; how to run it: docs/usage.md, "On a GPU node without internet". A cell without a BLEU '
        "was not run yet (—). Lowercased tokenized BLEU on Multi30k test2016, per seed.",
        "",
    ]
    gpu = ROOT / "benchmarks" / "results" / "gpu.json"
    if gpu.exists():
        device = json.loads(gpu.read_text()).get("device", "?")
        lines += [f"GPU of the latest gpu-check: {device} (benchmarks/results/gpu.json).", ""]
    for size in SIZES:
        lines += size_section(study, docs, size, args.extra, not args.no_report)
    (docs / "README.md").write_text("\n".join(lines))
    print(f"study_status: {docs / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
