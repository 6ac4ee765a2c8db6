"""One paper table: per row the paper's printed number, ours (mean ± sd over seeds, n), Δ, the paper's significance
mark where our run passes the paper's test against the row it compares to, and a status for rows we did not run —
never an empty or invented cell. Written as Markdown, CSV (with the raw numbers and p-values) and LaTeX."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..grid import measure_of, save_dir, score_file, split_of, training_summary
from ..job_specs import TableSpec
from .. import UserError
from ..data.io import atomic_path, read_lines
from ..scoring.score import ScoreConfig, paired_bootstrap, reference_streams, seeds_summary, sign_test, t_test
from .html_table import page

NOT_RUN = "—"
# A table's `significance:` without p or mark takes these (the schema's defaults, checked in tests/test_defaults.py).
SIGNIFICANCE_DEFAULTS = {"p": 0.01, "mark": "†"}
RAN = ("ok", "manual")  # a row on data a person fetches by hand ran like any other once they did
TESTS = {
    "t_test": "Welch's t-test over seeds",
    "sign_test": "sign test (Collins et al. 2005), first seeds",
    "bootstrap": "paired bootstrap resampling (Koehn 2004), first seeds",
}


def significance(spec: TableSpec) -> dict:
    """The table's significance test with its defaults filled in; {} for a table without one."""
    test = spec.significance
    return {**SIGNIFICANCE_DEFAULTS, **test} if test else {}


def build(spec: TableSpec) -> pd.DataFrame:
    """The table of the spec's rows, each {label, paper: {metric: value}, state, reason, scores: {split: [score.json
    paths, one per seed]}}. One metric: columns paper/ours/delta; several: the same three per metric,
    suffixed with its name (e.g. "ours valid_bleu")."""
    metrics = spec.metrics
    with_params = any("params_m" in row.get("paper", {}) for row in spec.rows)
    test = significance(spec)
    every = bool(test and spec.verdict)  # the papers test BLEU; a verdict table tests every metric
    records = []
    for row in spec.rows:
        scores = load_scores(row.get("scores", {}))
        baseline = load_scores(row.get("baseline_scores", {}))
        record = {"row": row["label"]}
        ran = row["state"] in RAN and any(scores.values())
        tested: dict[str, tuple[float | None, str]] = {}  # metric → (p, better | worse | equal)
        for metric in metrics:
            suffix = f" {metric}" if len(metrics) > 1 else ""
            split, measure = split_of(metric), measure_of(metric)
            if metric in spec.mean_of:  # e.g. MLRF's NIST "Ave.": per seed, the mean of MT04/05/08
                scores[split] = mean_scores([scores.get(split_of(m), []) for m in spec.mean_of[metric]])
            cell = cells(row.get("paper", {}).get(metric), [value(s, measure) for s in scores.get(split, [])], ran)
            if test and (measure == "bleu" or every):
                cell["p vs"] = NOT_RUN
            if test and (measure == "bleu" or every) and ran and baseline.get(split):
                cell["p"] = p_value(test["test"], baseline[split], scores[split], measure)
                way = tested_direction(test["test"], baseline[split], scores[split], measure)
                if cell["p"] is not None and cell["p"] < test["p"] and way == "better":
                    cell["ours"] = cell["ours"].replace(" (n=", f" {test['mark']} (n=", 1)
                # the p-value says how sure, not which way: the direction beside it (a two-sided test)
                than = "to" if way == "equal" else "than"
                cell["p vs"] = (
                    NOT_RUN
                    if cell["p"] is None
                    else f"{p_text(cell['p'])} ({way} {than} {row.get('compare_to', 'its baseline')})"
                )
                tested[metric] = (cell["p"], way)
            record.update({f"{k}{suffix}": v for k, v in cell.items()})
        if every:
            record["verdict"] = verdict(row, tested, test) if ran else NOT_RUN
        record["status"] = ("ours" + cut_short(row.get("runs", []))) if ran else row.get("reason", "not run yet")
        if spec.budget:
            record.update(budget(row.get("runs", []) if ran else []))
        if with_params:  # "#parameter" columns (LWC T3): the paper's printed M beside our model's exact count
            paper_params = row.get("paper", {}).get("params_m")
            ours_params = {
                s["decoding"]["params"] for split in scores.values() for s in split if "params" in s.get("decoding", {})
            }
            record["params (paper)"] = f"{paper_params:.2f}M" if paper_params is not None else NOT_RUN
            record["params (ours)"] = f"{ours_params.pop() / 1e6:.2f}M" if len(ours_params) == 1 else NOT_RUN
        records.append(record)
    if spec.speeds:
        add_speed_ratios(records, spec.rows)
    return pd.DataFrame.from_records(records)


BUDGET = ("updates", "sentences seen", "target tokens", "valid loss (end)")


def budget(runs: list[str]) -> dict:
    """What each row's model was trained on, so that a table of unequal budgets explains itself: updates, sentence
    pairs and target tokens seen (training.json), and the last validation loss (metrics.csv, bits per token), each
    the mean over the row's runs; — where a run does not record it (trained before these were counted)."""
    seen: dict[str, list[float]] = {k: [] for k in BUDGET}
    for run in runs:
        path, metrics = Path(training_summary(run)), Path(save_dir(run)) / "metrics.csv"
        summary = json.loads(path.read_text()) if path.exists() else {}
        for key, name in (("updates", "updates"), ("sentences", "sentences seen"), ("target_tokens", "target tokens")):
            if summary.get(key):
                seen[name].append(summary[key])
        if metrics.exists():
            seen["valid loss (end)"].append(float(pd.read_csv(metrics).iloc[-1]["valid_loss"]))
    out = {}
    for name, values in seen.items():
        if len(values) != len(runs) or not runs:
            out[name] = NOT_RUN
        else:
            mean = sum(values) / len(values)
            out[name] = f"{mean:.3f}" if name.startswith("valid") else f"{mean:,.0f}"
    return out


def cut_short(runs: list[str]) -> str:
    """ "; cut by max_minutes: …" for the runs (seeds) whose training.json says the clock, not the update or epoch
    budget, ended them — the row's numbers are then not those of the protocol it describes."""
    cut = []
    for run in runs:
        path = Path(training_summary(run))
        summary = json.loads(path.read_text()) if path.exists() else {}
        if summary.get("stopped_by") == "max_minutes":
            budget = summary["budget"]
            planned = (
                f" of max_update {budget['max_update']:,}"
                if budget.get("max_update")
                else f", {summary['epochs_completed']} of max_epoch {budget['max_epoch']} epochs"
                if budget.get("max_epoch")
                else ""
            )
            cut.append(f"{Path(run).name} at update {summary['updates']:,}{planned}")
    return f"; cut by max_minutes: {', '.join(cut)}" if cut else ""


def value(score: dict, measure: str) -> float:
    if measure not in score:
        raise UserError(
            f"the score.json of {score.get('hyp', '?')} has no {measure} (scored by an older version); "
            f"delete it and rerun to rescore"
        )
    return score[measure]


def mean_scores(parts: list[list[dict]]) -> list[dict]:
    """Per seed, the mean BLEU and chrF of several test sets (empty unless every set has every seed)."""
    if not parts or any(len(p) != len(parts[0]) for p in parts):
        return []
    return [
        {key: sum(p[i][key] for p in parts) / len(parts) for key in ("bleu", "chrf") if all(key in p[i] for p in parts)}
        for i in range(len(parts[0]))
    ]


def load_scores(paths: dict) -> dict[str, list[dict]]:
    return {split: [json.loads(Path(p).read_text()) for p in files] for split, files in paths.items()}


def verdict(row: dict, tested: dict[str, tuple[float | None, str]], test: dict) -> str:
    """A row's verdict against the row it is compared with, per metric: better / worse at p < the table's p, else
    no significant difference, with the test and each p-value; — for a row compared with none."""
    if not row.get("compare_to"):
        return NOT_RUN
    level = test["p"]
    parts = []
    for metric, (p, way) in tested.items():
        if p is None:
            parts.append(f"{metric_name(metric)} not tested (the test needs more seeds)")
        elif way == "equal":  # sacrebleu's bootstrap gives identical scores its smallest p: no difference to test
            parts.append(f"{metric_name(metric)} no difference (the same score)")
        else:
            word = way if p < level else "no significant difference"
            parts.append(f"{metric_name(metric)} {word} (p {p_text(p, '= ')})")
    return f"vs {row['compare_to']}, {TESTS[test['test']]} at p < {level:g}: {'; '.join(parts)}"


def p_text(p: float, equals: str = "") -> str:
    """A p-value as a table prints it: three significant digits, "< 0.001" below that (the paired bootstrap's floor
    with its 1,000 resamples is 1/1001, which three digits would print as 0.000999)."""
    return "< 0.001" if p < 0.001 else f"{equals}{p:.3g}"


def metric_name(metric: str) -> str:
    """bleu → BLEU, chrf → chrF, news_bleu → news BLEU."""
    measure = measure_of(metric)
    name = {"bleu": "BLEU", "chrf": "chrF"}[measure]
    return name if metric == measure else f"{split_of(metric)} {name}"


def tested_direction(test: str, baseline: list[dict], system: list[dict], measure: str = "bleu") -> str:
    """better | worse | equal: which way the tested scores differ. The t-test compares the means over seeds; the
    bootstrap and the sign test compare the first seeds, whose difference may go the other way than the means'."""
    if test == "t_test":
        ours = seeds_summary([value(s, measure) for s in system])["mean"]
        theirs = seeds_summary([value(b, measure) for b in baseline])["mean"]
    else:
        ours, theirs = value(system[0], measure), value(baseline[0], measure)
    return "better" if ours > theirs else "worse" if ours < theirs else "equal"


def p_value(test: str, baseline: list[dict], system: list[dict], measure: str = "bleu") -> float | None:
    """The table's declared test of `system` against `baseline` (score.json records of each seed), on BLEU or
    chrF."""
    if test == "t_test":
        return t_test([value(b, measure) for b in baseline], [value(s, measure) for s in system])
    hyps, base = list(read_lines(system[0]["hyp"])), list(read_lines(baseline[0]["hyp"]))
    stacked = system[0].get("stacked_refs", False)
    refs = [stream for path in system[0]["refs"] for stream in reference_streams(path, len(hyps), stacked)]
    cfg = ScoreConfig.from_dict(system[0]["options"])
    if test == "sign_test":
        return sign_test(base, hyps, refs, cfg, measure)["p_value"]
    return paired_bootstrap(base, hyps, refs, cfg, measure=measure)["p_value"]


def run_speeds(row: dict) -> tuple[float | None, float | None]:
    """(training updates/s, decoding sentences/s) of a row's runs, averaged over seeds; None when not run.
    Training speed: the last metrics.csv record's update / wall minutes (validation included, as in a P40 log)."""
    train, decode = [], []
    for run in row.get("runs", []):
        metrics, score = Path(save_dir(run)) / "metrics.csv", Path(score_file(run, "test"))
        if metrics.exists():
            last = pd.read_csv(metrics).iloc[-1]
            train.append(last["update"] / max(last["minutes"] * 60, 1e-9))
        if score.exists():
            decode.append(json.loads(score.read_text()).get("decoding", {}).get("sentences_per_second"))
    mean = lambda xs: sum(xs) / len(xs) if xs and None not in xs else None  # noqa: E731
    return mean(train), mean(decode)


def add_speed_ratios(records: list[dict], rows: list[dict]) -> None:
    """Speed columns as ratios (hardware-independent) to the table's first row of ours, the paper's beside ours: a
    system quoted from other work (MLRF T3's first rows) has no speed the paper measured beside its own."""
    ours = [run_speeds(row) if row["state"] in RAN else (None, None) for row in rows]
    paper = [
        (row.get("paper", {}).get("train_steps_per_s"), row.get("paper", {}).get("decode_sents_per_s")) for row in rows
    ]
    reference = next((k for k, row in enumerate(rows) if row["state"] != "quoted"), 0)

    def ratio(speed: float | None, first: float | None) -> str:
        return f"{speed / first:.2f}×" if speed and first else NOT_RUN

    for k, name in enumerate(("train speed", "decode speed")):
        for record, p, o in zip(records, paper, ours, strict=True):
            record[f"{name} (paper)"] = ratio(p[k], paper[reference][k])
            record[f"{name} (ours)"] = ratio(o[k], ours[reference][k])


def cells(paper: float | None, scores: list[float], ran: bool) -> dict:
    """paper / ours (mean ± sd over seeds, n) / Δ for one metric of one row, plus the raw numbers for the CSV."""
    summary = seeds_summary(scores)
    ours = delta = NOT_RUN
    if ran and scores:
        spread = f" ± {summary['sd']:.2f}" if summary["n"] > 1 else ""
        ours = f"{summary['mean']:.2f}{spread} (n={summary['n']})"
        delta = f"{summary['mean'] - paper:+.2f}" if paper is not None else NOT_RUN
    return {
        "paper": f"{paper:.2f}" if paper is not None else NOT_RUN,
        "ours": ours,
        "delta": delta,
        "ours_mean": summary["mean"],
        "ours_sd": summary["sd"],
        "seeds": summary["n"],
    }


def write(spec: TableSpec | dict, out_prefix: str) -> pd.DataFrame:
    spec = TableSpec.of(spec)
    table = build(spec)
    with atomic_path(f"{out_prefix}.csv") as tmp:
        table.to_csv(tmp, index=False)
    kept = ("paper", "ours", "delta") if printed(spec) else ("ours",)  # a table of the user's own data: no paper
    shown = table[
        [
            c
            for c in table.columns
            if c == "row"
            or c.split(" ")[0] in kept
            or c == "verdict"
            or c.startswith(("params (", "train speed (", "decode speed (", "p vs"))
            or c in BUDGET
        ]
        + ["status"]
    ]
    lines = [f"# {spec.paper} {spec.table}: {spec.caption}".rstrip(), ""]
    if spec.scale:
        lines += [f"Scale: {spec.scale}", ""]
    lines += [legend(spec), ""]
    lines.append("| " + " | ".join(shown.columns) + " |")
    lines.append("|" + "|".join("---" for _ in shown.columns) + "|")
    lines += ["| " + " | ".join(str(v) for v in record) + " |" for record in shown.itertuples(index=False)]
    lines += notes(spec) + precision_lines(spec)
    with atomic_path(f"{out_prefix}.md") as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    caption = f"{spec.paper} {spec.table}: {spec.caption} {legend(spec)}"
    latex = shown.to_latex(
        index=False,
        caption=caption,
        label=f"tab:{spec.paper}-{spec.table}",
        longtable=len(shown) > 25,
        escape=True,
    )
    with atomic_path(f"{out_prefix}.tex") as tmp:
        Path(tmp).write_text(latex, encoding="utf-8")
    html = page(
        shown,
        title=f"{spec.paper} {spec.table}: {spec.caption}".strip(),
        caption_lines=[f"Scale: {spec.scale}" if spec.scale else "", legend(spec), *precision_lines(spec)],
        notes=[line.removeprefix("- ") for line in notes(spec)[3:]],
        not_run=NOT_RUN,
    )
    with atomic_path(f"{out_prefix}.html") as tmp:
        Path(tmp).write_text(html, encoding="utf-8")
    return table


def notes(spec: TableSpec) -> list[str]:
    """How each of our rows was run where it departs from, or reads, the paper: its experiment's description."""
    seen, out = set(), []
    for row in spec.rows:
        if row.get("note") and row["note"] not in seen:
            seen.add(row["note"])
            out.append(f"- {row['label']}: {row['note']}")
    return ["", "Notes (the rows' protocol, from their experiments' descriptions):", ""] + out if out else []


def precision_lines(spec: TableSpec) -> list[str]:
    """What our runs computed in (each run's training.json) beside what the paper trained in (config: the paper's
    `precision`): a number from bf16 on one machine and fp32 on another is not the same experiment."""
    used: dict[str, list[str]] = {}
    for row in spec.rows:
        for run in row.get("runs", []) if row["state"] in RAN else []:
            path = Path(training_summary(run))
            chosen = json.loads(path.read_text()).get("precision") if path.exists() else None
            if chosen:
                name = chosen.get("computes") or {"none": "fp32"}.get(chosen["amp"], chosen["amp"])
                measured = f"; measured {chosen['measured']}" if chosen.get("measured") else ""
                key = f"{name} (amp: {chosen['requested']}{measured}) on {chosen['device']}"
                used.setdefault(key, []).append(row["label"])
    out = []
    if used:
        rows = sum(len(labels) for labels in used.values())
        out.append(
            "Our runs' precision: "
            + "; ".join(
                key if len(labels) == rows else f"{key}: {', '.join(dict.fromkeys(labels))}"
                for key, labels in used.items()
            )
            + "."
        )
    if spec.precision:
        out.append(f"The paper's precision and ours: {spec.precision}")
    return [""] + out if out else []


def printed(spec: TableSpec) -> bool:
    """Whether any row has a number the paper printed (a comparison on the user's own data has none: its table
    shows no paper and Δ columns, which would be empty)."""
    return any(row.get("paper") for row in spec.rows)


def legend(spec: TableSpec) -> str:
    paper = "paper = printed in the paper (never ours); " if printed(spec) else ""
    text = (
        f"Metric: {', '.join(spec.metrics)}; {paper}ours = mean ± sd over seeds; {NOT_RUN} = not run, with "
        f"the reason in status."
    )
    test = significance(spec)
    if test:
        text += (
            f" {test['mark']} = better than the row it is compared with at p < {test['p']}"
            f" ({TESTS[test['test']]}){', as the paper marks it' if printed(spec) else ''}; p vs = that test's "
            f"p-value and which way the difference goes (better or worse)."
        )
        if spec.verdict:
            text += (
                f" verdict = each metric against the row it is compared with, by the same test: better or worse "
                f"at p < {test['p']}, else no significant difference ({NOT_RUN}: a row compared with "
                f"none)."
            )
    if spec.budget:
        text += (
            " Budget per row (mean over seeds): updates, sentence pairs and target tokens trained on, and the "
            "validation loss (bits per token) at the end — rows trained for different budgets are not a "
            "like-for-like comparison."
        )
    return text


def read_table_csv(path: str) -> pd.DataFrame:
    """A table's CSV as `lwnmt table` writes it; anything else (another file, an empty or non-UTF-8 one, a column
    missing) is one line naming the file and what it lacks."""
    expected = "expected a table CSV `lwnmt table` wrote (results/tables/<paper>/<table>.csv)"
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise UserError(
            f"{path}: not readable as CSV ({type(err).__name__}: {str(err).splitlines()[0]}); {expected}"
        ) from None
    metrics = [c.removeprefix("ours") for c in table.columns if c == "ours" or c.startswith("ours ")]
    needed = ["row", "status", *(f"{column}{suffix}" for suffix in metrics for column in ("paper", "delta"))]
    missing = [column for column in needed if column not in table.columns]
    if not metrics or missing:
        lacks = ", ".join(missing if metrics else ["ours", *missing])
        raise UserError(f"{path}: no column(s) {lacks}; {expected}")
    return table


def summary(table_csvs: list[str], out_prefix: str) -> pd.DataFrame:
    """Every row of every table in one place (results/summary.{md,csv}): paper, table, row, metric, the paper's
    number, ours, Δ and status — one line per row and metric. Paths: results/tables/<paper>/<table>.csv."""
    records = []
    for path in table_csvs:
        table = read_table_csv(path)
        paper, name = Path(path).parent.name, Path(path).stem
        metrics = [c.removeprefix("ours").strip() for c in table.columns if c == "ours" or c.startswith("ours ")]
        for record in table.to_dict("records"):
            for metric in metrics:
                suffix = f" {metric}" if metric else ""
                records.append(
                    {
                        "paper": paper,
                        "table": name,
                        "row": record["row"],
                        "metric": metric or "bleu",
                        "paper_value": record[f"paper{suffix}"],
                        "ours": record[f"ours{suffix}"],
                        "delta": record[f"delta{suffix}"],
                        "status": record["status"],
                    }
                )
    frame = pd.DataFrame.from_records(
        records, columns=["paper", "table", "row", "metric", "paper_value", "ours", "delta", "status"]
    )
    with atomic_path(f"{out_prefix}.csv") as tmp:
        frame.to_csv(tmp, index=False)
    ran = int((frame["ours"] != NOT_RUN).sum())
    lines = [
        "# All tables, every row",
        "",
        f"{ran} of {len(frame)} row × metric cells have our number; {NOT_RUN} = not run (status says why). "
        f"paper = printed in the paper; ours = mean ± sd over seeds; Δ = ours − paper.",
        "",
        "| paper | table | row | metric | paper | ours | Δ | status |",
        "|---|---|---|---|---:|---|---:|---|",
    ]
    lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in frame.itertuples(index=False)]
    with atomic_path(f"{out_prefix}.md") as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return frame
