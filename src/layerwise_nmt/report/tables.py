"""One paper table: per row the paper's printed number, ours (mean ± sd over seeds, n), Δ, and a status for rows
we did not run — never an empty or invented cell."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..config import metrics_of, split_of
from ..data.io import atomic_path
from ..score import seeds_summary

NOT_RUN = "—"


def build(spec: dict) -> pd.DataFrame:
    """spec: {metric: name or [names], rows: [{label, paper: {metric: value}, state: ok|blocked|quoted, reason,
    scores: {split: [score.json paths, one per seed]}}]}. One metric: columns paper/ours/delta; several: the same
    three per metric, suffixed with its name (e.g. "ours valid_bleu")."""
    metrics = metrics_of(spec)
    with_params = any("params_m" in row.get("paper", {}) for row in spec["rows"])
    records = []
    for row in spec["rows"]:
        scores = {split: [json.loads(Path(p).read_text()) for p in paths]
                  for split, paths in row.get("scores", {}).items()}
        record = {"row": row["label"]}
        ran = row["state"] == "ok" and any(scores.values())
        for metric in metrics:
            suffix = f" {metric}" if len(metrics) > 1 else ""
            record.update({f"{k}{suffix}": v for k, v in cells(row.get("paper", {}).get(metric),
                                                                 scores.get(split_of(metric), []), ran).items()})
        record["status"] = "ours" if ran else row.get("reason", "not run yet")
        if with_params:  # "#parameter" columns (LWC T3): the paper's printed M beside our model's exact count
            paper_params = row.get("paper", {}).get("params_m")
            ours_params = {s["decoding"]["params"] for split in scores.values() for s in split
                           if "params" in s.get("decoding", {})}
            record["params (paper)"] = f"{paper_params:.2f}M" if paper_params is not None else NOT_RUN
            record["params (ours)"] = f"{ours_params.pop() / 1e6:.2f}M" if len(ours_params) == 1 else NOT_RUN
        records.append(record)
    return pd.DataFrame.from_records(records)


def cells(paper: float | None, scores: list[dict], ran: bool) -> dict:
    """paper / ours (mean ± sd over seeds, n) / Δ for one metric of one row, plus the raw numbers for the CSV."""
    summary = seeds_summary([s["bleu"] for s in scores])
    ours = delta = NOT_RUN
    if ran and scores:
        spread = f" ± {summary['sd']:.2f}" if summary["n"] > 1 else ""
        ours = f"{summary['mean']:.2f}{spread} (n={summary['n']})"
        delta = f"{summary['mean'] - paper:+.2f}" if paper is not None else NOT_RUN
    return {"paper": f"{paper:.2f}" if paper is not None else NOT_RUN, "ours": ours, "delta": delta,
            "ours_mean": summary["mean"], "ours_sd": summary["sd"], "seeds": summary["n"]}


def write(spec: dict, out_prefix: str) -> pd.DataFrame:
    table = build(spec)
    with atomic_path(f"{out_prefix}.csv") as tmp:
        table.to_csv(tmp, index=False)
    shown = table[[c for c in table.columns if c == "row" or c.split(" ")[0] in ("paper", "ours", "delta")
                   or c.startswith("params (")] + ["status"]]
    lines = [f"# {spec['paper']} {spec['table']}: {spec.get('caption', '')}".rstrip(), ""]
    if spec.get("scale"):
        lines += [f"Scale: {spec['scale']}", ""]
    lines += [f"Metric: {', '.join(metrics_of(spec))}; paper = printed in the paper (never ours); "
              f"ours = mean ± sd over seeds; {NOT_RUN} = not run, with the reason in status.", ""]
    lines.append("| " + " | ".join(shown.columns) + " |")
    lines.append("|" + "|".join("---" for _ in shown.columns) + "|")
    lines += ["| " + " | ".join(str(v) for v in record) + " |" for record in shown.itertuples(index=False)]
    with atomic_path(f"{out_prefix}.md") as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return table
