"""The same study's rows at several depths, side by side (`lwnmt evidence depth`; the table in docs/results.md):
each method's Δ against its control per depth, from each study's summary.json (`lwnmt evidence collect`), whether
that Δ grows with depth, and a figure of Δ against depth."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from .evidence import P_VALUE, SUMMARY, page_files
from ..grid.protocol import departure_words
from .evidence_page import fmt


def seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


# Each study folder's tables: T1 holds the earlier recipe's rows, T2 (where collected) the papers' own protocols,
# whose experiments are named <study>.paper.<method> beside the earlier <study>.<method>.
RECIPES = {"earlier": SUMMARY, "paper": page_files("study/T2")["summary"]}
RECIPE_WORDS = {"earlier": "earlier recipe", "paper": "paper's protocol"}


def depth_summary(studies: Sequence[tuple[str, str | Path]]) -> dict:
    """From each study's summaries ((depth label such as "3+3", its evidence folder), shallowest first): the
    baseline's BLEU per depth and, per method and recipe (a row compared with a control of another model; checks
    such as the budget's compare a model with itself), its comparison per depth and how the row departs from its
    paper's. A method is matched across studies by its experiment's name after the study's prefix (study_cpu.lwc,
    study_cpu6.lwc), a paper-protocol row by the name after `paper.` (study_cpu6.paper.lwc)."""
    depths: list[dict] = []
    baseline: dict[str, dict] = {}
    methods: dict[str, dict] = {}
    for depth, folder in studies:
        path = Path(folder) / SUMMARY
        if not path.exists():
            depths.append({"depth": depth, "folder": str(folder), "present": False})
            continue
        depths.append({"depth": depth, "folder": str(folder), "present": True})
        for recipe, file in RECIPES.items():
            if not (Path(folder) / file).exists():
                continue
            for row in json.loads((Path(folder) / file).read_text())["rows"]:
                key = row["experiment"].split(".", 1)[-1].removeprefix("paper.")
                c = row.get("compare")
                if c is None and not row.get("warm_start") and depth not in baseline:
                    baseline[depth] = {"label": row["label"], **{k: row[k] for k in ("n", "mean", "sd")}}
                if c is None or c.get("same_model", False):
                    continue
                method = methods.setdefault(
                    f"{key}/{recipe}",
                    {"label": row["label"].split(" (")[0], "key": key, "recipe": recipe, "depths": {}},
                )
                method["depths"][depth] = {
                    "control": c["control"],
                    "seeds": c["seeds"],
                    "deltas": c.get("deltas", []),
                    "delta": c.get("delta"),
                    "sd": statistics.stdev(c["deltas"]) if len(c.get("deltas", [])) > 1 else None,
                    "bootstrap_p": c.get("bootstrap_p"),
                    "t_test_p": c.get("t_test_p"),
                    "claim": c.get("claim"),
                    "departures": row.get("departures", []),
                }
    for method in methods.values():
        method["trend"] = depth_trend(method, [d["depth"] for d in depths])
        other = methods.get(f"{method['key']}/paper") if method["recipe"] == "earlier" else None
        method["fixed"] = fixed_by_protocol(method, other)
    return {"depths": depths, "baseline": baseline, "methods": methods}


def fixed_by_protocol(earlier: dict, paper: dict | None) -> list[str]:
    """How the earlier recipe's row departs from its paper where the paper-protocol row does not (at any depth):
    'norm post (paper: pre)'. Empty where no paper-protocol row exists (the earlier row is the study's row)."""
    if paper is None:
        return []
    kept = {d["key"] for e in paper["depths"].values() for d in e["departures"]}
    out: dict[str, str] = {}
    for entry in earlier["depths"].values():
        for d in entry["departures"]:
            if d["key"] not in kept:
                out.setdefault(d["key"], departure_words(d))
    return list(out.values())


def depth_trend(method: dict, order: list[str]) -> dict:
    """The method's Δ at its shallowest and deepest studied depth with seeds, and whether the change between them
    exceeds what the seeds' spread allows (Welch's t-test over the per-seed Δs, p < P_VALUE)."""
    done = [d for d in order if method["depths"].get(d, {}).get("seeds")]
    if len(done) < 2:
        return {"from": done[0] if done else None, "to": None}
    first, last = method["depths"][done[0]], method["depths"][done[-1]]
    p = None
    if len(first["deltas"]) > 1 and len(last["deltas"]) > 1:
        from scipy.stats import ttest_ind

        p = float(ttest_ind(last["deltas"], first["deltas"], equal_var=False).pvalue)
        p = None if p != p else p
    return {"from": done[0], "to": done[-1], "change": last["delta"] - first["delta"], "welch_p": p}


def method_label(method: dict, recipes: set[str]) -> str:
    """The method's name, and its recipe where the method has rows on both."""
    return f"{method['label']}, {RECIPE_WORDS[method['recipe']]}" if len(recipes) > 1 else method["label"]


def recipe_note(method: dict) -> str:
    """How the earlier recipe departs from the method's paper, where a paper-protocol row keeps it."""
    if not method.get("fixed"):
        return ""
    return f" (this recipe departs from its paper: {'; '.join(method['fixed'])})"


def depth_sentence(method: dict, label: str | None = None) -> str:
    """One plain sentence: does the method's gain grow with depth, as the papers say, at this data size?"""
    t = method["trend"]
    label = f"**{label or method['label']}**{recipe_note(method)}"
    if t["to"] is None:
        have = f"run at {t['from']} only" if t["from"] else "not run at any depth yet"
        if t["from"]:
            have += f" (the claim there: {method['depths'][t['from']]['claim']})"
        return f"{label}: {have}; no trend with depth yet."
    first, last = method["depths"][t["from"]], method["depths"][t["to"]]
    span = (
        f"{first['delta']:+.2f} at {t['from']} ({seeds(len(first['seeds']))}) → {last['delta']:+.2f} at "
        f"{t['to']} ({seeds(len(last['seeds']))})"
    )
    welch = (
        f"Welch's t-test over the seeds' Δs p {t['welch_p']:.3f}"
        if t["welch_p"] is not None
        else "too few seeds to test the change"
    )
    verdict = f"at {t['to']} the claim is {last['claim']}"
    if t["change"] > 0 and t["welch_p"] is not None and t["welch_p"] < P_VALUE:
        return f"{label}: its gain grows with depth, as its paper says ({span}; {welch}); {verdict}."
    if t["change"] > 0:
        return (
            f"{label}: its Δ rises with depth ({span}) but not beyond what the seeds' spread allows "
            f"({welch}): no clear growth with depth at this data size; {verdict}."
        )
    return (
        f"{label}: its Δ does not grow with depth ({span}; {welch}): the growth its paper reports "
        f"does not appear at this data size; {verdict}."
    )


def depth_cells(entry: dict | None) -> list[str]:
    if not entry or not entry["seeds"]:
        return ["— (not run yet)", "", "", ""]
    sd = f" ± {entry['sd']:.2f}" if entry["sd"] is not None else ""
    boot = ", ".join(f"{p:.3f}" for p in entry["bootstrap_p"]) if entry.get("bootstrap_p") else "—"
    t = fmt(entry["t_test_p"], 3) if entry["t_test_p"] is not None else "— (one seed)"
    return [f"{entry['delta']:+.2f}{sd} (n={len(entry['seeds'])})", boot, t, entry["claim"]]


def depth_block(summary: dict) -> str:
    """The table across depths: the baseline's BLEU per depth, then per method its Δ against its control,
    per-seed bootstrap p, the t-test over seeds and the verdict at each depth, and a sentence per method."""
    depths = [d["depth"] for d in summary["depths"]]
    base = summary["baseline"]
    head = [
        "| | "
        + " | ".join(
            f"{d}: Δ BLEU vs control, mean ± sd | {d}: bootstrap p, per seed | {d}: t-test p, "
            f"over seeds | {d}: the claim"
            for d in depths
        )
        + " |",
        "|---|" + "---:|---|---:|---|" * len(depths),
    ]
    bleu = ["Transformer baseline's own BLEU"]
    for d in depths:
        b = base.get(d)
        bleu += [
            f"{b['mean']:.2f}" + (f" ± {b['sd']:.2f}" if b["sd"] is not None else "") + f" (n={b['n']})"
            if b and b["n"]
            else "— (not run yet)",
            "",
            "",
            "",
        ]
    lines = head + ["| " + " | ".join(bleu) + " |"]
    recipes = {key: {m["recipe"] for m in summary["methods"].values() if m["key"] == key} for key in keys(summary)}
    for method in ordered(summary):
        cells = [method_label(method, recipes[method["key"]])]
        for d in depths:
            cells += depth_cells(method["depths"].get(d))
        lines.append("| " + " | ".join(cells) + " |")
    done = [d for d in depths if base.get(d, {}).get("n")]
    sentences = []
    if len(done) > 1:
        a, b = base[done[0]], base[done[-1]]
        sentences.append(
            f"- **What depth buys the baseline**: {a['mean']:.2f} at {done[0]} → {b['mean']:.2f} at "
            f"{done[-1]} ({b['mean'] - a['mean']:+.2f} BLEU; {seeds(a['n'])} and {seeds(b['n'])})."
        )
    sentences += [f"- {depth_sentence(m, method_label(m, recipes[m['key']]))}" for m in ordered(summary)]
    missing = [d["depth"] for d in summary["depths"] if not d["present"]]
    if missing:
        sentences.append(
            f"- Not collected yet: {', '.join(missing)} (no summary.json in "
            f"{', '.join(d['folder'] for d in summary['depths'] if not d['present'])})."
        )
    return "\n".join(lines + [""] + sentences) + "\n"


def brief_block(summary: dict) -> str:
    """The README's short form of the table across depths: per method its Δ against its control (mean over the
    seeds run) on each recipe at each depth, the baseline's BLEU, and how each earlier recipe departs from its paper.
    A method with no paper-protocol row kept its paper's protocol in the earlier recipe: one row stands for both."""
    depths = [d["depth"] for d in summary["depths"]]
    head = "| method | " + " | ".join(f"{d}, {RECIPE_WORDS[r]}" for d in depths for r in RECIPES) + " |"
    lines = [head, "|---|" + "---:|" * (len(depths) * len(RECIPES))]
    base = summary["baseline"]
    cells = []
    for d in depths:
        b = base.get(d)
        cells += [f"{b['mean']:.2f} (n={b['n']})" if b and b["n"] else "— (not run yet)", ""]
    lines.append("| Transformer baseline's BLEU | " + " | ".join(cells) + " |")
    methods = summary["methods"]
    for key in keys(summary):
        earlier, paper = methods.get(f"{key}/earlier"), methods.get(f"{key}/paper")
        cells = []
        for d in depths:
            for recipe in RECIPES:
                method = earlier if recipe == "earlier" else paper
                if method is None:
                    cells.append("(the same row)" if recipe == "paper" else "—")
                    continue
                entry = method["depths"].get(d)
                done = entry and entry["seeds"]
                cells.append(f"{entry['delta']:+.2f} (n={len(entry['seeds'])})" if done else "— (not run yet)")
        label = (earlier or paper)["label"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    notes = [
        f"- {m['label']}, earlier recipe: departs from its paper in {'; '.join(m['fixed'])}."
        for m in (methods.get(f"{k}/earlier") for k in keys(summary))
        if m and m.get("fixed")
    ]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def keys(summary: dict) -> list[str]:
    return list(dict.fromkeys(m["key"] for m in summary["methods"].values()))


def ordered(summary: dict) -> list[dict]:
    """Each method's rows together, the earlier recipe first."""
    methods = summary["methods"]
    return [methods[f"{k}/{r}"] for k in keys(summary) for r in RECIPES if f"{k}/{r}" in methods]


def depth_figure(summary: dict, path: str | Path) -> Path:
    """Δ BLEU against depth per method, mean ± sd over the seeds, with a zero line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [d["depth"] for d in summary["depths"]]
    xs = {d: i for i, d in enumerate(labels)}
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    ax.axhline(0, color="0.4", linewidth=1, linestyle="--", label="its control")
    count = len(summary["methods"])
    for i, method in enumerate(summary["methods"].values()):
        shift = 0.06 * (i - (count - 1) / 2)  # side by side at each depth: no error bar hides another
        points = [(xs[d] + shift, e["delta"], e["sd"] or 0.0) for d, e in method["depths"].items() if e["seeds"]]
        if points:
            points.sort()
            ax.errorbar(
                [p[0] for p in points],
                [p[1] for p in points],
                yerr=[p[2] for p in points],
                marker="o",
                capsize=4,
                label=method["label"],
            )
    ax.set_xticks(range(len(labels)), [f"{d} layers" for d in labels])
    ax.set_xlim(-0.4, len(labels) - 0.6)
    ax.set_ylabel("Δ BLEU vs its control (mean ± sd over seeds)")
    ax.set_title("Each method's gain over its control, by depth (Multi30k De→En)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
