"""A study row is its paper's row scaled down.

A study experiment names the row of config.yaml it scales down (`scaled_from:`). Every setting in which the two
differ, once both are resolved through the settings classes the jobs read, is either one that a scale-down must
change (the data, the width and depth, the budget in updates and what follows from it) or a departure the study
states with its reason (`departures: {arch/norm: why}`). Three relations between a method's row and its control's
are the paper's too: their peak lr's ratio, a continued run's budget against its parent's, and a warm-started
control's definition (the method's parent, for the method's budget). `check` refuses a difference without a reason;
`listing` prints them all (each study's page shows it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import UserError
from .experiments import experiment

# What a scale-down changes, and why: the keys (stage/setting) any study row may change without a word of its own.
SCALE_DOWN: dict[str, str] = {
    "task": "the study's data",
    "vocab": "the study's data (its task's vocabulary)",
    "score/*": "the study's test set and its metric",
    "decode/batch_size": "sentences per decoding batch: speed only",
    "average/num": "the averaging window, in the study's checkpoints",
    "average/by": "the averaging window, in the study's checkpoints",
    **dict.fromkeys(("arch/preset", "arch/d_model", "arch/d_ff", "arch/heads"), "the width"),
    **dict.fromkeys(("arch/encoder_layers", "arch/decoder_layers", "arch/layers"), "the depth"),
    **dict.fromkeys(
        (
            "train/max_tokens",
            "train/max_sentences",
            "train/update_freq",
            "train/max_update",
            "train/total_num_update",
            "train/max_epoch",
            "train/max_minutes",
            "train/patience",
            "train/final_model",
            "train/warmup_updates",
            "train/validate_interval_updates",
            "train/save_interval_updates",
            "train/keep_interval_updates",
            "train/keep_last_epochs",
            "train/log_interval",
        ),
        "the budget (batch and updates) and what follows from it: warm-up, stopping, checkpoints",
    ),
}
RELATIONS = ("relation/lr", "relation/continued_budget", "relation/control")


@dataclass(frozen=True)
class Difference:
    """One setting in which a study row differs from its paper's row, and why (None: no reason given)."""

    key: str
    ours: Any
    paper: Any
    reason: str | None
    scale_down: bool  # a change every scale-down makes (SCALE_DOWN), not a departure of this study's

    def line(self) -> str:
        why = self.reason if self.reason else "NO REASON GIVEN"
        kind = "scale-down" if self.scale_down else "departure"
        return f"{self.key}: {fmt(self.ours)} (paper's row: {fmt(self.paper)}), {kind} — {why}"


def fmt(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


def resolved(config: dict, name: str) -> dict:
    """Experiment `name` exactly as its jobs read it: every stage through its settings class, defaults filled in
    (the model's arch, the trainer's, the beam search's, the scorer's), with its task, vocabulary, warm start and
    averaging. Torch-free. A model of the config's own keeps its arch as written (its class lives in its module)."""
    from ..inference.config import BeamConfig
    from ..models import MODELS
    from ..scoring.config import ScoreConfig
    from ..training.config import AverageConfig, TrainConfig

    e = experiment(config, name)
    arch = dict(e["arch"])
    if e["model"] in MODELS:
        sizes = {"src_vocab": 0, "tgt_vocab": 0}  # the data's, known once it is built; equal in any two rows
        arch = MODELS[e["model"]].config_class.from_dict({**arch, **sizes}).to_dict()
        for key in sizes:
            arch.pop(key)
    out = {
        "name": name,
        "task": e["task"],
        "model": e["model"],
        "vocab": e["vocab"],
        "warm_start": e["warm_start"],
        "arch": arch,
        "train": vars(TrainConfig.from_dict(e["train"])),
        "decode": vars(BeamConfig.from_dict(e["decode"])),
        "score": vars(ScoreConfig.from_dict(e["score"])),
        "average": vars(AverageConfig.from_dict(e["average"])) if e["average"] else None,
        "seeds": e["seeds"],
    }
    return json.loads(json.dumps(out))  # tuples as lists, as the JSON each run's evidence records


def run_spec(config: dict, name: str, seed: int | None = None) -> dict:
    """One run of experiment `name` as its jobs receive it (`resolved`, one seed; the trainer's own seed set to
    it): what `lwnmt show` prints and each study run's evidence records (experiment.json)."""
    spec = resolved(config, name)
    seed = spec["seeds"][0] if seed is None else seed
    del spec["seeds"]
    spec["seed"] = seed
    spec["train"]["seed"] = seed
    spec["scaled_from"] = paper_row(config, name)
    return spec


def flat(spec: dict) -> dict[str, Any]:
    """The settings that define what trains, as stage/key → value (name, seeds and warm start are compared apart)."""
    out: dict[str, Any] = {key: spec[key] for key in ("task", "model", "vocab")}
    for stage in ("arch", "train", "decode", "score"):
        out.update({f"{stage}/{k}": v for k, v in spec[stage].items() if not (stage == "train" and k == "seed")})
    if spec["average"] is None:
        out["average"] = None
    else:
        out.update({f"average/{k}": v for k, v in spec["average"].items()})
    return out


def scale_down_reason(key: str) -> str | None:
    return SCALE_DOWN.get(key) or SCALE_DOWN.get(key.split("/")[0] + "/*")


def paper_row(config: dict, name: str) -> str | None:
    return config["experiments"][name].get("scaled_from")


def differences(config: dict, name: str) -> list[Difference]:
    """Every difference between study row `name` and the row it scales down, settings first, then relations."""
    paper = paper_row(config, name)
    if paper is None:
        return []
    ours, theirs = flat(resolved(config, name)), flat(resolved(config, paper))
    stated = config["experiments"][name].get("departures") or {}
    out = []
    for key in sorted(set(ours) | set(theirs), key=lambda k: (k.count("/") > 0, k)):
        a, b = ours.get(key), theirs.get(key)
        if a == b and not (key == "average" and (key in ours) != (key in theirs)):
            continue
        if key.startswith("average/") and (ours.get("average", 0) is None or theirs.get("average", 0) is None):
            continue  # averaging on one side only: one difference, `average`
        if key == "average":  # averaging on one side only: each side's whole setting
            a, b = resolved_average(config, name), resolved_average(config, paper)
        general = scale_down_reason(key)
        out.append(Difference(key, a, b, stated.get(key) or general, general is not None and key not in stated))
    return out + relation_differences(config, name)


def resolved_average(config: dict, name: str) -> dict | None:
    return resolved(config, name)["average"]


def same_paper(a: str, b: str) -> bool:
    """Rows of one paper's grid share their first name part (lwc., gca., dou., mlrf.)."""
    return a.split(".")[0] == b.split(".")[0]


def budget(spec: dict) -> tuple[str, float] | None:
    """How long a run trains: ("updates", n) or ("epochs", n); None when neither is bounded."""
    train = spec["train"]
    if train["max_update"]:
        return ("updates", train["max_update"])
    if train["max_epoch"]:
        return ("epochs", train["max_epoch"])
    return None


def budget_ratio(spec: dict, parent: dict) -> float | None:
    """A continued run's budget over its parent's; 1.0 for equal budgets in any unit, None when the units differ."""
    a, b = budget(spec), budget(parent)
    if a is None or b is None or a[0] != b[0]:
        return None
    return a[1] / b[1]


def controls(config: dict, name: str) -> list[str]:
    """The experiments each study table compares `name` with (rows' compare_to)."""
    from .papers import rows

    found = []
    for row in rows(config):
        if row.spec.get("experiment") == name and row.spec.get("compare_to"):
            found.append(row.spec["compare_to"])
    return list(dict.fromkeys(found))


def relation_differences(config: dict, name: str) -> list[Difference]:
    """The paper's relations between a method's row and its control's, and a continued run's and its parent's."""
    stated = config["experiments"][name].get("departures") or {}
    out = []
    ours = resolved(config, name)
    paper = resolved(config, str(paper_row(config, name)))

    def add(key: str, a: Any, b: Any) -> None:
        out.append(Difference(key, a, b, stated.get(key), False))

    parent = ours["warm_start"] if isinstance(ours["warm_start"], str) else None
    if parent and paper_row(config, parent):
        theirs = paper["warm_start"] if isinstance(paper["warm_start"], str) else None
        a = budget_ratio(ours, resolved(config, parent))
        b = budget_ratio(paper, resolved(config, theirs)) if theirs else None
        if a is None or b is None or abs(a - b) > 1e-9:
            add("relation/continued_budget", a, b)
    for control in controls(config, name):
        control_paper = paper_row(config, control)
        if not control_paper:
            continue
        c_ours, c_paper = resolved(config, control), resolved(config, control_paper)
        a = ours["train"]["lr"] / c_ours["train"]["lr"]
        if same_paper(paper["name"], c_paper["name"]):
            b = paper["train"]["lr"] / c_paper["train"]["lr"]
        else:  # a control standing for another paper's row: each paper trains its method at its baseline's lr
            b = 1.0  # (tests/test_protocol.py holds config.yaml's rows to that)
            add("relation/control", f"{control} (from {c_paper['name']})", f"a row of {paper['name'].split('.')[0]}")
        if abs(a - b) > 1e-9 * max(a, b):
            add("relation/lr", a, b)
        if parent and isinstance(c_ours["warm_start"], str):
            # the paper's 'longer training' control: the method's parent, for the method's budget
            same = c_ours["warm_start"] == parent and budget(c_ours) == budget(ours)
            if not same:
                add("relation/control", [c_ours["warm_start"], budget(c_ours)], [parent, budget(ours)])
    return out


def study_rows(config: dict) -> list[str]:
    """The experiments that scale a paper's row down."""
    return [name for name, spec in config.get("experiments", {}).items() if spec.get("scaled_from")]


def check(config: dict) -> None:
    """Refuse a study row whose paper row is unknown, a departure named for a key no setting has, or a
    difference from its paper's row without a reason; each in one line naming the key."""
    for name in study_rows(config):
        paper = str(paper_row(config, name))
        if paper not in config["experiments"]:
            raise UserError(f"config key experiments/{name}/scaled_from: unknown experiment {paper!r}")
        known = set(flat(resolved(config, name))) | set(flat(resolved(config, paper))) | {"average", *RELATIONS}
        for key in config["experiments"][name].get("departures") or {}:
            if key not in known:
                raise UserError(
                    f"config key experiments/{name}/departures/{key}: no such setting; expected stage/key "
                    f"(arch/norm, train/lr, ...) or one of {', '.join(RELATIONS)}"
                )
        for diff in differences(config, name):
            if not diff.reason:
                raise UserError(
                    f"config key experiments/{name}/departures: {diff.key} is {fmt(diff.ours)} where its paper's "
                    f"row {paper} has {fmt(diff.paper)}, with no reason; expected departures: {{{diff.key}: why}}"
                )


def listing(config: dict, names: list[str]) -> list[str]:
    """Markdown: each study row's differences from its paper's row, with their reasons."""
    lines = []
    for name in names:
        paper = paper_row(config, name)
        if paper is None:
            lines.append(f"- `{name}`: scales down no paper row (the study's own check)")
            continue
        diffs = differences(config, name)
        own = [d for d in diffs if not d.scale_down]
        scale = sorted({d.key for d in diffs if d.scale_down})
        lines.append(
            f"- `{name}`, from `{paper}`: scale-down changes {', '.join(scale) or 'nothing'}"
            + ("; departures:" if own else "; no departure")
        )
        lines += [f"  - {d.line().replace(', departure — ', ' — ')}" for d in own]
    return lines


def departures(config: dict, name: str) -> list[dict]:
    """How a row departs from its paper's row (scale-down changes aside), as plain data for the summary."""
    return [{"key": d.key, "ours": d.ours, "paper": d.paper} for d in differences(config, name) if not d.scale_down]


def fixed_by_protocol(config: dict, name: str) -> list[str]:
    """Where an earlier-recipe row (<study>.<method>) departs from its paper and its paper-protocol row
    (<study>.paper.<method>) does not, in words; empty where the config has no such row."""
    study, _, method = name.partition(".")
    protocol_row = f"{study}.paper.{method}"
    if method.startswith("paper.") or protocol_row not in config["experiments"]:
        return []
    kept = {d["key"] for d in departures(config, protocol_row)}
    return [departure_words(d) for d in departures(config, name) if d["key"] not in kept]


def departure_words(d: dict) -> str:
    """'norm post (paper: pre)', 'lr over its control's 0.5 (paper: 1)', 'a control standing for another paper's
    baseline'."""
    if d["key"] == "relation/control":
        return "a control standing for another paper's baseline"
    name = {"relation/lr": "lr over its control's", "relation/continued_budget": "updates over its parent's"}
    return f"{name.get(d['key'], d['key'].split('/')[-1])} {words(d['ours'])} (paper: {words(d['paper'])})"


def words(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value)
