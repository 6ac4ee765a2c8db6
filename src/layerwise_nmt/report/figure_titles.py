"""A figure's title in words, as a paper's figure reads: what is compared, on what data, at what budget — from the
figure spec's rows (each runnable row's `trained`: dataset, language pair, updates or epochs, warm start)."""

from __future__ import annotations

import textwrap

from ..grid.reports import ATTENTION_SENTENCE
from ..job_specs import FIGURE_METRIC, FigureSpec

WHAT = {
    "accuracy_curves": "Token accuracy while training (train dashed, validation solid)",
    "length_buckets": "BLEU by source sentence length",
    "aggregation_shares": "Share of each input in the encoder's aggregation nodes",
    "attention": "Attention weights on one test sentence",
    "validation_curves": "Validation {metric} while training",
}
METRIC_WORDS = {"loss": "loss", "accuracy": "token accuracy", "bleu": "BLEU"}
WIDTH = 90  # characters a 7-inch figure's title holds at 10 pt
SHOUTED = ("iwslt", "wmt", "nist")  # corpus names the papers write in capitals


def title(spec: FigureSpec) -> str:
    """Two lines: "<what>: <row> vs <row>" and "<data> · <budget>"."""
    what = (
        WHAT.get(spec.kind, "").format(metric=METRIC_WORDS[spec.metric or FIGURE_METRIC])
        or f"BLEU by {spec.xlabel or 'setting'}"
    )
    if spec.kind == "attention" and spec.rows:
        what = f"Attention weights on test sentence {spec.rows[0].get('sentence', ATTENTION_SENTENCE) + 1}"
    labels = [row["label"] for row in spec.rows]
    if spec.kind == "sweep":  # one curve per series (the swept model, its baseline)
        labels = list(dict.fromkeys(row.get("series") or row["label"] for row in spec.rows))
    if spec.kind == "delta_sweep":  # the legend names the methods; the baselines are the zero line
        what = f"Each method's BLEU gain over the baseline, by {spec.xlabel or 'setting'}"
    compared = (
        f"{what}: {' vs '.join(labels)}"
        if spec.kind in ("accuracy_curves", "validation_curves", "length_buckets", "sweep")
        else what
        if spec.kind == "delta_sweep"
        else what
        if len(labels) != 1
        else f"{what}: {labels[0]}"
    )
    trained = [row for row in spec.rows if row.get("trained")]
    lines = [compared] + ([f"{data(trained)} · {budget(spec.rows, trained)}"] if trained else [])
    return "\n".join(textwrap.fill(line, WIDTH) for line in lines)


def data(rows: list[dict]) -> str:
    names = dict.fromkeys(corpus(row["trained"]) for row in rows)
    return ", ".join(names)


def corpus(trained: dict) -> str:
    """ "Multi30k De→En", "IWSLT14 De→En", "WMT14 En→De" from the dataset's name and the pair."""
    name = trained["dataset"].split("-")[0]
    name = name.upper() if name.startswith(SHOUTED) else name[:1].upper() + name[1:]
    return f"{name} {trained['src'].capitalize()}→{trained['tgt'].capitalize()}"


def budget(rows: list[dict], trained: list[dict]) -> str:
    """ "1,000 updates each", or per row: "baseline 1,000 updates, GCA full model +300 updates from baseline"."""
    labels = {row.get("experiment"): row["label"] for row in rows}
    each = [budget_of(row["trained"], labels) for row in trained]
    if len(set(each)) == 1:
        return f"{each[0]} each" if len(trained) > 1 else each[0]
    return ", ".join(f"{row['label']} {words}" for row, words in zip(trained, each, strict=True))


def budget_of(trained: dict, labels: dict) -> str:
    if trained.get("max_update"):
        words = f"{trained['max_update']:,} updates"
    elif trained.get("max_epoch"):
        words = f"up to {trained['max_epoch']} epochs"
    else:
        words = "no update limit"
    start = trained.get("warm_start")
    return f"+{words} from {labels.get(start, start)}" if start else words
