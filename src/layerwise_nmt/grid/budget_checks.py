"""What a run's stopping rules mean in epochs, estimated from its task's `estimate` before anything runs, and whether
its averaging, early stopping, warm-up or restart can work as configured: the lines `snakemake -n` and `lwnmt status`
print, and the budget table of `lwnmt plan`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import grid
from .tasks import SUBWORDS_PER_SENTENCE
from ..training.config import AVERAGE_DEFAULTS, TRAIN_DEFAULTS


@dataclass
class Budget:
    """One experiment's training budget, estimated from its task's `estimate` before anything runs.

    Tokens count target tokens of full batches (max_tokens × update_freq per update; max_sentences batches count
    sentences × subwords per sentence), so `epochs` is an upper estimate when batches are padded."""

    experiment: str
    updates: float | None  # the run's updates (estimated when epochs bound it)
    tokens: float | None  # target tokens over the run
    epochs: float | None  # epochs the run reaches (fractional: it ends mid-epoch)
    updates_per_epoch: float | None
    bounded_by: str  # max_update | max_epoch | restart | none
    problems: list[str] = field(default_factory=list)

    @property
    def ends_mid_epoch(self) -> bool:
        return self.epochs is not None and self.bounded_by == "max_update" and self.epochs % 1 > 1e-9


def _tokens_per_update(train: dict, subwords: float, restarted: bool = False) -> float | None:
    max_tokens, max_sentences = train.get("max_tokens"), train.get("max_sentences")
    if restarted and (train.get("restart_max_tokens") or train.get("restart_max_sentences")):
        max_tokens, max_sentences = train.get("restart_max_tokens"), train.get("restart_max_sentences")
    per_batch = (
        min(x for x in (max_tokens, (max_sentences or 0) * subwords or None) if x)
        if (max_tokens or max_sentences)
        else None
    )
    return per_batch * train.get("update_freq", TRAIN_DEFAULTS.update_freq) if per_batch else None


def budget(config: dict, name: str) -> Budget:
    e = grid.experiment(config, name)
    train = e["train"]
    estimate = config["tasks"][e["task"]].get("estimate", {})
    pairs, subwords = estimate.get("train_pairs"), estimate.get("subwords_per_sentence", SUBWORDS_PER_SENTENCE)
    per_update = _tokens_per_update(train, subwords)
    if not pairs or not per_update:
        return Budget(
            name,
            None,
            None,
            None,
            None,
            "none",
            [f"tasks/{e['task']}/estimate has no train_pairs" if not pairs else "no batch size"],
        )
    epoch_tokens = pairs * subwords
    upe = epoch_tokens / per_update
    bounds = {}  # bound → epochs it allows
    if train.get("max_epoch"):
        bounds["max_epoch"] = float(train["max_epoch"])
    restart_after, restart_epochs = train.get("restart_after_epochs") or 0, train.get("restart_epochs") or 0
    if restart_after and restart_epochs and restart_after <= bounds.get("max_epoch", math.inf):
        bounds.pop("max_epoch", None)
        bounds["restart"] = float(restart_after + restart_epochs)
    if train.get("max_update"):  # updates before a restart at upe, after it at the restart stage's size
        updates, epochs = float(train["max_update"]), train["max_update"] / upe
        if restart_after and epochs > restart_after:
            after = _tokens_per_update(train, subwords, restarted=True) or per_update
            epochs = restart_after + (train["max_update"] - restart_after * upe) / (epoch_tokens / after)
        bounds["max_update"] = epochs
    if not bounds:
        return Budget(name, None, None, None, upe, "none", ["no max_update or max_epoch: the run never ends"])
    bounded_by = min(bounds, key=bounds.__getitem__)
    epochs = bounds[bounded_by]
    updates = (
        train["max_update"]
        if bounded_by == "max_update"
        else min(epochs, restart_after or epochs) * upe
        + max(0.0, epochs - (restart_after or epochs))
        * epoch_tokens
        / (_tokens_per_update(train, subwords, restarted=True) or per_update)
    )
    b = Budget(name, updates, None, epochs, upe, bounded_by)
    b.tokens = updates * per_update if not restart_after else epochs * epoch_tokens
    b.problems = _policy_problems(e, b)
    return b


def _policy_problems(e: dict, b: Budget) -> list[str]:
    """What cannot work as configured, given the estimated budget (each a short phrase naming the keys)."""
    train, average, out = e["train"], e["average"] or {}, []
    assert b.epochs is not None and b.updates is not None and b.updates_per_epoch is not None  # estimated
    whole_epochs = math.floor(b.epochs + 1e-9)
    warmup = train.get("warmup_updates") or 0
    scheduled = train.get("lr_scheduler", TRAIN_DEFAULTS.lr_scheduler) != "fixed"
    if b.updates_per_epoch < 1:
        update_freq = train.get("update_freq", TRAIN_DEFAULTS.update_freq)
        out.append(f"an epoch has fewer batches than update_freq {update_freq}: no update")
    if average:
        num, by = average.get("num", AVERAGE_DEFAULTS.num), average.get("by", AVERAGE_DEFAULTS.by)
        if by == "epoch":
            keep = train.get("keep_last_epochs", TRAIN_DEFAULTS.keep_last_epochs)
            if whole_epochs == 0:
                out.append(
                    f"average by epoch, but the run ends after {b.epochs:.2g} epochs: no epoch checkpoint "
                    f"(average by update, with save_interval_updates)"
                )
            elif whole_epochs < num:
                out.append(f"average of {num} epoch checkpoints, but the run has ~{whole_epochs} epochs")
            elif keep < num:
                out.append(f"average of {num} epoch checkpoints, but keep_last_epochs keeps {keep}")
        else:
            interval = train.get("save_interval_updates") or 0
            keep = train.get("keep_interval_updates", TRAIN_DEFAULTS.keep_interval_updates)
            saved = math.floor(b.updates / interval) if interval else int(b.ends_mid_epoch)
            if saved == 0:
                out.append("average by update, but no update checkpoint is saved (set save_interval_updates)")
            elif saved < num:
                out.append(
                    f"average of {num} update checkpoints, but ~{saved} are saved "
                    f"(save_interval_updates {interval or 'unset'})"
                )
            elif keep < num:
                out.append(f"average of {num} update checkpoints, but keep_interval_updates keeps {keep}")
        first = averaged_from(e, b)
        if scheduled and first is not None and first < warmup:
            # a checkpoint saved while the lr still climbs is far from the final weights and drags the average back
            out.append(
                f"the average of the last {num} {by} checkpoints starts at update ~{first:,.0f}, inside the "
                f"{warmup:,}-update warm-up (average fewer or closer checkpoints)"
            )
    if train.get("patience") and train["patience"] >= whole_epochs:
        out.append(f"patience {train['patience']} epochs ≥ the run's ~{b.epochs:.3g} epochs: early stopping cannot act")
    if scheduled and warmup >= b.updates:
        out.append(f"warm-up of {warmup:,} updates ≥ the run's ~{b.updates:,.0f} updates: the lr never peaks")
    out += _decay_problems(train, b, warmup)
    restart_after = train.get("restart_after_epochs") or 0
    if restart_after and b.bounded_by == "max_update" and b.epochs <= restart_after:
        out.append(f"RestartAdam after {restart_after} epochs, but the run ends after ~{b.epochs:.3g}")
    return out


def averaged_from(e: dict, b: Budget) -> float | None:
    """The update at which the first checkpoint the experiment's average takes is saved; None without an average
    or a budget estimate, or where too few checkpoints are saved or kept (a problem said on its own)."""
    average, train = e["average"] or {}, e["train"]
    if not average or b.epochs is None or b.updates is None or b.updates_per_epoch is None:
        return None
    num = average.get("num", AVERAGE_DEFAULTS.num)
    if average.get("by", AVERAGE_DEFAULTS.by) == "epoch":
        whole_epochs = math.floor(b.epochs + 1e-9)
        keep = train.get("keep_last_epochs", TRAIN_DEFAULTS.keep_last_epochs)
        return (whole_epochs - num + 1) * b.updates_per_epoch if min(whole_epochs, keep) >= num else None
    interval = train.get("save_interval_updates") or 0
    saved = math.floor(b.updates / interval) if interval else 0
    keep = train.get("keep_interval_updates", TRAIN_DEFAULTS.keep_interval_updates)
    return (saved - num + 1) * interval if min(saved, keep) >= num else None


def _decay_problems(train: dict, b: Budget, warmup: int) -> list[str]:
    """polynomial_decay's horizon is total_num_update alone, as in fairseq, where both are explicit: a max_update
    changed without it (an experiment's over a preset's) leaves the lr high at the end, or at its floor for the
    last updates. Runs bounded by epochs are estimated too roughly to compare."""
    total = train.get("total_num_update") or 0
    if (
        train.get("lr_scheduler", TRAIN_DEFAULTS.lr_scheduler) != "polynomial_decay"
        or not total
        or b.bounded_by != "max_update"
        or total == b.updates
    ):
        return []
    assert b.updates is not None  # bounded by max_update
    updates, fix = int(b.updates), f"(set total_num_update: {int(b.updates)} with max_update)"
    if total > updates:
        if warmup >= updates:
            return [f"total_num_update {total:,} > max_update {updates:,}: polynomial_decay's lr never decays {fix}"]
        lr, end = train.get("lr", TRAIN_DEFAULTS.lr), train.get("end_learning_rate", TRAIN_DEFAULTS.end_learning_rate)
        left = 1 - (updates - warmup) / max(1, total - warmup)
        return [
            f"total_num_update {total:,} > max_update {updates:,}: polynomial_decay's lr ends at "
            f"{(end + (lr - end) * left) / lr:.0%} of its peak {fix}"
        ]
    end = train.get("end_learning_rate", TRAIN_DEFAULTS.end_learning_rate)
    return [
        f"total_num_update {total:,} < max_update {updates:,}: polynomial_decay's lr stays at its "
        f"end_learning_rate {end:g} for the last {updates - total:,} updates {fix}"
    ]


def budgets(config: dict) -> list[Budget]:
    """Every experiment some targeted table or figure row runs, in config order."""
    wanted = grid.rows_by_experiment(config)
    return [budget(config, name) for name in config.get("experiments", {}) if name in wanted]


def budget_warnings(config: dict) -> list[str]:
    """One line per experiment whose averaging, early stopping, warm-up or restart cannot work as configured,
    naming the table rows it serves: what `snakemake -n` and `lwnmt status` print."""
    rows = grid.rows_by_experiment(config)
    return [
        f"{b.experiment} ({budget_text(b)}; rows: {'; '.join(rows[b.experiment])}): {'; '.join(b.problems)}"
        for b in budgets(config)
        if b.problems
    ]


def budget_text(b: Budget) -> str:
    if b.epochs is None or b.updates is None or b.tokens is None:
        return "budget unknown"
    mid = ", ends mid-epoch" if b.ends_mid_epoch else ""
    return f"{b.updates:,.0f} updates, {b.tokens / 1e9:.3g}B target tokens, ~{b.epochs:.3g} epochs{mid}"


def render_budgets(config: dict) -> str:
    """Per experiment: updates, target tokens and epochs (from the task's estimate), and what cannot work."""
    lines = [
        "Budget per experiment (estimated from each task's `estimate`; epochs < 1 or fractional: the run ends "
        "mid-epoch):",
        "",
        f"{'experiment':<36} {'updates':>9} {'tokens':>8} {'epochs':>7}  problems",
    ]
    for b in budgets(config):
        if b.epochs is None or b.updates is None or b.tokens is None:
            lines.append(f"{b.experiment:<36} {'—':>9} {'—':>8} {'—':>7}  {'; '.join(b.problems)}")
            continue
        lines.append(
            f"{b.experiment:<36} {b.updates:>9,.0f} {b.tokens / 1e9:>7.3g}B {b.epochs:>7.3g}  "
            f"{'; '.join(b.problems)}".rstrip()
        )
    return "\n".join(lines)
