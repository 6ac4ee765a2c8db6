"""Each table and figure of the papers resolved against the runs: paper numbers, run states, and the score, metrics
and inspection files every row reads. The table and figure jobs get them as job specs (job_specs.py); report/
draws from them."""

from __future__ import annotations

from .. import UserError
from ..job_specs import FIGURE_METRIC, FigureSpec, TableSpec
from ..training.config import TRAIN_DEFAULTS
from .experiments import experiment
from .layout import RESULTS, bin_dir, data_path, experiment_dir, model_file, save_dir, score_file
from .load import get
from .papers import metrics_of, split_of
from .status import experiment_status

ATTENTION_SENTENCE = 0  # an attention figure's test sentence (0-based) when it names none


def paper_part(config, paper, kind, name):
    """config papers/<paper>/<kind>/<name>, or a one-line error listing what exists."""
    papers = config.get("papers", {})
    if paper not in papers:
        raise UserError(
            f"{RESULTS}/{kind}/{paper}/{name}: no paper {paper!r} in the config; expected one of "
            f"{', '.join(sorted(papers))}"
        )
    parts = papers[paper].get(kind, {})
    if name not in parts:
        raise UserError(
            f"{RESULTS}/{kind}/{paper}/{name}: paper {paper} has no {kind[:-1]} {name!r}; expected "
            f"one of {', '.join(sorted(parts)) or 'none'}"
        )
    return parts[name]


def table_spec(config, paper, table) -> TableSpec:
    """Rows resolved to (paper numbers, run state and reason, per split the score.json paths of every seed)."""
    spec = paper_part(config, paper, "tables", table)
    derived = spec.get("mean_of", {})  # metrics computed from others: no split of their own
    splits = sorted(
        {split_of(m) for m in metrics_of(spec) + [m for ms in derived.values() for m in ms] if m not in derived}
    )

    def score_paths(name):
        e = experiment(config, name)
        return {split: [score_file(experiment_dir(config, name, s), split) for s in e["seeds"]] for split in splits}

    rows = []
    for row in spec["rows"]:
        out = {"label": row["label"], "paper": row.get("paper", {})}
        if "experiment" in row:
            status = experiment_status(config, row["experiment"])
            out["state"], out["reason"] = status.state, status.reason
            out["note"] = " ".join(config["experiments"][row["experiment"]].get("description", "").split())
            if status.runnable:
                e = experiment(config, row["experiment"])
                out["scores"] = score_paths(e["name"])
                out["runs"] = [experiment_dir(config, e["name"], s) for s in e["seeds"]]
                if row.get("compare_to") and experiment_status(config, row["compare_to"]).runnable:
                    out["baseline_scores"] = score_paths(row["compare_to"])
                    out["compare_to"] = row["compare_to"]
        else:
            quoted = "quoted_from" in row
            out["state"] = "quoted" if quoted else "blocked"
            out["reason"] = f"quoted from {row['quoted_from']}" if quoted else row.get("not_run", "no experiment")
        rows.append(out)
    return TableSpec(
        paper=paper,
        table=table,
        caption=spec.get("caption", ""),
        scale=spec.get("scale", ""),
        metric=metrics_of(spec),
        speeds=spec.get("speeds", False),
        rows=rows,
        significance=spec.get("significance"),
        verdict=spec.get("verdict", False),
        mean_of=derived,
        budget=spec.get("budget", False),
        precision=config["papers"][paper].get("precision", ""),
    )


def report_caption(config, paper, kind, name):
    """A table's or figure's caption for the Snakemake report (reStructuredText: one paragraph)."""
    spec = paper_part(config, paper, kind, name)
    scale = f" Scale: {spec['scale']}." if spec.get("scale") else ""
    title = config["papers"][paper].get("title", paper)
    return " ".join(f"**{title}, {name}.** {spec.get('caption', '')}{scale}".split())


def figure_spec(config, paper, figure) -> FigureSpec:
    """Rows resolved to run files (first seed): metrics.csv for curves (accuracy, validation), what `inspect` reads
    out of model.pt for aggregation shares and attention maps, every seed's test.score.json for sweeps and length
    buckets (each row with the experiment its gain is drawn over, `gain_references`)."""
    spec = paper_part(config, paper, "figures", figure)
    rows = []
    controls = gain_references(config, paper, figure, spec) if spec["kind"] == "length_buckets" else {}
    for index, row in enumerate(spec["rows"]):
        out = dict(row) | ({"compare_to": controls[index]} if controls.get(index) else {})
        status = experiment_status(config, row["experiment"])
        out["state"], out["reason"] = status.state, status.reason
        if status.runnable:
            e = experiment(config, row["experiment"])
            runs = [experiment_dir(config, e["name"], s) for s in e["seeds"]]
            out["trained"] = trained_on(config, e)
            if spec["kind"] in ("accuracy_curves", "validation_curves"):
                # metrics.csv is not an output of training (it must survive a failed job for resume): the model
                # stands for it, unless the models stayed on the machine that trained them (study_gpu.sh collect)
                out["metrics"] = f"{save_dir(runs[0])}/metrics.csv"
                out["needs"] = [out["metrics"] if config.get("models_elsewhere") else model_file(runs[0])]
            elif spec["kind"] in ("aggregation_shares", "attention"):
                out["inspection"] = f"{runs[0]}/inspect/{paper}.{figure}.{index}.json"
                out["needs"] = [out["inspection"]]
                out["inspect"] = {"kind": spec["kind"], "model": model_file(runs[0]), "options": {}}
                if spec["kind"] == "attention":  # the model teacher-forced on its own translation of one sentence
                    out["inspect"]["options"] = dict(
                        hypothesis=f"{runs[0]}/test.bpe",
                        src=e["src"],
                        tgt=e["tgt"],
                        data=bin_dir(e["task"], e["vocab"]),
                        module=row.get("module", ""),
                        source=data_path(e["task"], "bpe", f"test.{e['pair']}.{e['src']}"),
                        sentence=spec.get("sentence", ATTENTION_SENTENCE),
                    )
            else:
                out["scores"] = out["needs"] = [score_file(run, "test") for run in runs]
                out["seeds"] = list(e["seeds"])  # the figure pairs seed k of a row with seed k of its control
        rows.append(out)
    return FigureSpec(
        paper=paper,
        figure=figure,
        kind=spec["kind"],
        caption=spec.get("caption", ""),
        xlabel=spec.get("xlabel", ""),
        metric=spec.get("metric", FIGURE_METRIC),
        rows=rows,
        notice=get(config, "rehearsal/notice"),
    )


def gain_references(config, paper, figure, spec) -> dict[int, str]:
    """Per figure row (by index), the experiment its gain is drawn over: the row's own `compare_to`, else the one
    the paper's tables test it against; rows with neither are drawn against the first row. A row whose control
    the figure lacks is an error: drawn over the first row instead, a warm start's gain would count its extra
    updates as the method's."""
    tested: dict = {}
    for name, table in config["papers"][paper].get("tables", {}).items():
        for row in table.get("rows", []):
            if row.get("experiment") and row.get("compare_to"):
                tested.setdefault(row["experiment"], (row["compare_to"], f"table {name}"))
    drawn = {row["experiment"] for row in spec["rows"]}
    references = {}
    for index, row in enumerate(spec["rows"]):
        control, where = (
            (row["compare_to"], "its compare_to")
            if row.get("compare_to")
            else tested.get(row["experiment"], (None, ""))
        )
        if control is None or control == row["experiment"]:
            continue
        if control not in drawn:
            raise UserError(
                f"figure {paper}/{figure}, row {row['label']!r}: compared with {control} in {where}, "
                f"which the figure lacks; add a row with experiment {control} (its gain would be "
                f"drawn over the first row instead)"
            )
        references[index] = control
    return references


def trained_on(config, e):
    """What a figure's title says of a row's run: its data, and its budget (updates or epochs, warm start)."""
    task = config["tasks"][e["task"]]
    train = e.get("train", {})
    return {
        "dataset": task["dataset"],
        "src": e["src"],
        "tgt": e["tgt"],
        "max_update": train.get("max_update", TRAIN_DEFAULTS.max_update),
        "max_epoch": train.get("max_epoch", TRAIN_DEFAULTS.max_epoch),
        "warm_start": e.get("warm_start") if isinstance(e.get("warm_start"), str) else None,
    }
