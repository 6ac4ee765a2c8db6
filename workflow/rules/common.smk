# Helpers shared by the rules: everything the rules ask of the config goes through layerwise_nmt.config.

import functools
import json
from pathlib import Path
import os
import shlex
import sys

# Rules call the package as `python -m layerwise_nmt`, found through PYTHONPATH, so the same command works in the
# project's .venv, in the conda envs of envs/ and on SLURM nodes (where Snakemake re-reads this file).
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(Path(workflow.basedir) / "src"),
                                                          os.environ.get("PYTHONPATH")])))
# A job's one-line error also goes to Snakemake's console (its stderr is the log); only jobs get this (cli.py)
os.environ.update(LWNMT_ERRORS_ON_STDOUT="1")
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
GPUS_PER_JOB = config.get("gpus_per_job", 1)  # per training job; 0 = CPU

from layerwise_nmt import UserError
from layerwise_nmt import config as cfg

from snakemake.utils import validate

try:
    if config.get("rehearsal") and not isinstance(config["rehearsal"], dict):  # `--config rehearsal=<stand-ins>`
        from layerwise_nmt import rehearsal

        rehearsal.apply(config, config["rehearsal"])
    # One-line errors naming the key, plus the cross-references a schema cannot check (task → dataset, ...).
    cfg.validate(config)
    if workflow.is_main_process:  # every stage's settings through the classes that will read them (a typo here
        from layerwise_nmt.checks import check_experiments  # would otherwise fail the job, hours into the run)

        check_experiments(config, cache=Path(".snakemake/lwnmt-checked-configs.json"))
    TARGET_TASKS = cfg.runnable_tasks(config)
except UserError as err:  # named in the file that set the key: config.yaml, or an overlay (--configfile)
    overlays = [str(f) for f in workflow.overwrite_configfiles]
    raise WorkflowError(str(cfg.located(err, [str(f) for f in workflow.configfiles if str(f) not in overlays]
                                        + overlays)))
validate(config, cfg.SCHEMA)  # Snakemake's own pass fills in the schema defaults

if workflow.is_main_process:
    from layerwise_nmt.plan import budget_warnings
    from layerwise_nmt.slurm import patch_status_query

    patch_status_query()  # a plain `scancel` must fail the job, not hang the workflow (see layerwise_nmt/slurm.py)

    flagged = budget_warnings(config)  # estimated before anything runs: fix these before spending GPU-days
    for line in flagged:
        logger.warning(f"budget: {line}")
    logger.info(f"budget check: {len(flagged)} experiments whose averaging, early stopping, warm-up or restart "
                f"cannot work as configured (`lwnmt plan` lists every budget)")
    blocked = [s for s in cfg.all_statuses(config) if not s.runnable and s.state == "blocked"]
    if blocked:
        logger.info(f"{len(blocked)} tasks/experiments/table rows cannot run yet (e.g. {blocked[0].name}: "
                    f"{blocked[0].reason}); `lwnmt status` lists them all.")

wildcard_constraints:
    experiment=r"(?!data$)[^/]+",
    seed=r"\d+",
    task=r"[^/]+",
    lang=r"[a-z]{2,3}",
    pair=r"[a-z]{2,3}-[a-z]{2,3}",
    split=r"[a-z]+\d*",
    lenpen=r"\d+(\.\d+)?",
    vocab=r"joint|separate",
    paper=r"[^/.]+",
    figure=r"[^/.]+",
    row=r"\d+",


def task_of(wildcards):
    return config["tasks"][wildcards.task]


def experiment_of(wildcards):
    """The resolved experiment behind results/{task}/{experiment}/seed{seed}/…, checked against the path."""
    if wildcards.experiment not in config.get("experiments", {}):
        raise WorkflowError(f"no experiment named {wildcards.experiment!r} in the config")
    spec = cfg.experiment(config, wildcards.experiment)
    if spec["task"] != wildcards.task:
        raise WorkflowError(f"experiment {wildcards.experiment} runs on task {spec['task']}, not {wildcards.task}")
    return spec


def run_dir(wildcards):
    return cfg.run_dir(wildcards.task, wildcards.experiment, wildcards.seed)


def table_targets():
    """Every targeted table and figure, and the summary of all tables; each depends on its runnable rows'
    score.json / model (see report.smk)."""
    summary = ["results/summary.md"] if cfg.tables(config) else []
    return summary + [f"results/tables/{paper}/{table}.{ext}" for paper, table in cfg.tables(config)
            for ext in ("md", "csv", "tex", "html")] + [
        f"results/figures/{paper}/{figure}.{ext}" for paper, figure in cfg.tables(config, "figures")
        for ext in ("png", "pdf", "csv")]


def task_data_targets(task_name):
    """Everything the default target needs for one task: binarized splits, dictionaries, data statistics."""
    task = config["tasks"][task_name]
    pair, kind = cfg.pair(task), task.get("vocab", {}).get("kind", "joint")
    base = cfg.data_path(task_name)
    reference = [f"{base}/reference-check.json"] if task.get("reference") else []
    vocabs = [f"{base}/vocab/dict.{name}.txt" for name in ("joint", task["src"], task["tgt"])]
    return reference + vocabs + [f"{base}/text/stats.{pair}.json"] + [
        f"{base}/bin-{kind}/{split}.{pair}.{lang}.{ext}.npy"
        for split in task["splits"]
        for lang in (task["src"], task["tgt"])
        for ext in ("tokens", "offsets")
    ]


def checksum_flag(checksum, prefix=""):
    return f"--{prefix}{checksum[0].replace('_', '-')} {checksum[1]}" if checksum else ""


# --- fetch / extract (data.smk) -------------------------------------------------------------------


def get_source(wildcards):
    try:
        return cfg.file_source(config, wildcards.dataset, wildcards.file)
    except UserError as err:
        raise WorkflowError(str(err))


def fetch_args(wildcards):
    """The fetch command's options: every URL in order, checksum and its source, what to do by hand, and where the
    data mirror would hold the file."""
    datasets, entry = cfg.download_spec(config, wildcards.key, wildcards.archive)
    mirrored = " and ".join(cfg.mirror_location(config, dataset, wildcards.archive) for dataset in datasets)
    args = [f"--url {shlex.quote(url)}" for url in cfg.urls_of(entry)]
    args.append(checksum_flag(cfg.checksum_of(entry)))
    for option, value in (("--checksum-source", entry.get("checksum_source")), ("--manual", entry.get("manual")),
                          ("--expected-at", mirrored)):
        if value:
            args.append(f"{option} {shlex.quote(value)}")
    return " ".join(a for a in args if a)


def extract_args(wildcards):
    source = get_source(wildcards)
    args = ["--archive" if source.is_archive else "", checksum_flag(source.checksum),
            checksum_flag(source.archive_checksum, prefix="archive-"), f"--where {shlex.quote(source.where)}"]
    for option, value in (("--member", source.member), ("--pair-member", source.pair_member),
                          ("--checksum-source", source.checksum_source),
                          ("--archive-checksum-source", source.archive_checksum_source)):
        if value:
            args.append(f"{option} {shlex.quote(value)}")
    return " ".join(a for a in args if a)


# --- preprocessing (preprocess.smk) ---------------------------------------------------------------


def get_part(wildcards):
    """The raw file and split spec behind results/{task}/data/tok/{part}.{lang}."""
    task = task_of(wildcards)
    name, split = cfg.find_part(task, wildcards.part, wildcards.lang)
    return cfg.raw_path(task["dataset"], name), split


def tokenize_args(wildcards):
    name, split = get_part(wildcards)
    options = cfg.tokenize_options(task_of(wildcards), wildcards.lang, split)
    return f"--format {split.get('format', 'plain')} --options {json.dumps(options)!r}"


def reference_parts(wildcards):
    """The normalised (untokenized) parts of an evaluation split: what detokenized BLEU compares against."""
    task = task_of(wildcards)
    split = task["splits"][wildcards.split]
    if not split.get("parts"):
        raise WorkflowError(f"tasks/{wildcards.task}/splits/{wildcards.split} is held out of the training text: "
                            f"it has no untokenized reference for detokenized BLEU (score.tokenize must be none)")
    return [cfg.data_path(wildcards.task, "norm", cfg.part_name(t, wildcards.lang)) for t in split["parts"]]


def assemble_spec(wildcards):
    """The task's splits with every part resolved to (raw src, raw tgt, tokenized src, tokenized tgt, format):
    train/valid/test, or the one extra evaluation split named by the wildcard (NIST's mt04, ...)."""
    task = task_of(wildcards)
    names = [wildcards.split] if hasattr(wildcards, "split") else list(cfg.SPLITS)
    spec = {}
    for name, split in ((n, task["splits"][n]) for n in names):
        spec[name] = {key: split[key] for key in ("clean", "hold_out_every", "max_lines") if key in split}
        spec[name]["parts"] = [
            [cfg.raw_path(task["dataset"], t.format(lang=lang)) for lang in (task["src"], task["tgt"])]
            + [cfg.data_path(wildcards.task, "tok", cfg.part_name(t, lang)) for lang in (task["src"], task["tgt"])]
            + [split.get("format", "plain")]
            for t in split.get("parts", [])
        ]
    return spec


def train_texts(wildcards, stage="text"):
    task = task_of(wildcards)
    pair = cfg.pair(task)
    return [cfg.data_path(wildcards.task, stage, f"train.{pair}.{lang}") for lang in (task["src"], task["tgt"])]


def vocab_params(wildcards):
    opts = task_of(wildcards).get("vocab", {})
    return (f"--padding-factor {opts.get('padding_factor', 8)} --threshold {opts.get('threshold', 0)}"
            f" --nwords {opts.get('words', -1)}")


# --- training (train.smk) -------------------------------------------------------------------------


def train_inputs(wildcards):
    e = experiment_of(wildcards)
    base = cfg.data_path(e["task"])
    vocab = ["joint"] if e["vocab"] == "joint" else [e["src"], e["tgt"]]
    return [f"{base}/vocab/dict.{v}.txt" for v in vocab] + [
        f"{cfg.bin_dir(e['task'], e['vocab'])}/{split}.{e['pair']}.{lang}.{ext}.npy"
        for split in ("train", "valid")
        for lang in (e["src"], e["tgt"])
        for ext in ("tokens", "offsets")
    ]


def warm_start_model(wildcards):
    """The trained model a continued-learning run starts from: the parent's run with the same seed, else its first."""
    e = experiment_of(wildcards)
    if not e["warm_start"]:
        return []
    if isinstance(e["warm_start"], dict):  # a model trained elsewhere (e.g. imported from fairseq)
        return [e["warm_start"]["path"]]
    parent = cfg.experiment(config, e["warm_start"])
    seed = int(wildcards.seed) if int(wildcards.seed) in parent["seeds"] else parent["seeds"][0]
    return [f"{cfg.experiment_dir(config, parent['name'], seed)}/model.pt"]


def train_priority(wildcards):
    """Longest chain of training first (critical path): the run's own TFLOP (`lwnmt plan`'s estimate) plus its
    longest warm-started descendant's chain, + 1 so that every training goes before every decode (0). With fewer
    slots than ready jobs (the demo's 2 cores), a baseline others start from, then the longest independent run."""
    return round(1 + chain_tflop(experiment_of(wildcards)["name"]), 1)


@functools.cache
def chain_tflop(name):
    from layerwise_nmt.plan import experiment_cost

    cost = experiment_cost(config, name, cache=Path(".snakemake/lwnmt-parameter-counts.json"))
    own = 6 * cost.params * cost.tokens / 1e12 if cost.params and cost.tokens else 0.0
    children = [c for c, spec in config["experiments"].items() if spec.get("warm_start") == name]
    return own + max(map(chain_tflop, children), default=0.0)


def train_spec(wildcards):
    e = experiment_of(wildcards)
    spec = {"model": e["model"], "arch": e["arch"], "train": {**e["train"], "seed": int(wildcards.seed)}}
    return json.dumps(spec | ({"init_from": warm_start_model(wildcards)[0]} if e["warm_start"] else {}))


def export_spec(wildcards):
    """What `lwnmt export` writes into a run's model directory (layerwise_nmt.export.spec_for), as JSON."""
    from layerwise_nmt.export import spec_for

    return json.dumps(spec_for(config, experiment_of(wildcards)["name"], int(wildcards.seed)))


def export_inputs(wildcards):
    """The decoded model (averaged or final), the dictionaries, the BPE codes and the tuned length penalty."""
    spec = json.loads(export_spec(wildcards))
    files = {"model": spec["model"], "dicts": sorted({spec["src_dict"], spec["tgt_dict"]})}
    return files | {k: spec[k] for k in ("codes", "tuned_lenpen") if spec[k]}


def model_dir_targets():
    """One model directory per trained run of each runnable experiment a targeted row needs; none when the models
    stay on the machine that trained them (models_elsewhere)."""
    if config.get("models_elsewhere"):
        return []
    names = [n for n in cfg.rows_by_experiment(config) if cfg.experiment_status(config, n).runnable]
    return [f"{cfg.experiment_dir(config, n, s)}/model_dir" for n in names for s in cfg.experiment(config, n)["seeds"]]


def data_dir(wildcards):
    e = experiment_of(wildcards)
    return cfg.bin_dir(e["task"], e["vocab"])


# --- decoding and scoring (evaluate.smk) ----------------------------------------------------------


def tokenized_bleu(wildcards):
    return experiment_of(wildcards)["score"].get("tokenize", "none") == "none"


def stacked_references(wildcards):
    """A NIST split's untokenized references (ref/) hold its K references one after the other; tokenized text
    (text/) keeps the first only."""
    return not tokenized_bleu(wildcards) and task_of(wildcards)["splits"][wildcards.split].get("format") == "nist"


def model_for_decoding(wildcards):
    name = "averaged.pt" if experiment_of(wildcards)["average"] else "model.pt"
    return f"{run_dir(wildcards)}/{name}"


LENPEN_TUNING_SPLIT = "valid"  # "By tuning on the validation set" (MLRF §4.2)


def lenpen_grid(wildcards):
    """decode.tune_lenpen as path components (1.0 → "1"); the values were checked with the decoding settings
    (check_experiments) when the config was read."""
    return [f"{float(a):g}" for a in experiment_of(wildcards)["decode"].get("tune_lenpen") or []]


def tunes_lenpen(wildcards):
    return bool(lenpen_grid(wildcards))


def tuned_lenpen(wildcards):
    return f"{run_dir(wildcards)}/tuned_lenpen.json"


def decoded_prefix(wildcards):
    """Where a decoding's files go: {split}.*, or lenpen/{split}.{α}.* while tuning the length penalty."""
    if hasattr(wildcards, "lenpen"):
        return f"{run_dir(wildcards)}/lenpen/{wildcards.split}.{wildcards.lenpen}"
    return f"{run_dir(wildcards)}/{wildcards.split}"


def decoding_options(wildcards):
    options = dict(experiment_of(wildcards)["decode"])
    if hasattr(wildcards, "lenpen"):
        options["lenpen"] = float(wildcards.lenpen)
    return json.dumps(options)


def decoding_inputs(wildcards, tuned=True):
    e = experiment_of(wildcards)
    inputs = {"model": model_for_decoding(wildcards), "data": train_inputs(wildcards),
              "src": cfg.data_path(wildcards.task, "bpe", f"{wildcards.split}.{e['pair']}.{e['src']}")}
    if tuned and tunes_lenpen(wildcards):
        inputs["tuned"] = tuned_lenpen(wildcards)
    return inputs


# --- tables (report.smk) --------------------------------------------------------------------------


def paper_part(paper, kind, name):
    """config papers/<paper>/<kind>/<name>, or a one-line error listing what exists."""
    papers = config.get("papers", {})
    if paper not in papers:
        raise WorkflowError(f"results/{kind}/{paper}/{name}: no paper {paper!r} in the config; expected one of "
                            f"{', '.join(sorted(papers))}")
    parts = papers[paper].get(kind, {})
    if name not in parts:
        raise WorkflowError(f"results/{kind}/{paper}/{name}: paper {paper} has no {kind[:-1]} {name!r}; expected "
                            f"one of {', '.join(sorted(parts)) or 'none'}")
    return parts[name]


def table_spec(paper, table):
    """Rows resolved to (paper numbers, run state and reason, per split the score.json paths of every seed)."""
    spec = paper_part(paper, "tables", table)
    derived = spec.get("mean_of", {})  # metrics computed from others: no split of their own
    splits = sorted({cfg.split_of(m) for m in cfg.metrics_of(spec) + [m for ms in derived.values() for m in ms]
                     if m not in derived})

    def score_paths(name):
        e = cfg.experiment(config, name)
        return {split: [f"{cfg.experiment_dir(config, name, s)}/{split}.score.json" for s in e["seeds"]]
                for split in splits}

    rows = []
    for row in spec["rows"]:
        out = {"label": row["label"], "paper": row.get("paper", {})}
        if "experiment" in row:
            status = cfg.experiment_status(config, row["experiment"])
            out["state"], out["reason"] = status.state, status.reason
            out["note"] = " ".join(cfg.experiment(config, row["experiment"]).get("description", "").split())
            if status.runnable:
                e = cfg.experiment(config, row["experiment"])
                out["scores"] = score_paths(e["name"])
                out["runs"] = [cfg.experiment_dir(config, e["name"], s) for s in e["seeds"]]
                if row.get("compare_to") and cfg.experiment_status(config, row["compare_to"]).runnable:
                    out["baseline_scores"] = score_paths(row["compare_to"])
                    out["compare_to"] = row["compare_to"]
        else:
            quoted = "quoted_from" in row
            out["state"] = "quoted" if quoted else "blocked"
            out["reason"] = f"quoted from {row['quoted_from']}" if quoted else row.get("not_run", "no experiment")
        rows.append(out)
    return {"paper": paper, "table": table, "caption": spec.get("caption", ""), "scale": spec.get("scale", ""),
            "metric": cfg.metrics_of(spec), "speeds": spec.get("speeds", False), "rows": rows,
            "significance": spec.get("significance"), "mean_of": derived, "budget": spec.get("budget", False),
            "precision": config["papers"][paper].get("precision", "")}


def report_caption(paper, kind, name):
    """A table's or figure's caption for the Snakemake report (reStructuredText: one paragraph)."""
    spec = paper_part(paper, kind, name)
    scale = f" Scale: {spec['scale']}." if spec.get("scale") else ""
    title = config["papers"][paper].get("title", paper)
    return " ".join(f"**{title}, {name}.** {spec.get('caption', '')}{scale}".split())


def inspection_of(wildcards):
    """What the `inspect` job of a figure's row reads out of which model: {kind, model, options}."""
    rows = figure_spec(wildcards.paper, wildcards.figure)["rows"]
    row = rows[int(wildcards.row)] if int(wildcards.row) < len(rows) else {}
    if "inspect" not in row:
        raise WorkflowError(f"results/figures/{wildcards.paper}/{wildcards.figure}: row {wildcards.row} has nothing "
                            f"to inspect (not an aggregation_shares or attention row that can run)")
    return row["inspect"]


def inspection_inputs(wildcards):
    """The model, and the translation an attention map is teacher-forced on."""
    job = inspection_of(wildcards)
    return {"model": job["model"], **{k: job["options"][k] for k in ("hypothesis",) if k in job["options"]}}


def figure_spec(paper, figure):
    """Rows resolved to run files (first seed): metrics.csv for curves, what `inspect` reads out of model.pt for
    aggregation shares and attention maps, every seed's test.score.json for sweeps and length buckets."""
    spec = paper_part(paper, "figures", figure)
    rows = []
    for index, row in enumerate(spec["rows"]):
        out = dict(row)
        status = cfg.experiment_status(config, row["experiment"])
        out["state"], out["reason"] = status.state, status.reason
        if status.runnable:
            e = cfg.experiment(config, row["experiment"])
            runs = [cfg.experiment_dir(config, e["name"], s) for s in e["seeds"]]
            if spec["kind"] == "accuracy_curves":
                # metrics.csv is not an output of training (it must survive a failed job for resume): the model
                # stands for it, unless the models stayed on the machine that trained them (study_gpu.sh collect)
                out["metrics"] = f"{cfg.save_dir(runs[0])}/metrics.csv"
                out["needs"] = [out["metrics"] if config["models_elsewhere"] else f"{runs[0]}/model.pt"]
            elif spec["kind"] in ("aggregation_shares", "attention"):
                out["inspection"] = f"{runs[0]}/inspect/{paper}.{figure}.{index}.json"
                out["needs"] = [out["inspection"]]
                out["inspect"] = {"kind": spec["kind"], "model": f"{runs[0]}/model.pt", "options": {}}
                if spec["kind"] == "attention":  # the model teacher-forced on its own translation of one sentence
                    out["inspect"]["options"] = dict(
                        hypothesis=f"{runs[0]}/test.bpe", src=e["src"], tgt=e["tgt"],
                        data=cfg.bin_dir(e["task"], e["vocab"]), module=row.get("module", ""),
                        source=cfg.data_path(e["task"], "bpe", f"test.{e['pair']}.{e['src']}"),
                        sentence=spec.get("sentence", 0))
            else:
                out["scores"] = out["needs"] = [f"{run}/test.score.json" for run in runs]
        rows.append(out)
    return {"paper": paper, "figure": figure, "kind": spec["kind"], "caption": spec.get("caption", ""),
            "xlabel": spec.get("xlabel", ""), "rows": rows, "notice": cfg.get(config, "rehearsal/notice")}

