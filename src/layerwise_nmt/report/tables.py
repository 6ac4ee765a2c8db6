"""One paper table: per row the paper's printed number, ours (mean ± sd over seeds, n), Δ, and a status for rows
we did not run — never an empty or invented cell."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..data.io import atomic_path
from ..score import seeds_summary

NOT_RUN = "—"


def build(spec: dict) -> pd.DataFrame:
    """spec: {metric, rows: [{label, paper: {metric: value}, state: ok|blocked|quoted, reason, scores: [paths]}]}"""
    metric = spec.get("metric", "bleu")
    with_params = any("params_m" in row.get("paper", {}) for row in spec["rows"])
    records = []
    for row in spec["rows"]:
        paper = row.get("paper", {}).get(metric)
        scores = [json.loads(Path(p).read_text()) for p in row.get("scores", [])]
        values = [s["bleu"] for s in scores]
        summary = seeds_summary(values)
        if row["state"] == "ok" and values:
            spread = f" ± {summary['sd']:.2f}" if summary["n"] > 1 else ""
            ours = f"{summary['mean']:.2f}{spread} (n={summary['n']})"
            delta = f"{summary['mean'] - paper:+.2f}" if paper is not None else NOT_RUN
            status = "ours"
        else:
            ours, delta = NOT_RUN, NOT_RUN
            status = row.get("reason", "not run yet")
        record = {"row": row["label"], "paper": f"{paper:.2f}" if paper is not None else NOT_RUN,
                  "ours": ours, "delta": delta, "status": status,
                  "ours_mean": summary["mean"], "ours_sd": summary["sd"], "seeds": summary["n"]}
        if with_params:  # "#parameter" columns (LWC T3): the paper's printed M beside our model's exact count
            paper_params = row.get("paper", {}).get("params_m")
            ours_params = {s["decoding"]["params"] for s in scores if "params" in s.get("decoding", {})}
            record["params (paper)"] = f"{paper_params:.2f}M" if paper_params is not None else NOT_RUN
            record["params (ours)"] = f"{ours_params.pop() / 1e6:.2f}M" if len(ours_params) == 1 else NOT_RUN
        records.append(record)
    return pd.DataFrame.from_records(records)


def write(spec: dict, out_prefix: str) -> pd.DataFrame:
    table = build(spec)
    with atomic_path(f"{out_prefix}.csv") as tmp:
        table.to_csv(tmp, index=False)
    shown = table[["row", "paper", "ours", "delta"] + [c for c in table.columns if c.startswith("params (")]
                  + ["status"]]
    lines = [f"# {spec['paper']} {spec['table']}: {spec.get('caption', '')}".rstrip(), ""]
    if spec.get("scale"):
        lines += [f"Scale: {spec['scale']}", ""]
    lines += [f"Metric: {spec.get('metric', 'bleu')}; paper = printed in the paper (never ours); "
              f"ours = mean ± sd over seeds; {NOT_RUN} = not run, with the reason in status.", ""]
    lines.append("| " + " | ".join(shown.columns) + " |")
    lines.append("|" + "|".join("---" for _ in shown.columns) + "|")
    lines += ["| " + " | ".join(str(v) for v in record) + " |" for record in shown.itertuples(index=False)]
    with atomic_path(f"{out_prefix}.md") as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return table
