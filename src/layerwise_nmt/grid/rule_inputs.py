"""What the workflow's rules ask of the grid: targets, each rule's inputs and command options for a job's wildcards
(the data rules' in data_rule_inputs.py, which `RuleInputs` extends).

snakemake_glue/snakefile.py binds one `RuleInputs` to Snakemake's config, and workflow/rules/common.smk hands its
methods to the rules as input and params functions; everything here is plain Python over the config dict, so it is
tested without Snakemake."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .. import UserError
from ..job_specs import InspectSpec, ScoreSpec, TrainSpec, TranslateSpec
from ..scoring.config import tokenized
from .data_rule_inputs import DataRuleInputs
from . import layout
from .experiments import experiment, export_spec
from .layout import bin_dir, data_path, experiment_dir
from .names import did_you_mean
from .own_models import user_model
from .papers import tables
from .reports import figure_spec, report_caption, table_spec
from .status import experiment_status, rows_by_experiment
from .tasks import heldout_sets

LENPEN_TUNING_SPLIT = "valid"  # "By tuning on the validation set" (MLRF §4.2)


class RuleInputs(DataRuleInputs):
    """The config's answers for one job's wildcards (task, experiment, seed, split, ...)."""

    def __init__(self, config: dict, cost: Callable[[dict, str], Any] | None = None):
        """`cost(config, experiment)`: its parameter count and trained tokens (pricing.experiment_cost), for the
        training priorities; handed in, since the budgets read the grid."""
        super().__init__(config)
        self.cost = cost
        self._chain_tflop: dict[str, float] = {}

    def experiment_of(self, wildcards):
        """The resolved experiment behind results/{task}/{experiment}/seed{seed}/…, checked against the
        path."""
        experiments = self.config.get("experiments", {})
        if wildcards.experiment not in experiments:
            self.task_of(wildcards)
            on_task = [n for n, e in experiments.items() if e["task"] == wildcards.task]
            hint = did_you_mean(wildcards.experiment, on_task, "experiments")
            raise UserError(
                f"results/{wildcards.task}/{wildcards.experiment}/…: no experiment "
                f"{wildcards.experiment!r} in the config{hint}"
            )
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
        return (
            summary
            + [f for paper, table in tables(self.config) for f in layout.table_files(paper, table)]
            + [f for paper, figure in tables(self.config, "figures") for f in layout.figure_files(paper, figure)]
        )

    def summary_inputs(self):
        """Every table's CSV, which the summary of all tables reads."""
        return [layout.table_files(paper, table)[1] for paper, table in tables(self.config)]

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
        return [layout.model_file(experiment_dir(self.config, parent["name"], seed))]

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

    def train_spec(self, wildcards) -> str:
        """The training job's spec, as JSON (job_specs.TrainSpec)."""
        e = self.experiment_of(wildcards)
        return TrainSpec(
            model=e["model"],
            arch=e["arch"],
            train={**e["train"], "seed": int(wildcards.seed)},
            user_model=user_model(self.config, e["model"]),  # a model of the config's own: the job imports its class
            init_from=self.warm_start_model(wildcards)[0] if e["warm_start"] else None,
        ).to_json()

    def average_settings(self, wildcards):
        """The experiment's `average:` as `lwnmt average` reads it, its defaults those of AverageConfig."""
        from ..training.config import AverageConfig

        return AverageConfig.from_dict(self.experiment_of(wildcards)["average"] or {})

    def score_spec(self, wildcards) -> str:
        """A score job's spec (job_specs.ScoreSpec), as JSON: the run and split it scores and the experiment's
        `score:` settings."""
        e = self.experiment_of(wildcards)
        return ScoreSpec(
            wildcards.experiment, wildcards.task, int(wildcards.seed), wildcards.split, e["score"]
        ).to_json()

    def export_spec(self, wildcards) -> str:
        """What `lwnmt export` writes into a run's model directory (job_specs.ExportSpec), as JSON."""
        return self._export_spec(wildcards).to_json()

    def _export_spec(self, wildcards):
        return export_spec(self.config, self.experiment_of(wildcards)["name"], int(wildcards.seed))

    def export_inputs(self, wildcards):
        """The decoded model (averaged or final), the dictionaries, the BPE codes and the tuned length penalty."""
        spec = self._export_spec(wildcards)
        files = {"model": spec.model, "dicts": sorted({spec.src_dict, spec.tgt_dict})}
        return files | {k: getattr(spec, k) for k in ("codes", "tuned_lenpen") if getattr(spec, k)}

    def model_dir_targets(self):
        """One model directory per trained run of each runnable experiment a targeted row needs; none when the
        models stay on the machine that trained them (models_elsewhere)."""
        if self.config.get("models_elsewhere"):
            return []
        names = [n for n in rows_by_experiment(self.config) if experiment_status(self.config, n).runnable]
        return [
            f"{experiment_dir(self.config, n, s)}/model_dir" for n in names for s in experiment(self.config, n)["seeds"]
        ]

    def data_dir(self, wildcards):
        e = self.experiment_of(wildcards)
        return bin_dir(e["task"], e["vocab"])

    # --- decoding and scoring (evaluate.smk) ----------------------------------------------------------

    def tokenized_bleu(self, wildcards):
        return tokenized(self.experiment_of(wildcards)["score"])

    def stacked_references(self, wildcards):
        """A NIST split's untokenized references (ref/) hold its K references one after the other; tokenized
        text (text/) keeps the first only."""
        split = self.task_of(wildcards)["splits"][wildcards.split]
        return not self.tokenized_bleu(wildcards) and split.get("format") == "nist"

    def model_for_decoding(self, wildcards):
        return layout.decoded_model(self.run_dir(wildcards), bool(self.experiment_of(wildcards)["average"]))

    def lenpen_grid(self, wildcards):
        """decode.tune_lenpen as path components (1.0 → "1"); the values were checked with the decoding
        settings (check_experiments) when the config was read."""
        return [f"{float(a):g}" for a in self.experiment_of(wildcards)["decode"].get("tune_lenpen") or []]

    def tunes_lenpen(self, wildcards):
        return bool(self.lenpen_grid(wildcards))

    def tuned_lenpen(self, wildcards):
        return layout.tuned_lenpen_file(self.run_dir(wildcards))

    def decoded_prefix(self, wildcards):
        """Where a decoding's files go: {split}.*, or lenpen/{split}.{α}.* while tuning the length penalty."""
        if hasattr(wildcards, "lenpen"):
            return f"{self.run_dir(wildcards)}/lenpen/{wildcards.split}.{wildcards.lenpen}"
        return f"{self.run_dir(wildcards)}/{wildcards.split}"

    def translate_spec(self, wildcards) -> str:
        """A decoding's spec (job_specs.TranslateSpec), as JSON: the experiment's decoding settings (at the α being
        tried while tuning the length penalty, and with the tuned α's file after), the data directory and the
        languages of its model file, and the code of a model of the config's own."""
        e = self.experiment_of(wildcards)
        decode = dict(e["decode"])
        if hasattr(wildcards, "lenpen"):
            decode["lenpen"] = float(wildcards.lenpen)
        return replace(
            self._model_dir_translate_spec(wildcards),
            decode=decode,
            data=self.data_dir(wildcards),
            src=e["src"],
            tgt=e["tgt"],
        ).to_json()

    def heldout_translate_spec(self, wildcards) -> str:
        """A held-out set's decoding spec, as JSON: the run's model directory holds the decoding settings, data and
        languages; the spec adds the tuned α's file and a model of the config's own."""
        return self._model_dir_translate_spec(wildcards).to_json()

    def _model_dir_translate_spec(self, wildcards) -> TranslateSpec:
        tuned = self.tunes_lenpen(wildcards) and not hasattr(wildcards, "lenpen")
        return TranslateSpec(
            lenpen_from=self.tuned_lenpen(wildcards) if tuned else None,
            user_model=user_model(self.config, self.experiment_of(wildcards)["model"]),
        )

    def score_inputs(self, wildcards):
        """The hypotheses (tokenized BLEU: .txt against the tokenized text; otherwise the detokenized .detok against
        the untokenized references), the decoding's record, the references and the source (length buckets)."""
        e, tokenized = self.experiment_of(wildcards), self.tokenized_bleu(wildcards)
        prefix, split = self.decoded_prefix(wildcards), f"{wildcards.split}.{e['pair']}"
        return {
            "hyp": f"{prefix}.{'txt' if tokenized else 'detok'}",
            "decoding": f"{prefix}.json",
            "ref": data_path(wildcards.task, "text" if tokenized else "ref", f"{split}.{e['tgt']}"),
            "src": data_path(wildcards.task, "text", f"{split}.{e['src']}"),
        }

    def decoding_inputs(self, wildcards, with_tuned_lenpen=True):
        """The model, the data and the source; with the tuned length penalty's file where the experiment tunes one
        (not while tuning it)."""
        e = self.experiment_of(wildcards)
        inputs = {
            "model": self.model_for_decoding(wildcards),
            "data": self.train_inputs(wildcards),
            "src": data_path(wildcards.task, "bpe", f"{wildcards.split}.{e['pair']}.{e['src']}"),
        }
        if with_tuned_lenpen and self.tunes_lenpen(wildcards):
            inputs["lenpen"] = self.tuned_lenpen(wildcards)
        return inputs

    def heldout_inputs(self, wildcards):
        """A held-out set's translation: the run's model directory (the model test.txt was decoded with, and the
        task's tokenization and BPE, which turn raw text into exactly what the test set's rules make) and the raw
        source file."""
        e = self.experiment_of(wildcards)
        sets = heldout_sets(self.config, e["task"])
        if wildcards.heldout not in sets:
            named = e["task"] if sets else f"{e['task']} (or no held-out folder: heldout_dir / $LWNMT_HELDOUT_DIR)"
            raise UserError(
                f"{self.run_dir(wildcards)}/heldout.{wildcards.heldout}.*: no held-out set "
                f"{wildcards.heldout!r} in tasks/{named}{did_you_mean(wildcards.heldout, sets, 'sets')}"
            )
        return {"model": f"{self.run_dir(wildcards)}/model_dir", "src": sets[wildcards.heldout]}

    def heldout_targets(self, name: str, seed: int) -> list[str]:
        """The translations of every held-out set of the experiment's task by one run, where a folder holds them."""
        run = experiment_dir(self.config, name, seed)
        return [
            f"{layout.heldout_prefix(run, s)}.txt"
            for s in heldout_sets(self.config, experiment(self.config, name)["task"])
        ]

    # --- tables and figures (report.smk) --------------------------------------------------------------

    def table_spec(self, paper, table):
        return table_spec(self.config, paper, table)

    def figure_spec(self, paper, figure):
        return figure_spec(self.config, paper, figure)

    def report_caption(self, paper, kind, name):
        return report_caption(self.config, paper, kind, name)

    def table_inputs(self, wildcards):
        """The score files a table reads: its rows' and their baselines'."""
        rows = table_spec(self.config, wildcards.paper, wildcards.table).rows
        return sorted(
            {
                path
                for row in rows
                for key in ("scores", "baseline_scores")
                for paths in row.get(key, {}).values()
                for path in paths
            }
        )

    def figure_inputs(self, wildcards):
        """The files a figure's rows read."""
        rows = figure_spec(self.config, wildcards.paper, wildcards.figure).rows
        return [path for row in rows for path in row.get("needs", [])]

    def inspection_of(self, wildcards):
        """What the `inspect` job of a figure's row reads out of which model: {kind, model, options}."""
        rows = figure_spec(self.config, wildcards.paper, wildcards.figure).rows
        row = rows[int(wildcards.row)] if int(wildcards.row) < len(rows) else {}
        if "inspect" not in row:
            raise UserError(
                f"results/figures/{wildcards.paper}/{wildcards.figure}: row {wildcards.row} has nothing "
                f"to inspect (not an aggregation_shares or attention row that can run)"
            )
        return row["inspect"]

    def inspect_spec(self, wildcards) -> str:
        """The inspect job's spec (job_specs.InspectSpec), as JSON: the readout, its options and a model of the
        config's own."""
        job = self.inspection_of(wildcards)
        own = user_model(self.config, self.experiment_of(wildcards)["model"])
        return InspectSpec(job["kind"], job["options"], own).to_json()

    def inspection_inputs(self, wildcards):
        """The model, and the translation an attention map is teacher-forced on."""
        job = self.inspection_of(wildcards)
        return {"model": job["model"], **{k: job["options"][k] for k in ("hypothesis",) if k in job["options"]}}
