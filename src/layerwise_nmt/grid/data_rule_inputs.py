"""What the data rules ask of the grid (workflow/rules/data.smk and preprocess.smk): for a job's wildcards, its
inputs and its command's options, from fetching a corpus to the vocabularies. `RuleInputs` (rule_inputs.py) adds
the model rules' answers."""

from __future__ import annotations

import json
import shlex

from .. import UserError
from ..job_specs import AssembleSpec, ReferenceCheckSpec
from ..data import vocab
from . import layout
from .layout import data_path, raw_path
from .names import did_you_mean
from .sources import checksum_of, download_spec, file_identity, file_source, urls_of, user_file
from .tasks import SPLITS, find_part, pair, part_name, segmented, split_format, tokenize_options, vocab_kind


class DataRuleInputs:
    """The config's answers for one data job's wildcards (task, part, language, ...)."""

    def __init__(self, config: dict):
        self.config = config

    def task_of(self, wildcards):
        if wildcards.task not in self.config["tasks"]:
            raise UserError(
                f"results/{wildcards.task}/…: no task {wildcards.task!r} in the config"
                f"{did_you_mean(wildcards.task, self.config['tasks'], 'tasks')}"
            )
        return self.config["tasks"][wildcards.task]

    def reference_check_spec(self, wildcards) -> str:
        """The check_reference job's spec (job_specs.ReferenceCheckSpec), as JSON: the task's `reference:`, fairseq's
        files by git blob id."""
        return ReferenceCheckSpec(self.task_of(wildcards)["reference"]).to_json()

    def task_data_targets(self, task_name):
        """Everything the default target needs for one task: binarized splits, dictionaries, data
        statistics."""
        task = self.config["tasks"][task_name]
        lang_pair, kind = pair(task), vocab_kind(task)
        base = data_path(task_name)
        reference = [f"{base}/reference-check.json"] if task.get("reference") else []
        vocabs = [f"{base}/vocab/dict.{name}.txt" for name in ("joint", task["src"], task["tgt"])]
        return (
            reference
            + vocabs
            + [f"{base}/text/stats.{lang_pair}.json"]
            + [
                f"{base}/bin-{kind}/{split}.{lang_pair}.{lang}.{ext}.npy"
                for split in task["splits"]
                for lang in (task["src"], task["tgt"])
                for ext in ("tokens", "offsets")
            ]
        )

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
        for option, value in (
            ("--member", source.member),
            ("--pair-member", source.pair_member),
            ("--checksum-source", source.checksum_source),
            ("--archive-checksum-source", source.archive_checksum_source),
        ):
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
        return f"--format {split_format(split)} --options {json.dumps(options)!r}"

    def concat_args(self, wildcards):
        """`lwnmt concat`'s --max-lines, where the split keeps only its first lines."""
        max_lines = self.task_of(wildcards)["splits"][wildcards.split].get("max_lines")
        return f"--max-lines {int(max_lines)}" if max_lines is not None else ""

    def reference_parts(self, wildcards):
        """The normalised (untokenized) parts of an evaluation split: what detokenized BLEU compares against."""
        task = self.task_of(wildcards)
        split = task["splits"][wildcards.split]
        if not split.get("parts"):
            raise UserError(
                f"tasks/{wildcards.task}/splits/{wildcards.split} is held out of the training text: "
                f"it has no untokenized reference for detokenized BLEU (score.tokenize must be none)"
            )
        return [data_path(wildcards.task, "norm", part_name(t, wildcards.lang)) for t in split["parts"]]

    def assemble_spec(self, wildcards) -> AssembleSpec:
        """The task's splits with every part resolved to (raw src, raw tgt, tokenized src, tokenized tgt,
        format): train/valid/test, or the one extra evaluation split named by the wildcard (NIST's mt04, ...)."""
        task = self.task_of(wildcards)
        names = [wildcards.split] if hasattr(wildcards, "split") else list(SPLITS)
        spec = {}
        for name, split in ((n, task["splits"][n]) for n in names):
            spec[name] = {
                key: split[key]
                for key in ("clean", "hold_out_every", "max_lines", "empty_lines", "overlap_with_train")
                if key in split
            }
            spec[name]["parts"] = [
                [raw_path(task["dataset"], t.format(lang=lang)) for lang in (task["src"], task["tgt"])]
                + [data_path(wildcards.task, "tok", part_name(t, lang)) for lang in (task["src"], task["tgt"])]
                + [split_format(split)]
                for t in split.get("parts", [])
            ]
        return AssembleSpec(splits=spec)

    def assemble_inputs(self, wildcards):
        """The assemble job's files: every part's raw and tokenized sides and, for an evaluation split assembled
        apart from train that is checked for overlap with it, the training source text."""
        splits = self.assemble_spec(wildcards).splits
        paths = [path for split in splits.values() for part in split["parts"] for path in part[:4]]
        if "train" not in splits and any(split.get("overlap_with_train") for split in splits.values()):
            paths.append(self.train_texts(wildcards)[0])
        return paths

    def train_texts(self, wildcards, stage="text"):
        task = self.task_of(wildcards)
        return [data_path(wildcards.task, stage, f"train.{pair(task)}.{lang}") for lang in (task["src"], task["tgt"])]

    def bpe_learn_texts(self, wildcards):
        """The training text BPE is learned on: the sides that do not come segmented."""
        task = self.task_of(wildcards)
        return [
            path
            for path, lang in zip(self.train_texts(wildcards), (task["src"], task["tgt"]), strict=True)
            if lang not in segmented(task)
        ]

    def bpe_codes(self, wildcards):
        """The codes apply_bpe segments one side with: none for a word-level task or a side that comes segmented
        (copied as it is, said in its log)."""
        task = self.task_of(wildcards)
        if not task.get("bpe") or wildcards.lang in segmented(task) or len(self.bpe_learn_texts(wildcards)) == 0:
            return []
        return [data_path(wildcards.task, "bpe", "code")]

    def vocab_params(self, wildcards):
        """Every flag of `lwnmt vocab`, a setting the task leaves out at the library's default: the string is one of
        the params Snakemake compares for a rerun, so it stays the same whether a default is written out or not."""
        opts = self.task_of(wildcards).get("vocab", {})
        return (
            f"--padding-factor {opts.get('padding_factor', vocab.PADDING_FACTOR)}"
            f" --threshold {opts.get('threshold', vocab.THRESHOLD)} --nwords {opts.get('words', vocab.ALL_WORDS)}"
        )


def checksum_argv(checksum: tuple[str, str] | None, prefix: str = "") -> list[str]:
    return [f"--{prefix}{checksum[0].replace('_', '-')}", checksum[1]] if checksum else []
