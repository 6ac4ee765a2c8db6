"""What the workflow's rules ask of the grid: targets, each rule's inputs and command options for a job's wildcards.

snakemake_glue/snakefile.py binds one `RuleInputs` to Snakemake's config, and workflow/rules/common.smk hands its
methods to the rules as input and params functions; everything here is plain Python over the config dict, so it is
tested without Snakemake."""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable

from .. import UserError
from . import layout
from .experiments import experiment, model_dir_spec
from .layout import bin_dir, data_path, experiment_dir, raw_path
from .names import did_you_mean
from .own_models import user_code_flags, user_model
from .papers import tables
from .reports import figure_spec, report_caption, table_spec
from .sources import checksum_of, download_spec, file_identity, file_source, urls_of, user_file
from .status import experiment_status, rows_by_experiment
from .tasks import SPLITS, find_part, heldout_sets, pair, part_name, segmented, tokenize_options

LENPEN_TUNING_SPLIT = "valid"  # "By tuning on the validation set" (MLRF §4.2)


class RuleInputs:
    """The config's answers for one job's wildcards (task, experiment, seed, split, ...)."""

    def __init__(self, config: dict, cost: Callable[[dict, str], Any] | None = None):
        """`cost(config, experiment)`: its parameter count and trained tokens (pricing.experiment_cost), for the
        training priorities; handed in, since the budgets read the grid."""
        self.config = config
        self.cost = cost
        self._chain_tflop: dict[str, float] = {}

    def task_of(self, wildcards):
        if wildcards.task not in self.config["tasks"]:
            raise UserError(f"results/{wildcards.task}/…: no task {wildcards.task!r} in the config"
                            f"{did_you_mean(wildcards.task, self.config['tasks'], 'tasks')}")
        return self.config["tasks"][wildcards.task]

    def experiment_of(self, wildcards):
        """The resolved experiment behind results/{task}/{experiment}/seed{seed}/…, checked against the
        path."""
        experiments = self.config.get("experiments", {})
        if wildcards.experiment not in experiments:
            self.task_of(wildcards)
            on_task = [n for n, e in experiments.items() if e["task"] == wildcards.task]
            hint = did_you_mean(wildcards.experiment, on_task, "experiments")
            raise UserError(f"results/{wildcards.task}/{wildcards.experiment}/…: no experiment "
                            f"{wildcards.experiment!r} in the config{hint}")
        spec = experiment(self.config, wildcards.experiment)
        if spec["task"] != wildcards.task:
            raise UserError(f"experiment {wildcards.experiment} runs on task {spec['task']}, not {wildcards.task}")
        return spec

    def run_dir(self, wildcards):
        return layout.run_dir(wildcards.task, wildcards.experiment, wildcards.seed)

    def table_targets(self):
        """Every targeted table and figure, and the summary of all tables; each depends on its runnable rows'
        score.json / model (see report.smk)."""
        summary = [layout.SUMMARY] if tables(self.config) else []
        return (summary + [f for paper, table in tables(self.config) for f in layout.table_files(paper, table)]
                + [f for paper, figure in tables(self.config, "figures") for f in layout.figure_files(paper, figure)])

    def summary_inputs(self):
        """Every table's CSV, which the summary of all tables reads."""
        return [layout.table_files(paper, table)[1] for paper, table in tables(self.config)]

    def task_data_targets(self, task_name):
        """Everything the default target needs for one task: binarized splits, dictionaries, data
        statistics."""
        task = self.config["tasks"][task_name]
        lang_pair, kind = pair(task), task.get("vocab", {}).get("kind", "joint")
        base = data_path(task_name)
        reference = [f"{base}/reference-check.json"] if task.get("reference") else []
        vocabs = [f"{base}/vocab/dict.{name}.txt" for name in ("joint", task["src"], task["tgt"])]
        return reference + vocabs + [f"{base}/text/stats.{lang_pair}.json"] + [
            f"{base}/bin-{kind}/{split}.{lang_pair}.{lang}.{ext}.npy"
            for split in task["splits"]
            for lang in (task["src"], task["tgt"])
            for ext in ("tokens", "offsets")
        ]

    # --- fetch / extract (data.smk) -------------------------------------------------------------------

    def get_source(self, wildcards):
        return file_source(self.config, wildcards.dataset, wildcards.file)

    def own_file(self, wildcards):
        """The extract job's input: the user's own file (user_path, local:), else nothing (see raw_identity)."""
        return user_file(self.config, wildcards.dataset, wildcards.file)

    def raw_identity(self, wildcards):
        """What Snakemake compares to decide whether a raw file is redone: what the file is (its checksums and
        place in an archive), never where this run would get it from (data mirror, download cache or URL): the same
        checksummed file from any of them is the same input."""
        return json.dumps(file_identity(self.config, wildcards.dataset, wildcards.file), sort_keys=True)

    def fetch_args(self, wildcards):
        """The fetch command's options: every URL in order, checksum and its source, what to do by hand."""
        return shlex.join(self.fetch_argv(wildcards.key, wildcards.archive)[2:])

    def fetch_argv(self, key, name):
        """`lwnmt fetch` of results/downloads/<key>/<name>, as arguments."""
        _, entry = download_spec(self.config, key, name)
        args = ["fetch", layout.download_file(key, name)]
        for url in urls_of(entry):
            args += ["--url", url]
        args += checksum_argv(checksum_of(entry))
        for option, value in (("--checksum-source", entry.get("checksum_source")), ("--manual", entry.get("manual"))):
            if value:
                args += [option, value]
        return args

    def extract_source(self, wildcards):
        """Where the extract job reads the raw file from in this run (a data mirror's file, the download cache, an
        outer archive's raw file, the user's file); a param derived from the job's output, which Snakemake does not
        compare between runs."""
        return self.extract_argv(wildcards.dataset, wildcards.file)[1]

    def extract_args(self, wildcards):
        return shlex.join(self.extract_argv(wildcards.dataset, wildcards.file)[3:])

    def extract_argv(self, dataset, name):
        """`lwnmt extract SOURCE results/raw/<dataset>/<name> ...`, as arguments. A source the job does not find
        (a download not yet in the cache, an outer archive not yet extracted) comes with --make-input: the command
        that makes it first, itself an extract with its own --make-input where it needs one."""
        source = file_source(self.config, dataset, name)
        args = ["extract", source.path, raw_path(dataset, name)]
        args += ["--archive"] * source.is_archive + ["--text"] * source.text
        args += checksum_argv(source.checksum) + checksum_argv(source.archive_checksum, prefix="archive-")
        args += ["--where", source.where]
        for option, value in (("--member", source.member), ("--pair-member", source.pair_member),
                              ("--checksum-source", source.checksum_source),
                              ("--archive-checksum-source", source.archive_checksum_source)):
            if value:
                args += [option, value]
        if layout.is_download(source.path):
            key, file = source.path.split("/")[2:4]
            args += ["--make-input", json.dumps(self.fetch_argv(key, file))]
        elif layout.is_raw(source.path):
            args += ["--make-input", json.dumps(self.extract_argv(dataset, source.path.split("/", 3)[3]))]
        return args

    # --- preprocessing (preprocess.smk) ---------------------------------------------------------------

    def get_part(self, wildcards):
        """The raw file and split spec behind results/{task}/data/tok/{part}.{lang}."""
        task = self.task_of(wildcards)
        name, split = find_part(task, wildcards.part, wildcards.lang)
        return raw_path(task["dataset"], name), split

    def tokenize_args(self, wildcards):
        name, split = self.get_part(wildcards)
        options = tokenize_options(self.task_of(wildcards), wildcards.lang, split)
        return f"--format {split.get('format', 'plain')} --options {json.dumps(options)!r}"

    def concat_args(self, wildcards):
        """`lwnmt concat`'s --max-lines, where the split keeps only its first lines."""
        max_lines = self.task_of(wildcards)["splits"][wildcards.split].get("max_lines")
        return f"--max-lines {int(max_lines)}" if max_lines is not None else ""

    def reference_parts(self, wildcards):
        """The normalised (untokenized) parts of an evaluation split: what detokenized BLEU compares against."""
        task = self.task_of(wildcards)
        split = task["splits"][wildcards.split]
        if not split.get("parts"):
            raise UserError(f"tasks/{wildcards.task}/splits/{wildcards.split} is held out of the training text: "
                            f"it has no untokenized reference for detokenized BLEU (score.tokenize must be none)")
        return [data_path(wildcards.task, "norm", part_name(t, wildcards.lang)) for t in split["parts"]]

    def assemble_spec(self, wildcards):
        """The task's splits with every part resolved to (raw src, raw tgt, tokenized src, tokenized tgt,
        format): train/valid/test, or the one extra evaluation split named by the wildcard (NIST's mt04, ...)."""
        task = self.task_of(wildcards)
        names = [wildcards.split] if hasattr(wildcards, "split") else list(SPLITS)
        spec = {}
        for name, split in ((n, task["splits"][n]) for n in names):
            spec[name] = {key: split[key] for key in ("clean", "hold_out_every", "max_lines", "empty_lines",
                                                      "overlap_with_train") if key in split}
            spec[name]["parts"] = [
                [raw_path(task["dataset"], t.format(lang=lang)) for lang in (task["src"], task["tgt"])]
                + [data_path(wildcards.task, "tok", part_name(t, lang)) for lang in (task["src"], task["tgt"])]
                + [split.get("format", "plain")]
                for t in split.get("parts", [])
            ]
        return spec

    def assemble_inputs(self, wildcards):
        """The assemble job's files: every part's raw and tokenized sides and, for an evaluation split assembled
        apart from train that is checked for overlap with it, the training source text."""
        spec = self.assemble_spec(wildcards)
        paths = [path for split in spec.values() for part in split["parts"] for path in part[:4]]
        if "train" not in spec and any(split.get("overlap_with_train") for split in spec.values()):
            paths.append(self.train_texts(wildcards)[0])
        return paths

    def train_texts(self, wildcards, stage="text"):
        task = self.task_of(wildcards)
        return [data_path(wildcards.task, stage, f"train.{pair(task)}.{lang}") for lang in (task["src"], task["tgt"])]

    def bpe_learn_texts(self, wildcards):
        """The training text BPE is learned on: the sides that do not come segmented."""
        task = self.task_of(wildcards)
        return [path for path, lang in zip(self.train_texts(wildcards), (task["src"], task["tgt"]))
                if lang not in segmented(task)]

    def bpe_codes(self, wildcards):
        """The codes apply_bpe segments one side with: none for a word-level task or a side that comes segmented
        (copied as it is, said in its log)."""
        task = self.task_of(wildcards)
        if not task.get("bpe") or wildcards.lang in segmented(task) or len(self.bpe_learn_texts(wildcards)) == 0:
            return []
        return [data_path(wildcards.task, "bpe", "code")]

    def vocab_params(self, wildcards):
        opts = self.task_of(wildcards).get("vocab", {})
        return (f"--padding-factor {opts.get('padding_factor', 8)} --threshold {opts.get('threshold', 0)}"
                f" --nwords {opts.get('words', -1)}")

    # --- training (train.smk) -------------------------------------------------------------------------

    def train_inputs(self, wildcards):
        e = self.experiment_of(wildcards)
        base = data_path(e["task"])
        vocab = ["joint"] if e["vocab"] == "joint" else [e["src"], e["tgt"]]
        return [f"{base}/vocab/dict.{v}.txt" for v in vocab] + [
            f"{bin_dir(e['task'], e['vocab'])}/{split}.{e['pair']}.{lang}.{ext}.npy"
            for split in ("train", "valid")
            for lang in (e["src"], e["tgt"])
            for ext in ("tokens", "offsets")
        ]

    def warm_start_model(self, wildcards):
        """The trained model a continued-learning run starts from: the parent's run with the same seed, else its
        first."""
        e = self.experiment_of(wildcards)
        if not e["warm_start"]:
            return []
        if isinstance(e["warm_start"], dict):  # a model trained elsewhere (e.g. imported from fairseq)
            return [e["warm_start"]["path"]]
        parent = experiment(self.config, e["warm_start"])
        seed = int(wildcards.seed) if int(wildcards.seed) in parent["seeds"] else parent["seeds"][0]
        return [f"{experiment_dir(self.config, parent['name'], seed)}/model.pt"]

    def train_priority(self, wildcards):
        """Longest chain of training first (critical path): the run's own TFLOP (`lwnmt plan`'s estimate) plus its
        longest warm-started descendant's chain, + 1 so that every training goes before every decode (0). With
        fewer slots than ready jobs (the demo's 2 cores), a baseline others start from, then the longest independent
        run."""
        return round(1 + self.chain_tflop(self.experiment_of(wildcards)["name"]), 1)

    def chain_tflop(self, name):
        if name not in self._chain_tflop:
            cost = self.cost(self.config, name) if self.cost else None
            own = 6 * cost.params * cost.tokens / 1e12 if cost and cost.params and cost.tokens else 0.0
            children = [c for c, spec in self.config["experiments"].items() if spec.get("warm_start") == name]
            self._chain_tflop[name] = own + max(map(self.chain_tflop, children), default=0.0)
        return self._chain_tflop[name]

    def train_spec(self, wildcards):
        e = self.experiment_of(wildcards)
        spec = {"model": e["model"], "arch": e["arch"], "train": {**e["train"], "seed": int(wildcards.seed)}}
        user = user_model(self.config, e["model"])  # a model of the config's own: the job imports its class
        spec |= {"user_model": user} if user else {}
        return json.dumps(spec | ({"init_from": self.warm_start_model(wildcards)[0]} if e["warm_start"] else {}))

    def average_settings(self, wildcards):
        """The experiment's `average:` as `lwnmt average` reads it, its defaults those of AverageConfig."""
        from ..training.config import AverageConfig

        return AverageConfig.from_dict(self.experiment_of(wildcards)["average"] or {})

    def export_spec(self, wildcards):
        """What `lwnmt export` writes into a run's model directory (experiments.model_dir_spec), as JSON."""
        return json.dumps(model_dir_spec(self.config, self.experiment_of(wildcards)["name"], int(wildcards.seed)))

    def export_inputs(self, wildcards):
        """The decoded model (averaged or final), the dictionaries, the BPE codes and the tuned length penalty."""
        spec = json.loads(self.export_spec(wildcards))
        files = {"model": spec["model"], "dicts": sorted({spec["src_dict"], spec["tgt_dict"]})}
        return files | {k: spec[k] for k in ("codes", "tuned_lenpen") if spec[k]}

    def model_dir_targets(self):
        """One model directory per trained run of each runnable experiment a targeted row needs; none when the
        models stay on the machine that trained them (models_elsewhere)."""
        if self.config.get("models_elsewhere"):
            return []
        names = [n for n in rows_by_experiment(self.config) if experiment_status(self.config, n).runnable]
        return [f"{experiment_dir(self.config, n, s)}/model_dir"
                for n in names for s in experiment(self.config, n)["seeds"]]

    def data_dir(self, wildcards):
        e = self.experiment_of(wildcards)
        return bin_dir(e["task"], e["vocab"])

    # --- decoding and scoring (evaluate.smk) ----------------------------------------------------------

    def tokenized_bleu(self, wildcards):
        return self.experiment_of(wildcards)["score"].get("tokenize", "none") == "none"

    def stacked_references(self, wildcards):
        """A NIST split's untokenized references (ref/) hold its K references one after the other; tokenized
        text (text/) keeps the first only."""
        split = self.task_of(wildcards)["splits"][wildcards.split]
        return not self.tokenized_bleu(wildcards) and split.get("format") == "nist"

    def model_for_decoding(self, wildcards):
        name = "averaged.pt" if self.experiment_of(wildcards)["average"] else "model.pt"
        return f"{self.run_dir(wildcards)}/{name}"

    def lenpen_grid(self, wildcards):
        """decode.tune_lenpen as path components (1.0 → "1"); the values were checked with the decoding
        settings (check_experiments) when the config was read."""
        return [f"{float(a):g}" for a in self.experiment_of(wildcards)["decode"].get("tune_lenpen") or []]

    def tunes_lenpen(self, wildcards):
        return bool(self.lenpen_grid(wildcards))

    def tuned_lenpen(self, wildcards):
        return f"{self.run_dir(wildcards)}/tuned_lenpen.json"

    def decoded_prefix(self, wildcards):
        """Where a decoding's files go: {split}.*, or lenpen/{split}.{α}.* while tuning the length penalty."""
        if hasattr(wildcards, "lenpen"):
            return f"{self.run_dir(wildcards)}/lenpen/{wildcards.split}.{wildcards.lenpen}"
        return f"{self.run_dir(wildcards)}/{wildcards.split}"

    def decoding_options(self, wildcards):
        options = dict(self.experiment_of(wildcards)["decode"])
        if hasattr(wildcards, "lenpen"):
            options["lenpen"] = float(wildcards.lenpen)
        return json.dumps(options)

    def translate_flags(self, wildcards):
        """The translate job's further flags: the tuned length penalty's file (except while tuning it), and the
        code of a model of the config's own (--user-dir or --user-module), which loading a model file never
        imports unless named."""
        flags = user_code_flags(self.config, self.experiment_of(wildcards)["model"])
        if self.tunes_lenpen(wildcards) and not hasattr(wildcards, "lenpen"):
            flags = ["--lenpen-from", self.tuned_lenpen(wildcards)] + flags
        return shlex.join(flags)

    def score_inputs(self, wildcards):
        """The hypotheses (tokenized BLEU: .txt against the tokenized text; otherwise the detokenized .detok against
        the untokenized references), the decoding's record, the references and the source (length buckets)."""
        e, tokenized = self.experiment_of(wildcards), self.tokenized_bleu(wildcards)
        prefix, split = self.decoded_prefix(wildcards), f"{wildcards.split}.{e['pair']}"
        return {"hyp": f"{prefix}.{'txt' if tokenized else 'detok'}", "decoding": f"{prefix}.json",
                "ref": data_path(wildcards.task, "text" if tokenized else "ref", f"{split}.{e['tgt']}"),
                "src": data_path(wildcards.task, "text", f"{split}.{e['src']}")}

    def decoding_inputs(self, wildcards, tuned=True):
        e = self.experiment_of(wildcards)
        inputs = {"model": self.model_for_decoding(wildcards), "data": self.train_inputs(wildcards),
                  "src": data_path(wildcards.task, "bpe", f"{wildcards.split}.{e['pair']}.{e['src']}")}
        if tuned and self.tunes_lenpen(wildcards):
            inputs["tuned"] = self.tuned_lenpen(wildcards)
        return inputs

    def heldout_inputs(self, wildcards):
        """A held-out set's translation: the run's model directory (the model test.txt was decoded with, and the
        task's tokenization and BPE, which turn raw text into exactly what the test set's rules make) and the raw
        source file."""
        e = self.experiment_of(wildcards)
        sets = heldout_sets(self.config, e["task"])
        if wildcards.heldout not in sets:
            named = e["task"] if sets else f"{e['task']} (or no held-out folder: heldout_dir / $LWNMT_HELDOUT_DIR)"
            raise UserError(f"{self.run_dir(wildcards)}/heldout.{wildcards.heldout}.*: no held-out set "
                            f"{wildcards.heldout!r} in tasks/{named}{did_you_mean(wildcards.heldout, sets, 'sets')}")
        return {"model": f"{self.run_dir(wildcards)}/model_dir", "src": sets[wildcards.heldout]}

    def heldout_targets(self, name: str, seed: int) -> list[str]:
        """The translations of every held-out set of the experiment's task by one run, where a folder holds them."""
        run = experiment_dir(self.config, name, seed)
        return [f"{layout.heldout_prefix(run, s)}.txt" for s in heldout_sets(self.config, experiment(self.config,
                                                                                                    name)["task"])]

    # --- tables and figures (report.smk) --------------------------------------------------------------

    def table_spec(self, paper, table):
        return table_spec(self.config, paper, table)

    def figure_spec(self, paper, figure):
        return figure_spec(self.config, paper, figure)

    def report_caption(self, paper, kind, name):
        return report_caption(self.config, paper, kind, name)

    def table_inputs(self, wildcards):
        """The score files a table reads: its rows' and their baselines'."""
        rows = table_spec(self.config, wildcards.paper, wildcards.table)["rows"]
        return sorted({path for row in rows for key in ("scores", "baseline_scores")
                       for paths in row.get(key, {}).values() for path in paths})

    def figure_inputs(self, wildcards):
        """The files a figure's rows read."""
        rows = figure_spec(self.config, wildcards.paper, wildcards.figure)["rows"]
        return [path for row in rows for path in row.get("needs", [])]

    def inspection_of(self, wildcards):
        """What the `inspect` job of a figure's row reads out of which model: {kind, model, options}."""
        rows = figure_spec(self.config, wildcards.paper, wildcards.figure)["rows"]
        row = rows[int(wildcards.row)] if int(wildcards.row) < len(rows) else {}
        if "inspect" not in row:
            raise UserError(f"results/figures/{wildcards.paper}/{wildcards.figure}: row {wildcards.row} has nothing "
                            f"to inspect (not an aggregation_shares or attention row that can run)")
        return row["inspect"]

    def inspection_flags(self, wildcards):
        """The inspect job's flags naming the code of a model of the config's own (none for a built-in one)."""
        return shlex.join(user_code_flags(self.config, self.experiment_of(wildcards)["model"]))

    def inspection_inputs(self, wildcards):
        """The model, and the translation an attention map is teacher-forced on."""
        job = self.inspection_of(wildcards)
        return {"model": job["model"], **{k: job["options"][k] for k in ("hypothesis",) if k in job["options"]}}


def checksum_argv(checksum: tuple[str, str] | None, prefix: str = "") -> list[str]:
    return [f"--{prefix}{checksum[0].replace('_', '-')}", checksum[1]] if checksum else []
