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
import logging
import platform
import shutil
import statistics
import subprocess
from datetime import date
from pathlib import Path

from .. import UserError
from ..grid import experiment_dir, experiment, heldout_sets, protocol
from ..grid.layout import heldout_prefix, model_file
from ..training.reporting import trained_seconds

log = logging.getLogger(__name__)

P_VALUE = 0.05
# what each run leaves in the repository:
# results/<task>/<experiment>/seed<k>/<source> → <out>/<experiment>/seed<k>/<name>
RUN_FILES = {
    "test.score.json": "test.score.json",
    "test.txt": "test.txt",
    "checkpoints/training.json": "training.json",
    "checkpoints/metrics.csv": "metrics.csv",
    "train.benchmark.tsv": "train.benchmark.tsv",
}
REQUIRED = ("test.score.json", "test.txt", "training.json", "metrics.csv")
SUMMARY = "summary.json"
FIRST_TABLE = "T1"


def page_files(table: str) -> dict[str, str]:
    """The files a table's page is written to in its study's folder: the first table (T1) README.md, summary.json
    and curves.png; another (T2, ...) T2.md, summary.T2.json and curves.T2.png beside them, sharing the runs."""
    name = table.partition("/")[2]
    if name == FIRST_TABLE:
        return {"page": "README.md", "summary": SUMMARY, "curves": "curves.png"}
    return {"page": f"{name}.md", "summary": f"summary.{name}.json", "curves": f"curves.{name}.png"}


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


def seeds(config: dict, table: str) -> list[int]:
    """Every seed some run of the table uses, in order."""
    return sorted({s for _, s in runs(config, table)})


def targets(
    config: dict, table: str, seed: int, out: str | Path | None = None, trained: str | Path | None = None
) -> list[str]:
    """What Snakemake makes for one seed: each run's test score (its training, decoding and scoring before it) and
    its translations of the task's held-out sets, where a folder holds them. With `out` (the evidence folder), a seed
    whose runs there were trained on another kind of machine than this one is refused: warm starts continue their
    baseline, so one seed's runs all train on one kind. With `trained` (the folder Snakemake runs in), only the runs
    whose final model is there: the study puts their translations first (Snakemake's --prioritize), so that a
    finished run can be committed before the seed's other trainings end."""
    if out is not None:
        check_one_kind(Path(out), config, table, seed, {"this machine": this_machine_kind()})
    files = []
    for name, s in runs(config, table, seed):
        run = experiment_dir(config, name, s)
        if trained is not None and not (Path(trained) / model_file(run)).exists():
            continue
        files.append(f"{run}/test.score.json")
        files += [f"{heldout_prefix(run, h)}.txt" for h in heldout_sets(config, experiment(config, name)["task"])]
    return files


def heldout_note(config: dict, table: str) -> str | None:
    """Why a study's targets leave out the held-out sets its task names: no folder holds them here."""
    tasks = sorted({experiment(config, name)["task"] for name, _ in runs(config, table)})
    named = [t for t in tasks if config["tasks"][t].get("heldout_sets")]
    if named and not any(heldout_sets(config, t) for t in named):
        return (
            f"task {', '.join(named)} names held-out sets, but no folder holds them (config key heldout_dir or "
            f"$LWNMT_HELDOUT_DIR): the runs will not translate them"
        )
    return None


def this_machine_kind() -> str:
    """cuda where PyTorch sees a GPU (the trainer's device), else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_kind(training: dict) -> str | None:
    """cpu or cuda: what the run's training.json says it trained on (precision.device_name: "cpu: AMD EPYC
    (AVX512)" for a CPU, the GPU's own name, "NVIDIA H200", for a CUDA device)."""
    precision = training.get("precision")
    device = precision.get("device") if isinstance(precision, dict) else None
    if not device:
        return None
    return "cpu" if device.startswith("cpu") else "cuda"


def gpu_name(device: str) -> str:
    return device.removeprefix("cuda:").strip()


def check_one_kind(out: Path, config: dict, table: str, seed: int, more: dict[str, str]) -> None:
    """One seed's runs, those already in `out` and `more` (name → kind), all on one kind of machine, or a one-line
    error naming two that differ."""
    kinds = dict(more)
    for name, _ in runs(config, table, seed):
        path = out / name / f"seed{seed}" / "training.json"
        if path.exists() and (kind := device_kind(json.loads(path.read_text()))):
            kinds.setdefault(f"{name} (in {out})", kind)
    if len(set(kinds.values())) > 1:
        (a, ka), (b, kb) = next((x, y) for x in kinds.items() for y in kinds.items() if x[1] != y[1])
        where = kb if a in more else ka  # the kind the seed's earlier runs trained on
        raise UserError(
            f"seed {seed}: {a} trained on {ka}, {b} on {kb}; every run of one seed trains on one kind "
            f"of machine (a warm start continues its baseline): run seed {seed} on {where}, or another "
            f"seed here"
        )


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
    result = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True
    )
    return result.stdout.strip() or None


def copy(
    config: dict, table: str, seed: int, out: str | Path, results: str | Path = ".", partial: bool = False
) -> list[Path]:
    """Copy one seed's finished runs from `results` (the folder Snakemake ran in) into `out`; a run with a missing
    file is named in a one-line error and nothing of it is copied, or, with `partial`, left out (the page then
    lists it as not run yet) while the finished ones are copied."""
    out, results = Path(out), Path(results)
    if not results.is_dir():
        raise UserError(f"--results {results}: no such folder; expected the folder Snakemake ran the study in")
    finished, kinds = [], {}
    for name, s in runs(config, table, seed):
        run = results / experiment_dir(config, name, s)
        task = experiment(config, name)["task"]
        # every held-out translation the run has is copied; those of the sets a folder holds here are required
        heldout = [f"heldout.{h}.txt" for h in config["tasks"][task].get("heldout_sets") or {}]
        missing = [src for src, dst in RUN_FILES.items() if dst in REQUIRED and not (run / src).exists()]
        missing += [f"heldout.{h}.txt" for h in heldout_sets(config, task) if not (run / f"heldout.{h}.txt").exists()]
        if missing and partial:
            log.warning("%s: not finished (%s missing), left out", run, ", ".join(missing))
            continue
        if missing:
            raise UserError(
                f"{run}: {', '.join(missing)} missing; finish the seed first (Snakemake's targets: "
                f"`lwnmt evidence targets --table {table} --seed {seed}`)"
            )
        finished.append((name, s, run, heldout))
        kinds[f"{name} (in {results})"] = device_kind(json.loads((run / "checkpoints/training.json").read_text()))
    check_one_kind(out, config, table, seed, {k: v for k, v in kinds.items() if v})
    copied = []
    for name, s, run, heldout in finished:
        dest = out / name / f"seed{s}"
        dest.mkdir(parents=True, exist_ok=True)
        for src, dst in {**RUN_FILES, **{h: h for h in heldout}}.items():
            if (run / src).exists():
                shutil.copyfile(run / src, dest / dst)
        about = {
            "experiment": name,
            "seed": s,
            "commit": commit_of(results),
            "copied": date.today().isoformat(),
            **machine(),
        }
        (dest / "run.json").write_text(json.dumps(about, indent=1) + "\n")
        (dest / "experiment.json").write_text(json.dumps(protocol.run_spec(config, name, s), indent=1) + "\n")
        copied.append(dest)
    return copied


# ---------------------------------------------------------------------------------------------------------------
# Back from the files: per run, per row, per comparison


def run_record(folder: Path) -> dict:
    score = json.loads((folder / "test.score.json").read_text())
    training = json.loads((folder / "training.json").read_text())
    about = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else {}
    seconds = trained_seconds(training)
    wall = None
    bench = folder / "train.benchmark.tsv"
    if bench.exists():
        timings = list(csv.DictReader(bench.open(), delimiter="\t"))
        wall = float(timings[-1]["s"]) if timings else None
    precision = training.get("precision") or {}
    device = precision.get("device") if isinstance(precision, dict) else None
    kind = device_kind(training)
    return {
        "bleu": score["bleu"],
        "chrf": score.get("chrf"),
        "updates": training.get("updates"),
        "target_tokens_per_second": training["target_tokens"] / seconds if seconds else None,
        "train_minutes": training.get("minutes"),
        "job_wall_minutes": wall / 60 if wall else None,
        "precision": (precision.get("computes") or precision.get("amp")) if isinstance(precision, dict) else precision,
        "kind": kind,
        # a GPU run names its GPU (training.json's device); a CPU run its CPU with the features that decide bf16
        "cpu": (gpu_name(device) if kind == "cuda" and device else None) or cpu_cell(about) or device,
        "heldout": sorted(p.name[len("heldout.") : -len(".txt")] for p in folder.glob("heldout.*.txt")),
        "commit": about.get("commit"),
        "curve": validation_curve(folder / "metrics.csv"),
    }


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


def compare(
    out: Path, config: dict, name: str, control: str, seeds: list[int], bleu: dict, theirs: dict, ref: Path | None
) -> dict:
    from ..scoring.score import paired_bootstrap, t_test_paired
    from ..scoring.config import ScoreConfig

    deltas = [bleu[s] - theirs[s] for s in seeds]
    result: dict = {"control": control, "seeds": seeds, "delta": statistics.fmean(deltas), "deltas": deltas}
    if ref is not None:
        refs = ref.read_text(encoding="utf-8").splitlines()
        options = ScoreConfig.from_dict(experiment(config, name)["score"])
        result["bootstrap_p"] = [
            paired_bootstrap(hypotheses(out, control, s), hypotheses(out, name, s), [refs], options)["p_value"]
            for s in seeds
        ]
    result["t_test_p"] = t_test_paired([theirs[s] for s in seeds], [bleu[s] for s in seeds])
    result["claim"] = verdict(deltas, result.get("bootstrap_p"))
    # the same model against itself: no paper's claim, but what more training still buys, or a recipe's check
    result["same_model"] = experiment(config, name)["model"] == experiment(config, control)["model"]
    result["changed"] = changed_settings(config, name, control)
    return result


# what makes a same-model row "the same model trained longer" rather than a check of the recipe's other settings:
# its budget, and how often it validates and saves along the way
BUDGET_KEYS = {
    "max_update",
    "total_num_update",
    "max_epoch",
    "max_minutes",
    "save_interval_updates",
    "save_interval_minutes",
    "validate_interval_updates",
    "keep_interval_updates",
    "keep_last_epochs",
    "log_interval",
}


def changed_settings(config: dict, name: str, control: str) -> list[str]:
    """The model and training settings in which `name` differs from `control`, budgets aside ("dropout 0.3")."""
    a, b = experiment(config, name), experiment(config, control)
    return [
        f"{key} {a[stage].get(key)}"
        for stage in ("arch", "train")
        for key in sorted(set(a[stage]) | set(b[stage]))
        if a[stage].get(key) != b[stage].get(key) and key not in BUDGET_KEYS
    ]


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
    if not out.is_dir():
        raise UserError(f"--out {out}: no such folder; expected the evidence folder `lwnmt evidence copy` filled")
    title, spec = table_spec(config, table)
    ref = Path(ref) if ref else None
    if ref is not None and not ref.exists():
        raise UserError(
            f"{ref}: no such reference file; expected the tokenized test references the runs were "
            f"scored against (the workflow writes them under results/<task>/data/text/)"
        )
    parents = {name: experiment(config, name).get("warm_start") for name, _ in runs(config, table)}
    records, incomplete = {}, []
    for name, s in runs(config, table):
        folder = out / name / f"seed{s}"
        missing = [f for f in REQUIRED if not (folder / f).exists()]
        if not missing:
            records[(name, s)] = run_record(folder)
        elif folder.exists():  # a copy cut short, or files deleted by hand: named, never tabulated
            incomplete.append(f"{folder}: {', '.join(missing)} missing")
    summary_rows = []
    for row in rows(config, table):
        name = row["experiment"]
        planned = [s for n, s in runs(config, table) if n == name]
        bleu = {s: records[(name, s)]["bleu"] for s in planned if (name, s) in records}
        falls = [f for s in bleu if (f := last_quarter_fall(records[(name, s)]["curve"])) is not None]
        line = {
            "label": row["label"],
            "experiment": name,
            "model": experiment(config, name)["model"],
            "planned_seeds": planned,
            "seeds": sorted(bleu),
            **seeds_stats(list(bleu.values())),
            "chrf": mean_or_none(records[(name, s)]["chrf"] for s in bleu),
            "last_quarter_fall_pct": mean_or_none(falls),
            "warm_start": parents.get(name),
            "departures": protocol.departures(config, name),
            "departures_fixed_by_protocol": protocol.fixed_by_protocol(config, name),
        }
        if row.get("compare_to"):
            control = row["compare_to"]
            theirs = {s: records[(control, s)]["bleu"] for s in planned if (control, s) in records}
            common = sorted(set(bleu) & set(theirs))
            line["compare"] = (
                compare(out, config, name, control, common, bleu, theirs, ref)
                if common
                else {
                    "control": control,
                    "seeds": [],
                    "same_model": experiment(config, name)["model"] == experiment(config, control)["model"],
                    "changed": changed_settings(config, name, control),
                }
            )
        summary_rows.append(line)
    return {
        "table": table,
        "title": title,
        "caption": spec.get("caption", ""),
        "scale": spec.get("scale", ""),
        "rows": summary_rows,
        "incomplete": incomplete,
        "runs": [
            {"experiment": n, "seed": s, **{k: v for k, v in r.items() if k != "curve"}}
            for (n, s), r in records.items()
        ],
        "curves": {f"{n}/seed{s}": r["curve"] for (n, s), r in records.items()},
        "protocol": protocol.listing(config, list(dict.fromkeys(row["experiment"] for row in rows(config, table)))),
    }


def mean_or_none(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def seeds_stats(values: list[float]) -> dict:
    return {
        "n": len(values),
        "mean": statistics.fmean(values) if values else None,
        "sd": statistics.stdev(values) if len(values) > 1 else None,
    }
