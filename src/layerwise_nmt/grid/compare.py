"""One comparison by name: the baseline and each paper's key model on one task, at a size and budget named by a
preset, with one table and the length-bucket figure. An overlay's `compare:` entry is expanded here into ordinary
experiments and a paper (so every later step reads it like the demo's table):

    compare:
      mine: {task: my_fiet, preset: demo, seeds: [1], decode: {beam: 5, lenpen: 1.0}}

gives experiments mine.transformer, mine.lwc, mine.mlrf_dec_sa, mine.gca_full, mine.dou_deep and
mine.transformer_longer (the warm-started rows' control), table mine/T1 and figure mine/buckets, and makes them the
targets (those the overlay leaves at `all`). `own_methods: {rezero: {model: rezero, label: …}}` adds the user's own
rows (a model of `models:`, or a built-in one with other settings) as mine.rezero, after the papers'. `sweep:
{depth: [3, 6]}` (or one arch or train key's values) makes one such comparison per value, mine.d3.* and mine.d6.*,
in the one table T1, with figure mine/delta (each method's gain over its value's baseline) for buckets. Presets follow
config/demo.yaml (the demo's 3+3 layers, d=256, 1,000 updates), config/study.yaml (transformer_iwslt_de_en, trained
to convergence) and fairseq's transformer-base recipe (Vaswani et al. 2017)."""

from __future__ import annotations

import copy
import difflib

from .. import UserError
from ..scoring.config import tokenized
from .experiments import default_seeds
from .own_models import known_models
from .papers import targeted_names

_CONVERGED = {"max_epoch": 100, "max_update": 0, "patience": 10, "amp": "auto", "log_interval": 100}
PRESETS: dict[str, dict] = {
    "demo": {
        "what": "the demo's size: 3+3 layers, d=256 (preset small), 1,000 updates of 1,024 tokens; warm starts +300",
        "arch": {"preset": "small", "encoder_layers": 3, "decoder_layers": 3, "tie": "all", "dropout": 0.1},
        "lwc_layers": 7,  # the 3+3 baseline's parameters (config/demo.yaml)
        "train": {
            "max_tokens": 1024,
            "lr": 0.002,
            "lr_scheduler": "polynomial_decay",
            "warmup_updates": 350,
            "total_num_update": 1000,
            "max_update": 1000,
            "max_epoch": 0,
            "patience": 0,
            "log_interval": 100,
        },
        "continue": {"warmup_updates": 100, "total_num_update": 300, "max_update": 300},
        "lwc_train": {"max_tokens": 512},
        "mlrf_train": {"lr": 0.001},  # at the baseline's 2e-3 the fused model trains badly (config/demo.yaml)
        "average": None,
    },
    "iwslt": {
        "what": "transformer_iwslt_de_en (6+6 layers, 512/1024/4), each run to convergence (patience 10 epochs)",
        "arch": {"preset": "iwslt", "tie": "all", "dropout": 0.3},
        "lwc_layers": 14,
        "train": {
            "max_tokens": 4096,
            "lr": 0.0005,
            "lr_scheduler": "inverse_sqrt",
            "warmup_updates": 4000,
            "weight_decay": 0.0001,
            "label_smoothing": 0.1,
            **_CONVERGED,
        },
        "continue": {},
        "lwc_train": {"max_tokens": 2048},
        "mlrf_train": {},
        "average": {"num": 10, "by": "epoch"},
    },
    "base": {
        "what": "transformer-base (6+6 layers, 512/2048/8), each run to convergence (patience 10 epochs)",
        "arch": {"preset": "base", "tie": "all", "dropout": 0.1},
        "lwc_layers": 14,
        "train": {
            "max_tokens": 4096,
            "lr": 0.0007,
            "lr_scheduler": "inverse_sqrt",
            "warmup_updates": 4000,
            "label_smoothing": 0.1,
            **_CONVERGED,
        },
        "continue": {},
        "lwc_train": {"max_tokens": 2048},
        "mlrf_train": {},
        "average": {"num": 10, "by": "epoch"},
    },
}

# method → (experiment suffix, model, arch on top of the preset's, row label); the baseline comes first.
METHODS = {
    "lwc": ("lwc", "lwc", {}, "LWC, He et al. 2018 (shared layers over [source; target])"),
    "mlrf": (
        "mlrf_dec_sa",
        "mlrf",
        {"output_bias": False, "init": "xavier", "decoder_fusion": "sa", "n_hop": 4},
        "MLRF Dec-SA, Wang et al. 2018 (4 hops)",
    ),
    "gca": (
        "gca_full",
        "cross_view",
        {"strategy": "gca", "soft_integration": True},
        "GCA full model, Liu et al. 2020 (from the baseline)",
    ),
    "dou": (
        "dou_deep",
        "deep",
        {"input_bias": False, "aggregation": "hierarchical", "diversity": 1.0},
        "Dou et al. 2018 + Deep Representations (from the baseline)",
    ),
}
WARM_STARTED = ("gca", "dou")


def expand_comparisons(config: dict) -> None:
    """Each `compare:` entry as experiments, a paper with table T1 and figure buckets (a sweep: figure delta), and
    the targets; in place, and the same however often it runs."""
    comparisons = config.get("compare") or {}
    targets: dict[str, list[str]] = {"tasks": [], "tables": [], "figures": []}
    for name, spec in comparisons.items():
        if spec.get("task") not in config.get("tasks", {}):
            raise UserError(
                f"config key compare/{name}/task: unknown task {spec.get('task')!r}; expected one of "
                f"the tasks (an overlay's own, e.g. on a `local:` dataset)"
            )
        if spec.get("sweep"):
            experiments, rows = _swept(name, spec, known_models(config))
        else:
            experiments, rows = _experiments(name, spec, known_models(config))
        config.setdefault("experiments", {}).update(experiments)
        config.setdefault("papers", {})[name] = _paper(config, name, spec, rows)
        targets["tasks"].append(spec["task"])
        targets["tables"].append(f"{name}/T1")
        targets["figures"] += [f"{name}/{figure}" for figure in config["papers"][name]["figures"]]
    if comparisons:  # the comparisons are what the run is for, unless the overlay lists its own targets
        wanted = config.setdefault("targets", {})
        for kind, names in targets.items():
            if targeted_names(config, kind) is None:
                wanted[kind] = list(dict.fromkeys(names))
        # a table and its figure are one comparison's outputs: a target list naming the one and not the other
        # would silently leave the figure unmade
        tables = wanted["tables"]
        wanted["figures"] = list(
            dict.fromkeys(
                wanted["figures"]
                + [
                    f"{name}/{figure}"
                    for name in comparisons
                    if f"{name}/T1" in tables
                    for figure in config["papers"][name]["figures"]
                ]
            )
        )


def untargeted_comparisons(config: dict) -> list[str]:
    """One line per comparison whose table the config's `targets:` leaves out (an overlay merged over one that
    lists its own, such as config/demo.yaml): what the dry run says, since nothing of it would run."""
    lines, tables = [], targeted_names(config, "tables")
    for name in config.get("compare") or {}:
        if tables is None or f"{name}/T1" in tables:
            continue
        figures = [f"{name}/{figure}" for figure in config["papers"][name]["figures"]]
        lines.append(
            f"compare/{name}: table {name}/T1 and figure {', '.join(figures)} are not among the targets "
            f"(targets: tables lists {', '.join(tables) or 'none'}); add {name}/T1 to targets: "
            f"tables to run it (its figure comes with it)"
        )
    return lines


# how a swept value reads in an experiment's name and a row's label, and the figure's x axis
SWEPT_WORDS = {"depth": ("d", "depth", "depth (encoder layers = decoder layers)")}


def lwc_layers_for(depth: int) -> int:
    """LWC's shared layers with a depth+depth baseline's parameters: one pair of encoder and decoder layers holds
    three attention blocks and two feed-forward ones, a shared layer one of each, so at d_ff = 4·d (the demo's and
    transformer-base's sizes) 7/3 shared layers per pair (`lwnmt params`: 7 against 3+3, 14 against 6+6, 5 against
    2+2); the presets' 14 at 6+6 for iwslt too."""
    return round(7 * depth / 3)


def _swept(name: str, spec: dict, models: list[str]) -> tuple[dict, list[dict]]:
    """A comparison per swept value (named <name>.<value's tag>), every row labelled with its value and carrying
    it as `swept` for the figure."""
    ((stage, values),) = spec["sweep"].items()
    if stage == "depth":
        key = "depth"
        if "lwc_layers" in spec:
            raise UserError(
                f"config key compare/{name}/lwc_layers: a depth sweep sets LWC's shared layers per depth "
                f"(round(7 x depth / 3), the baseline's parameters); leave lwc_layers out"
            )
        layers = [k for k in ("encoder_layers", "decoder_layers", "layers") if k in spec.get("arch", {})]
        if layers:  # the swept depth would overwrite them in silence
            raise UserError(
                f"config key compare/{name}/arch/{layers[0]}: a depth sweep sets both stacks' layers per depth; "
                f"leave the layer keys out of arch"
            )
    else:
        ((key, values),) = values.items()
        if stage == "arch" and key in ("encoder_layers", "decoder_layers", "layers"):
            raise UserError(
                f"config key compare/{name}/sweep/arch/{key}: sweep: {{depth: [...]}} sets the layers "
                f"(both stacks, and LWC's shared layers at the baseline's parameters)"
            )
    prefix, words, _ = SWEPT_WORDS.get(key, (key, key, key))
    experiments, rows = {}, []
    for value in values:
        one = {k: v for k, v in spec.items() if k != "sweep"}
        forced = {}
        if stage == "depth":
            one["arch"] = {**spec.get("arch", {}), "encoder_layers": value, "decoder_layers": value}
            one["lwc_layers"] = lwc_layers_for(value)
        else:
            forced = {stage: {key: value}}
        tag = f"{prefix}{value_text(value)}"
        made, made_rows = _experiments(f"{name}.{tag}", one, models, forced, key=name)
        experiments.update(made)
        rows += [
            row | {"label": f"{words} {value_text(value)}: {row['label']}", "swept": value, "method": row["label"]}
            for row in made_rows
        ]
    return experiments, rows


def value_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _experiments(
    name: str, spec: dict, models: list[str], forced: dict | None = None, key: str | None = None
) -> tuple[dict, list[dict]]:
    """The comparison's experiments (every settings dict its own: an overlay merged into one must not edit all)
    and its table rows: the baseline first, the papers' methods, the user's own (`own_methods`, of `models`), and
    the warm-started rows' control last. `forced` (a sweep's value: {"arch" or "train": {key: value}}) goes on top
    of every run's settings, the methods' own included, but not over what the warm starts' `continue` sets; `key`:
    the comparison's name in error messages."""
    forced, key = forced or {}, key or name
    preset = PRESETS[spec["preset"]]
    arch = {**preset["arch"], **spec.get("arch", {})}
    train = {**preset["train"], **spec.get("train", {})}
    continued = {**train, **preset["continue"], **spec.get("continue", {})}
    common = {
        "task": spec["task"],
        "vocab": "joint",
        "decode": {"beam": 5, "lenpen": 1.0, "batch_size": 128, **spec.get("decode", {})},
        "score": {"buckets": [10, 20, 30], **spec.get("score", {})},
        "average": spec.get("average", preset["average"]),
    } | ({"seeds": list(spec["seeds"])} if "seeds" in spec else {})  # else the config's defaults, as any experiment

    continues = {*preset["continue"], *spec.get("continue", {})}

    def run(description: str, model: str, arch: dict, train: dict, warm: bool = False) -> dict:
        arch = {**arch, **forced.get("arch", {})}
        train = {**train, **{k: v for k, v in forced.get("train", {}).items() if not (warm and k in continues)}}
        out = {**common, "description": description, "model": model, "arch": arch, "train": train}
        return copy.deepcopy(out | ({"warm_start": base} if warm else {}))

    base, control = f"{name}.transformer", f"{name}.transformer_longer"
    out = {base: run(f"The baseline: {preset['what']}.", "transformer", arch, train)}
    rows = [{"label": "Transformer baseline", "experiment": base}]
    methods = spec.get("methods", list(METHODS))
    for method in methods:
        suffix, model, extra, label = METHODS[method]
        own = {**arch, **extra}
        if method == "lwc":  # one stack of shared layers instead of an encoder and a decoder
            own = {k: v for k, v in own.items() if k not in ("encoder_layers", "decoder_layers")}
            own["layers"] = spec.get("lwc_layers", preset["lwc_layers"])
        warm = method in WARM_STARTED
        budget = {**(continued if warm else train), **preset.get(f"{method}_train", {})}
        out[f"{name}.{suffix}"] = run(f"{label}: {preset['what']}.", model, own, budget, warm)
        rows.append({"label": label, "experiment": f"{name}.{suffix}", "compare_to": control if warm else base})
    owned = spec.get("own_methods") or {}
    for method, own in owned.items():
        where, experiment = f"config key compare/{key}/own_methods/{method}", f"{name}.{method}"
        if experiment in out or experiment == control:
            raise UserError(f"{where}: its experiment {experiment} would be one of the papers' rows; pick another name")
        if own["model"] not in models:
            close = difflib.get_close_matches(own["model"], models, n=1)
            raise UserError(
                f"{where}/model: unknown model {own['model']!r}; "
                f"{f'did you mean {close[0]!r}?' if close else 'known: ' + ', '.join(models)} (your own "
                f"are declared under models:)"
            )
        warm = own.get("warm_start", False)
        budget = {**(continued if warm else train), **own.get("train", {})}
        out[experiment] = run(
            f"{own['label']}: {preset['what']}.", own["model"], {**arch, **own.get("arch", {})}, budget, warm
        )
        rows.append({"label": own["label"], "experiment": experiment, "compare_to": control if warm else base})
    if any(m in WARM_STARTED for m in methods) or any(own.get("warm_start") for own in owned.values()):
        out[control] = run(
            "The warm-started rows' control: the baseline trained on as long as they are.",
            "transformer",
            arch,
            continued,
            warm=True,
        )
        rows.append({"label": "Baseline trained on as long (the warm-started rows' control)", "experiment": control})
    return out, rows


def _paper(config: dict, name: str, spec: dict, rows: list[dict]) -> dict:
    task = config["tasks"][spec["task"]]
    preset = PRESETS[spec["preset"]]
    seeds = spec.get("seeds", default_seeds(config))
    where = f"{task['src']}→{task['tgt']} ({spec['task']})"
    tests = [s for s in task.get("splits", {}) if s not in ("train", "valid")]  # test, then the named ones
    sets = "test set" if tests == ["test"] else f"test sets {', '.join(tests)}"
    methods = "the four methods" + (" and yours" if spec.get("own_methods") else "")
    first = " on the first seed" if len(seeds) > 1 else ""
    swept = sweep_words(spec)
    paper = {
        "title": spec.get(
            "title", f"{methods[0].upper()}{methods[1:]} on {where}" + (f" by {swept[0]}" if swept else "")
        ),
        "tables": {
            "T1": {
                "caption": f"{where}, {sets}: {bleu_kind(spec)} and chrF (sacrebleu), {casing(task, spec)}; * = better "
                f"than the row's control at p < 0.05 (paired bootstrap{first}, on BLEU and on chrF alike)."
                + (
                    f" At {swept[0]} {swept[1]}: each method against the baseline (or the control) of its value."
                    if swept
                    else ""
                ),
                "scale": f"{spec['preset']}: {preset['what']}; {len(seeds)} seed(s).",
                "metric": [f"{prefix}{m}" for prefix in [""] + [f"{s}_" for s in tests[1:]] for m in ("bleu", "chrf")],
                "significance": {"test": "bootstrap", "p": 0.05, "mark": "*"},
                "verdict": True,
                "budget": True,
                "rows": [{k: v for k, v in row.items() if k not in ("swept", "method")} for row in rows],
            }
        },
    }
    if swept:  # bars per length bucket for every value's every row would hide the trend the sweep is for
        paper["figures"] = {
            "delta": {
                "kind": "delta_sweep",
                "caption": f"Each method's BLEU gain on {where} ({casing(task, spec)}) over the baseline of the same "
                f"{swept[0]} (the warm-started rows: over its control, trained as long), mean ± sd over "
                f"{len(seeds)} seed(s), against the {swept[0]}; 0 = no gain.",
                "xlabel": swept[2],
                "rows": [
                    {"label": r["label"], "experiment": r["experiment"], "x": r["swept"]}
                    | ({"series": r["method"], "compare_to": r["compare_to"]} if r.get("compare_to") else {})
                    for r in rows
                ],
            }
        }
        return paper
    return paper | {
        "figures": {
            "buckets": {
                "kind": "length_buckets",
                "caption": f"BLEU by source length on {where} ({casing(task, spec)}): the baseline and each method, "
                f"with each one's gain over the row its table compares it with (the warm-started rows: their "
                f"control, trained as long) on the second axis.",
                "rows": [{"label": r["label"], "experiment": r["experiment"]} for r in rows],
            }
        },
    }


def sweep_words(spec: dict) -> tuple[str, str, str] | None:
    """A sweep's (setting in words, its values, the figure's x label); None without one."""
    if not spec.get("sweep"):
        return None
    ((stage, values),) = spec["sweep"].items()
    key = "depth" if stage == "depth" else next(iter(values))
    values = values if stage == "depth" else values[key]
    _, words, xlabel = SWEPT_WORDS.get(key, (key, key, key))
    return words, ", ".join(map(value_text, values)), xlabel


def bleu_kind(spec: dict) -> str:
    score = spec.get("score") or {}
    return "tokenized BLEU" if tokenized(score) else f"detokenized BLEU ({score['tokenize']})"


def casing(task: dict, spec: dict) -> str:
    """Whether the scores are cased: the task trains on lowercased text, or the score ignores case, or neither."""
    if task.get("lowercase"):
        return "lowercased (the task lowercases its text: the models never see case)"
    if (spec.get("score") or {}).get("lowercase"):
        return "case-insensitive (cased models, scored lowercased)"
    return "cased"
