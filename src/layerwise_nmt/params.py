"""Exact parameter counts of the experiments' models, beside the counts the papers print."""

from __future__ import annotations

import torch

from . import UserError
from . import config as cfg
from .data.vocab import load_pair
from .models import MODELS, build
from .models.transformer import count_parameters


def vocab_sizes(e: dict) -> tuple[int, int] | None:
    """From the task's prepared vocabularies, when they exist."""
    try:
        src, tgt = load_pair(cfg.bin_dir(e["task"], e["vocab"]), e["src"], e["tgt"])
    except FileNotFoundError:
        return None
    return len(src), len(tgt)


def table_rows_of(config: dict) -> dict[str, list[tuple[str, str, str, float | None]]]:
    rows: dict[str, list] = {}
    for paper, spec in config.get("papers", {}).items():
        for table, tspec in spec["tables"].items():
            for row in tspec["rows"]:
                if "experiment" in row:
                    rows.setdefault(row["experiment"], []).append(
                        (paper, table, row["label"], row.get("paper", {}).get("params_m")))
    return rows


def parameter_rows(config: dict, experiments: list[str], vocab: tuple[int, int] | None) -> list[dict]:
    where = table_rows_of(config)
    out = []
    for name in experiments:
        if name not in config.get("experiments", {}):
            raise UserError(f"unknown experiment {name!r}; `lwnmt params` with no name lists them all")
        e = cfg.experiment(config, name)
        sizes = vocab or vocab_sizes(e)
        record = {"experiment": name, "model": e["model"], "params": None, "note": "", "other_readings": {},
                  "vocab": f"{sizes[0]}/{sizes[1]}" if sizes else "—"}
        if e["model"] not in MODELS:
            record["note"] = "not implemented"
        elif sizes is None:
            record["note"] = "needs --vocab"
        else:
            try:
                arch = {**e["arch"], "src_vocab": sizes[0], "tgt_vocab": sizes[1]}
                with torch.device("meta"):  # counted, never allocated: a 200M-parameter model in milliseconds
                    model = build(e["model"], arch)
                    record["params"] = count_parameters(model)
                    record["other_readings"] = {
                        reading: count_parameters(build(e["model"], {**arch, **overrides}))
                        for reading, overrides in model.config.other_readings().items()}
            except UserError as err:  # e.g. a tied model asked about separate vocabulary sizes
                record["note"] = str(err)
        for paper, table, label, params_m in where.get(name, [("", "", "", None)]):
            out.append({**record, "paper": paper, "table": table, "row": label, "paper_params": params_m})
    return out
