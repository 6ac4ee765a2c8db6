"""`lwnmt plan`: what each table costs to reproduce, in GPU-hours, before anything runs.

    GPU-hours = seeds × 6 × N × (source + target tokens trained on) / sustained FLOP/s / 3600

N is the model's exact parameter count (built on the meta device, so nothing is allocated), with the vocabulary
sizes of the task's `estimate` (or of its prepared dictionaries). Tokens trained on: updates × max_tokens ×
update_freq for update-bounded runs (max_tokens counts target tokens; the source side adds about as many), or
epochs × training pairs × subwords per sentence × 2 for epoch-bounded runs (an upper bound when early stopping
may end them sooner: marked ≤). Decoding, validation and data preparation are not counted (small beside training).
The sustained throughput is an assumption (`--tflops`), stated in the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import config as cfg
from .models import MODELS, build
from .models.transformer import count_parameters
from .params import vocab_sizes

DEFAULT_TFLOPS = 100.0  # bf16 on an A100: about a third of its 312 TFLOP/s peak, typical for Transformer training


@dataclass
class Cost:
    experiment: str
    params: int | None
    tokens: float | None  # source + target tokens over the whole run, one seed
    seeds: int
    upper_bound: bool
    note: str = ""

    def gpu_hours(self, tflops: float) -> float | None:
        if self.params is None or self.tokens is None:
            return None
        return self.seeds * 6 * self.params * self.tokens / (tflops * 1e12) / 3600


def task_vocab(config: dict, e: dict) -> tuple[int, int] | None:
    estimate = config["tasks"][e["task"]].get("estimate", {})
    vocab = estimate.get("vocab")
    if isinstance(vocab, int):
        return vocab, vocab
    if isinstance(vocab, dict):
        return vocab["src"], vocab["tgt"]
    return vocab_sizes(e)


def trained_tokens(config: dict, e: dict) -> tuple[float | None, bool, str]:
    """(source + target tokens of one run, whether that is an upper bound, why unknown)."""
    train = e["train"]
    if train.get("max_update"):
        per_update = (train.get("max_tokens") or 0) * train.get("update_freq", 1)
        if per_update:
            return 2.0 * train["max_update"] * per_update, False, ""
    epochs = (train.get("max_epoch") or 0) + (train.get("restart_epochs") or 0)
    estimate = config["tasks"][e["task"]].get("estimate", {})
    if not epochs:
        return None, False, "no max_update or max_epoch"
    if not estimate.get("train_pairs"):
        return None, False, f"tasks/{e['task']}/estimate has no train_pairs"
    tokens = 2.0 * epochs * estimate["train_pairs"] * estimate.get("subwords_per_sentence", 25)
    return tokens, bool(train.get("patience")), ""


def experiment_cost(config: dict, name: str) -> Cost:
    e = cfg.experiment(config, name)
    tokens, bound, why = trained_tokens(config, e)
    sizes = task_vocab(config, e)
    params, note = None, why
    if e["model"] not in MODELS:
        note = f"model {e['model']!r} not implemented"
    elif sizes is None:
        note = f"tasks/{e['task']}/estimate has no vocab"
    else:
        with torch.device("meta"):
            params = count_parameters(build(e["model"], {**e["arch"], "src_vocab": sizes[0], "tgt_vocab": sizes[1]}))
    return Cost(name, params, tokens, len(e["seeds"]), bound, note)


def plan(config: dict) -> list[dict]:
    """One record per targeted table: its rows, how many are ours to run, and their GPU-hours."""
    out = []
    for paper, table in cfg.tables(config):
        spec = config["papers"][paper]["tables"][table]
        names = list(dict.fromkeys(row["experiment"] for row in spec["rows"] if "experiment" in row))
        costs = [experiment_cost(config, n) for n in names]
        blocked = [n for n in names if not cfg.experiment_status(config, n).runnable]
        out.append({"paper": paper, "table": table, "rows": len(spec["rows"]), "experiments": names,
                    "blocked": blocked, "costs": costs})
    return out


def render(records: list[dict], tflops: float) -> str:
    lines = [f"GPU-hours to train every experiment of each table (seeds included), at an assumed sustained "
             f"{tflops:g} TFLOP/s per GPU; ≤ = epoch-bounded runs that early stopping may end sooner.", "",
             f"{'table':<10} {'rows':>4} {'runs':>4} {'GPU-hours':>10}  notes"]
    seen: dict[str, Cost] = {}
    for r in records:
        hours = [c.gpu_hours(tflops) for c in r["costs"]]
        known = [h for h in hours if h is not None]
        bound = "≤" if any(c.upper_bound for c in r["costs"]) else " "
        notes = []
        if r["blocked"]:
            notes.append(f"{len(r['blocked'])} need data or code not here yet (lwnmt status)")
        unknown = [c for c in r["costs"] if c.gpu_hours(tflops) is None]
        if unknown:
            notes.append(f"{len(unknown)} not estimable ({unknown[0].note})")
        total = f"{bound}{hours_text(sum(known))}" if known else "—"
        lines.append(f"{r['paper'] + ' ' + r['table']:<10} {r['rows']:>4} {len(r['costs']):>4} {total:>10}  "
                     f"{'; '.join(notes)}".rstrip())
        seen.update({c.experiment: c for c in r["costs"]})
    overall = sum(h for c in seen.values() if (h := c.gpu_hours(tflops)) is not None)
    lines += ["", f"all tables: {len(seen)} distinct experiments, {hours_text(overall)} GPU-hours "
                  f"(an experiment shared by several tables is counted once)"]
    return "\n".join(lines)


def hours_text(hours: float) -> str:
    return f"{hours:,.1f}" if hours < 10 else f"{hours:,.0f}"


def rows(records: list[dict], tflops: float) -> list[dict]:
    """Per experiment, for --format csv."""
    return [{"paper": r["paper"], "table": r["table"], "experiment": c.experiment, "params": c.params,
             "tokens": c.tokens, "seeds": c.seeds, "upper_bound": c.upper_bound,
             "gpu_hours": c.gpu_hours(tflops), "note": c.note} for r in records for c in r["costs"]]
