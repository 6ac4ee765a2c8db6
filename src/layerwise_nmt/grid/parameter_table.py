"""Exact parameter counts of the experiments' models, beside the counts the papers print: in closed form from
each model's settings (models/sizes.py, equal to the built model's count), so nothing is built and no torch needed;
a model of the config's own (`models:`) is built on the meta device and counted, its memory never allocated."""

from __future__ import annotations

from .. import CONFIG_ERROR, UserError
from ..data.vocab import load_pair
from ..models import MODELS, UserModel, count_built
from ..models import sizes as model_sizes
from .experiments import experiment
from .layout import bin_dir


def vocab_sizes(e: dict) -> tuple[int, int] | None:
    """From the task's prepared vocabularies, when they exist."""
    try:
        src, tgt = load_pair(bin_dir(e["task"], e["vocab"]), e["src"], e["tgt"])
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
                        (paper, table, row["label"], row.get("paper", {}).get("params_m"))
                    )
    return rows


def parameter_rows(config: dict, experiments: list[str], vocab: tuple[int, int] | None) -> list[dict]:
    where = table_rows_of(config)
    out = []
    for name in experiments:
        if name not in config.get("experiments", {}):
            raise UserError(f"unknown experiment {name!r}; `lwnmt params` with no name lists them all")
        e = experiment(config, name)
        sizes = vocab or vocab_sizes(e)
        record = {
            "experiment": name,
            "model": e["model"],
            "params": None,
            "note": "",
            "other_readings": {},
            "vocab": f"{sizes[0]}/{sizes[1]}" if sizes else "—",
        }
        own = UserModel.from_config(config, e["model"])
        if e["model"] not in MODELS and own is None:
            record["note"] = "not implemented"
        elif sizes is None:
            record["note"] = "needs --vocab"
        elif own is not None:  # no closed form: counted as built, on the meta device (its module imported here)
            arch = {**e["arch"], "src_vocab": sizes[0], "tgt_vocab": sizes[1]}
            record["params"] = count_built(e["model"], arch, own, f"config key experiments/{name}/arch")
        else:
            try:
                arch = {**e["arch"], "src_vocab": sizes[0], "tgt_vocab": sizes[1]}
                config_class = MODELS[e["model"]].config_class
                model_config = config_class.from_dict(dict(arch))
                record["params"] = model_sizes.count(e["model"], model_config)
                record["other_readings"] = {
                    reading: model_sizes.count(e["model"], config_class.from_dict({**arch, **overrides}))
                    for reading, overrides in model_config.other_readings().items()
                }
            except UserError as err:  # e.g. a tied model asked about separate vocabulary sizes
                record["note"] = str(err)
        for paper, table, label, params_m in where.get(name, [("", "", "", None)]):
            out.append({**record, "paper": paper, "table": table, "row": label, "paper_params": params_m})
    return out


def main() -> None:
    """`python -m layerwise_nmt.grid.parameter_table` with {config, experiments} as JSON on stdin: each experiment
    counted as `lwnmt params --vocab 64` counts it, or its error as the one line that command prints after its
    `lwnmt params: error:` (exit status CONFIG_ERROR, where a traceback's is 1). What the
    workflow's DAG runs to check the config's own models without importing them itself (grid/stage_checks.py)."""
    import json
    import sys

    request = json.load(sys.stdin)
    try:
        parameter_rows(request["config"], request["experiments"], (64, 64))
    except UserError as err:
        print(err, file=sys.stderr)
        sys.exit(CONFIG_ERROR)


if __name__ == "__main__":
    main()
