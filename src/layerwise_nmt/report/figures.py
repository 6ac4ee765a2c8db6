"""The papers' figures, regenerated from our runs (PNG + PDF), with the paper's printed values overlaid when any.

A figure spec (resolved by the workflow from config `papers.<paper>.figures.<name>`):
    {paper, figure, kind, caption, xlabel, rows: [{label, series, x, baseline, paper, metrics, scores, state}]}
kinds:
    accuracy_curves  train (dashed: the mean of the updates since the previous validation) and valid (solid) token
                     accuracy at each validation, one colour per row (MLRF F4)
    validation_curves  the validation loss, accuracy or BLEU (`metric`) at each validation, one line per row
    sweep            BLEU against x, one line per series; `baseline` rows are dashed horizontal lines (MLRF F3,
                     LWC T4)
    delta_sweep      each method's BLEU gain over the row it is compared with (`compare_to`: the baseline, or the
                     control, of the same swept value) against the value (`x`), one line per `series`, mean ± sd
                     over seeds (seed k against seed k), a zero line (a `compare:` sweep)
    length_buckets   BLEU by source-length bucket (score.buckets), bars per row, on a second axis each row's gain
                     over the row it is compared with (`compare_to`, from the paper's tables; else the first row)
                     (GCA F3, Dou F4)
    aggregation_shares  Eq. 11's share of each input in each encoder aggregation node of a trained model (Dou F5)
    attention        one test sentence's attention maps in trained models (LWC F2-4, MLRF F5)
The last two draw what `figure_readouts.py` read out of the models (rows' `inspection` JSON): reports never load models.
Rows that did not run are listed under the plot with their reason, never drawn.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..data.io import atomic_path  # noqa: E402
from ..job_specs import FIGURE_METRIC, FigureSpec  # noqa: E402
from ..scoring.score import seeds_summary  # noqa: E402
from .figure_titles import title  # noqa: E402


def accuracy_curves(spec: FigureSpec, ax) -> pd.DataFrame:
    drawn = []
    for i, row in enumerate(r for r in spec.rows if r.get("metrics")):
        # every record is a measurement at its update (a partial one: the budget ended mid-epoch); a resumed run
        # may record an update twice, the later record wins
        history = pd.read_csv(row["metrics"]).drop_duplicates("update", keep="last").sort_values("update")
        colour = f"C{i}"
        ax.plot(history["update"], 100 * history["train_accuracy"], "--", color=colour, label=f"{row['label']} train")
        ax.plot(
            history["update"],
            100 * history["valid_accuracy"],
            "-",
            marker="o",
            markersize=3,
            color=colour,
            label=f"{row['label']} valid",
        )
        drawn.append(history[["epoch", "update", "train_accuracy", "valid_accuracy"]].assign(row=row["label"]))
    ax.set_xlabel("update")
    ax.set_ylabel("token accuracy (%)")
    return pd.concat(drawn) if drawn else pd.DataFrame(columns=["row", "epoch", "update"])


VALIDATION = {
    "loss": ("valid_loss", 1, "validation loss (bits per target token)"),
    "accuracy": ("valid_accuracy", 100, "validation token accuracy (%)"),
    "bleu": ("valid_bleu", 1, "validation BLEU (subword units, beam valid_beam)"),
}


def validation_curves(spec: FigureSpec, ax) -> pd.DataFrame:
    """One line per row: the validation loss, accuracy or BLEU (spec `metric`) at every validation of its run
    (metrics.csv; validate_interval_updates adds points within epochs), against the update."""
    column, scale, label = VALIDATION[spec.metric or FIGURE_METRIC]
    drawn = []
    for i, row in enumerate(r for r in spec.rows if r.get("metrics")):
        history = pd.read_csv(row["metrics"]).drop_duplicates("update", keep="last").sort_values("update")
        values = pd.to_numeric(history.get(column, pd.Series(dtype=float)), errors="coerce")
        if values.isna().all():  # validation BLEU is computed only when the run was asked to (train.valid_bleu)
            row["not_drawn"] = f"its metrics.csv has no {column} (train: {{valid_bleu: true}} computes it)"
            continue
        points = history.assign(value=values * scale)[["update", "value"]].dropna()
        ax.plot(points["update"], points["value"], "-", marker="o", markersize=3, color=f"C{i}", label=row["label"])
        drawn.append(points.assign(row=row["label"], metric=column))
    ax.set_xlabel("update")
    ax.set_ylabel(label)
    return (
        pd.concat(drawn)[["row", "metric", "update", "value"]]
        if drawn
        else pd.DataFrame(columns=["row", "metric", "update", "value"])
    )


def sweep(spec: FigureSpec, ax) -> pd.DataFrame:
    series: dict[str, list] = {}
    drawn = []
    for row in spec.rows:
        series.setdefault(row.get("series", ""), []).append(row)
    for i, (name, rows) in enumerate(series.items()):
        colour = f"C{i}"
        ours = [
            (row.get("x"), seeds_summary([json.loads(Path(p).read_text())["bleu"] for p in row["scores"]]))
            for row in rows
            if row.get("scores")
        ]
        drawn += [
            {"series": name, "row": row["label"], "x": row.get("x"), "paper": row.get("paper")}
            | {"ours_mean": s["mean"], "ours_sd": s["sd"], "seeds": s["n"]}
            for row, (_, s) in zip([r for r in rows if r.get("scores")], ours, strict=True)
        ]
        baseline = [row for row in rows if row.get("baseline")]
        if baseline and ours:
            ax.axhline(ours[0][1]["mean"], linestyle="--", color=colour, label=f"{name or baseline[0]['label']}")
        elif ours:
            xs, summaries = zip(*sorted(ours, key=lambda item: item[0]), strict=True)
            ax.errorbar(
                xs,
                [s["mean"] for s in summaries],
                yerr=[s["sd"] for s in summaries],
                marker="o",
                color=colour,
                capsize=3,
                label=f"{name} (ours)".strip(),
            )
        printed = sorted((row["x"], row["paper"]) for row in rows if row.get("paper") is not None and "x" in row)
        if printed:
            xs, values = zip(*printed, strict=True)
            ax.plot(
                xs, values, linestyle=":", marker="s", fillstyle="none", color=colour, label=f"{name} (paper)".strip()
            )
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel("BLEU")
    return pd.DataFrame.from_records(drawn, columns=["series", "row", "x", "paper", "ours_mean", "ours_sd", "seeds"])


def delta_sweep(spec: FigureSpec, ax) -> pd.DataFrame:
    """Each row that names a `compare_to` as a point of its series' line: its BLEU minus that row's, seed k against
    seed k over the seeds both ran, mean ± sd; numbers on the x axis where every value is one, else the values in
    the order given."""
    columns = ["series", "row", "x", "compare_to", "delta_mean", "delta_sd", "seeds", "ours_mean", "theirs_mean"]
    by_experiment = {row.get("experiment"): row for row in spec.rows}
    drawn = []
    for row in spec.rows:
        if not (row.get("compare_to") and row.get("scores")):
            continue
        other = by_experiment.get(row["compare_to"]) or {}
        if not other.get("scores"):
            row["not_drawn"] = f"its baseline {row['compare_to']} has no scores (not run yet)"
            continue
        ours, theirs = (_bleus_by_seed(r) for r in (row, other))
        both = [seed for seed in ours if seed in theirs]
        if not both:
            row["not_drawn"] = (
                f"no seed in common with its baseline {row['compare_to']} ({_seeds(ours)} vs {_seeds(theirs)})"
            )
            continue
        gain = seeds_summary([ours[seed] - theirs[seed] for seed in both])
        drawn.append(
            {
                "series": row.get("series") or row["label"],
                "row": row["label"],
                "x": row.get("x"),
                "compare_to": row["compare_to"],
                "delta_mean": gain["mean"],
                "delta_sd": gain["sd"],
                "seeds": gain["n"],
                "ours_mean": seeds_summary([ours[seed] for seed in both])["mean"],
                "theirs_mean": seeds_summary([theirs[seed] for seed in both])["mean"],
            }
        )
    table = pd.DataFrame.from_records(drawn, columns=columns)
    values = list(dict.fromkeys(row.get("x") for row in spec.rows))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    where = (lambda v: v) if numeric else {v: i for i, v in enumerate(values)}.get
    for i, (series, points) in enumerate(table.groupby("series", sort=False)):
        points = points.sort_values("x", key=lambda xs: xs.map(where))
        ax.errorbar(
            points["x"].map(where),
            points["delta_mean"],
            yerr=points["delta_sd"],
            marker="o",
            capsize=3,
            color=f"C{i}",
            label=series,
        )
    ax.axhline(0, color="grey", linewidth=0.8)
    if numeric:
        ax.set_xticks(sorted(v for v in values if v is not None))
    else:
        ax.set_xticks(range(len(values)), [str(v) for v in values])
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel("BLEU gain over the baseline of the same value")
    return table


def _bleus_by_seed(row: dict) -> dict[int, float]:
    """{seed: BLEU}; a row without its `seeds` (an older spec) holds seeds 1, 2, … in order."""
    seeds = row.get("seeds") or range(1, len(row["scores"]) + 1)
    return {seed: json.loads(Path(p).read_text())["bleu"] for seed, p in zip(seeds, row["scores"], strict=True)}


def _seeds(bleus: dict[int, float]) -> str:
    return "seeds " + ", ".join(map(str, bleus)) if bleus else "no seed"


def length_buckets(spec: FigureSpec, ax) -> pd.DataFrame:
    """BLEU per source-length bucket (mean over seeds), one bar group per bucket, and on a second axis each row's
    gain over the row it is compared with (its `compare_to`: a warm start's control trained as long; else the first
    row) (GCA Figure 3, Dou Figure 4)."""
    rows = [row for row in spec.rows if row.get("scores")]
    drawn = []
    for row in rows:
        per_seed = [json.loads(Path(p).read_text())["buckets"] for p in row["scores"]]
        for i, bucket in enumerate(per_seed[0]):
            # an empty bucket (no test sentence that long) has no BLEU: drawn as a gap, not a crash
            summary = seeds_summary([seed[i]["bleu"] for seed in per_seed if seed[i]["bleu"] is not None])
            drawn.append(
                {
                    "row": row["label"],
                    "bucket": bucket["bucket"],
                    "sentences": bucket["sentences"],
                    "ours_mean": summary["mean"],
                    "ours_sd": summary["sd"],
                    "seeds": summary["n"],
                }
            )
    columns = ["row", "bucket", "sentences", "ours_mean", "ours_sd", "seeds", "gain", "gain_over"]
    table = pd.DataFrame.from_records(drawn, columns=columns).astype({"gain_over": object})
    if table.empty:
        return table
    buckets = list(dict.fromkeys(table["bucket"]))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        values = table[table["row"] == row["label"]].set_index("bucket").reindex(buckets)
        ax.bar(
            [b + i * width for b in range(len(buckets))], values["ours_mean"], width, color=f"C{i}", label=row["label"]
        )
    ax.set_xticks(
        [b + width * (len(rows) - 1) / 2 for b in range(len(buckets))],
        [f"{b}\n({n})" for b, n in zip(buckets, table.groupby("bucket", sort=False)["sentences"].first(), strict=True)],
    )
    ax.set_xlabel("source length in words (sentences)")
    ax.set_ylabel("BLEU")
    by_experiment = {row.get("experiment"): row for row in spec.rows}
    # a row compared with one that did not run has no gain to draw (that row is named as not drawn)
    candidates = [
        (i, row, by_experiment.get(row["compare_to"]) if row.get("compare_to") else rows[0])
        for i, row in enumerate(rows)
    ]
    pairs = [
        (i, row, other) for i, row, other in candidates if other is not None and other is not row and other in rows
    ]
    if not pairs:
        return table

    def bleu(row):
        return table[table["row"] == row["label"]].set_index("bucket").reindex(buckets)["ours_mean"]

    gain = ax.twinx()
    for k, (_, row, other) in enumerate(pairs):  # in black and greys: a line the colour of a bar hides in it
        difference = bleu(row) - bleu(other)
        gain.plot(
            [b + width * (len(rows) - 1) / 2 for b in range(len(buckets))],
            difference.to_numpy(),
            ("-", "--", ":")[k % 3],
            marker="Dos"[k % 3],
            color=str(min(0.6, 0.3 * k)),
            label=f"gain of {row['label']} over {other['label']}",
        )
        where = table["row"] == row["label"]
        table.loc[where, "gain"] = table.loc[where, "bucket"].map(difference).to_numpy()
        table.loc[where, "gain_over"] = other["label"]
    gain.axhline(0, color="grey", linewidth=0.5)
    references = {other["label"] for _, _, other in pairs}
    gain.set_ylabel(
        f"BLEU gain over {references.pop()}" if len(references) == 1 else "BLEU gain over each row's comparison"
    )
    return table


def aggregation_shares(spec: FigureSpec, ax) -> pd.DataFrame:
    """Dou Figure 5: the share s_j (Eq. 11) of each input in each encoder aggregation node of a trained model, one
    heat map per row side by side (columns sum to 1); empty cells where a node has fewer inputs."""
    rows = [row for row in spec.rows if row.get("inspection")]
    drawn = [{"row": row["label"], **share} for row in rows for share in _inspected(row)["shares"]]
    table = pd.DataFrame.from_records(drawn, columns=["row", "node", "input", "share"])
    if table.empty:
        return table
    inputs = ["H^{2i}", "H^{2i-1}", "Ĥ^{i-1}"]
    grid = [
        table[table["row"] == row["label"]].pivot(index="input", columns="node", values="share").reindex(inputs)
        for row in rows
    ]
    joined = pd.concat(grid, axis=1)
    image = ax.imshow(joined.to_numpy(dtype=float), cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.set_yticks(range(len(inputs)), [f"${name}$" for name in inputs])
    ax.set_xticks(range(joined.shape[1]), [f"${c}$" for c in joined.columns])
    for (y, x), value in pd.DataFrame(joined.to_numpy(dtype=float)).stack().items():
        if pd.notna(value):  # a node with fewer inputs leaves its cell empty
            ax.text(
                x, y, f"{value:.2f}", ha="center", va="center", color="white" if value > 0.5 else "black", fontsize=8
            )
    edges = [g.shape[1] for g in grid]
    for k, row in enumerate(rows if len(rows) > 1 else []):  # a single model is named in the title instead
        start = sum(edges[:k])
        ax.text(start + edges[k] / 2 - 0.5, -0.75, row["label"], ha="center", fontsize=9)
        if k:
            ax.axvline(start - 0.5, color="red", linewidth=1.5)
    ax.figure.colorbar(image, ax=ax, label="share of the node's first FF weights")
    ax.set_xlabel("aggregation node (encoder)")
    return table


def attention_maps(spec: FigureSpec, ax) -> pd.DataFrame:
    """One sentence's attention in a trained model, one heat map per row (inspection.attention: a decoder
    cross-attention, LWC's mixed attention or an MLRF fusion's layer attention)."""
    rows = [row for row in spec.rows if row.get("inspection")]
    fig = ax.figure
    ax.set_axis_off()
    if not rows:
        return pd.DataFrame(columns=["row", "i", "y", "j", "x", "weight"])
    axes = fig.subplots(1, len(rows), squeeze=False, gridspec_kw={"wspace": 0.45})[0]
    drawn = []
    for row, axis in zip(rows, axes, strict=True):
        seen = _inspected(row)
        xs, ys = seen["xs"], seen["ys"]
        image = axis.imshow(seen["grid"], cmap="Greys", vmin=0, aspect="auto")
        fig.colorbar(image, ax=axis, fraction=0.04)
        axis.set_xlabel(seen["x_label"], fontsize=8)
        axis.set_ylabel(seen["y_label"], fontsize=8)
        short = all(SUPERSCRIPT.match(x) for x in xs)  # layer names: upright and legible, not words on end
        axis.set_xticks(
            range(len(xs)), [tick_label(x) for x in xs], rotation=0 if short else 90, fontsize=9 if short else 6
        )
        axis.set_yticks(range(len(ys)), [tick_label(y) for y in ys], fontsize=6)
        if seen["split"] is not None:
            axis.axvline(seen["split"] - 0.5, color="red", linewidth=1)
        axis.set_title(f"{row['label']}\n{seen['module']}", fontsize=8)
        drawn += [
            {"row": row["label"], "i": i, "y": y, "j": j, "x": x, "weight": seen["grid"][i][j]}
            for i, y in enumerate(ys)
            for j, x in enumerate(xs)
        ]
    return pd.DataFrame.from_records(drawn)


SUPERSCRIPT = re.compile(r"^([A-Za-zĤ])\^\{?([\w+-]+)\}?$")  # "z^0", "H^{2i-1}": a layer's output


def tick_label(text: str) -> str:
    """A layer name as mathtext ($z^0$: a superscript, not the text "z^0"); a word as itself (a "$" in it literal,
    not the start of mathtext)."""
    found = SUPERSCRIPT.match(text)
    if found:
        return f"${found.group(1).replace('Ĥ', chr(92) + 'hat{H}')}^{{{found.group(2)}}}$"
    return text.replace("$", r"\$")


def _inspected(row: dict) -> dict:
    return json.loads(Path(row["inspection"]).read_text(encoding="utf-8"))


KINDS = {
    "accuracy_curves": accuracy_curves,
    "validation_curves": validation_curves,
    "sweep": sweep,
    "delta_sweep": delta_sweep,
    "length_buckets": length_buckets,
    "aggregation_shares": aggregation_shares,
    "attention": attention_maps,
}


def write(spec: FigureSpec | dict, out_prefix: str) -> list[str]:
    """Draw the figure; writes <out_prefix>.png, .pdf and .csv (the numbers drawn) and returns the rows it could not
    draw, with reasons."""
    fig, data, missing = draw(FigureSpec.of(spec))
    with atomic_path(f"{out_prefix}.csv") as tmp:
        data.to_csv(tmp, index=False)
    for ext in ("png", "pdf"):
        with atomic_path(f"{out_prefix}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return missing


def draw(spec: FigureSpec | dict):
    """(the figure, the numbers drawn, the rows not drawn with their reasons): titled in words, its legend below
    the plot, where it hides no data, and what is absent said under it."""
    spec = FigureSpec.of(spec)
    maps = sum(bool(row.get("inspection")) for row in spec.rows)  # one heat map per row that ran
    wide = spec.kind == "attention" and maps > 1
    fig, ax = plt.subplots(figsize=(6 * maps, 5.5) if wide else (7, 4.2))
    data = KINDS[spec.kind](spec, ax)
    missing = [
        f"{row['label']}: {row.get('reason') or 'not run yet'}"
        for row in spec.rows
        if not (row.get("metrics") or row.get("scores") or row.get("inspection"))
    ]
    missing += [f"{row['label']}: {row['not_drawn']}" for row in spec.rows if row.get("not_drawn")]
    if spec.kind == "attention":
        below_heading(fig, fig.suptitle(title(spec), fontsize=10))
    else:
        ax.set_title(title(spec), fontsize=10, pad=24 if spec.kind == "aggregation_shares" else 6)
    ax.grid(alpha=0.3)
    bottom = legend_below(fig, ax)
    if missing:  # say what is absent instead of drawing it
        fig.text(0.01, bottom - 0.02, "not drawn — " + "; ".join(missing), fontsize=6, wrap=True, va="top")
    if spec.notice:  # a rehearsal's figure must not pass for a result
        fig.text(0.5, 0.5, "REHEARSAL", fontsize=40, color="red", alpha=0.25, rotation=30, ha="center", va="center")
        fig.text(0.01, 0.99, spec.notice, fontsize=7, color="red", va="top")
    return fig, data, missing


def below_heading(fig, heading, gap: float = 6.0) -> None:
    """Lower the panels until the highest of their titles ends `gap` points under the figure's heading (the
    suptitle, at a fixed height, knows nothing of the panels' two-line titles)."""
    renderer = fig.canvas.get_renderer()
    tops = [axis.title.get_window_extent(renderer).y1 for axis in fig.axes if axis.get_title()]
    if not tops:
        return
    overlap = max(tops) + gap * fig.dpi / 72 - heading.get_window_extent(renderer).y0
    if overlap > 0:
        fig.subplots_adjust(top=fig.subplotpars.top - overlap / fig.bbox.height)


def legend_below(fig, ax) -> float:
    """One legend for the plot and its twin axis (the gain), under the axes' labels, and the lowest point drawn
    (figure coordinates) for what goes under it."""
    twins = [other for other in fig.axes if other is not ax and other.bbox.bounds == ax.bbox.bounds]
    handles: list = []
    labels: list[str] = []
    for axis in [ax] + twins:
        h, lab = axis.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    renderer = fig.canvas.get_renderer()
    boxes = [box for box in (axis.get_tightbbox(renderer) for axis in fig.axes) if box is not None]
    lowest = fig.transFigure.inverted().transform((0, min(box.y0 for box in boxes)))[1] if boxes else 0.0
    if not handles:
        return lowest
    legend = fig.legend(
        handles,
        labels,
        loc="upper center",
        fontsize=8,
        frameon=False,
        ncol=min(len(labels), 2 if max(map(len, labels)) > 25 else 3),
        bbox_to_anchor=(ax.get_position().x0 + ax.get_position().width / 2, lowest - 0.01),
    )
    return fig.transFigure.inverted().transform((0, legend.get_window_extent(renderer).y0))[1]
