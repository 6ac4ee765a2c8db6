"""What each job of the workflow receives: one frozen dataclass per kind of job, its *job spec*.

The grid builds a job's spec when Snakemake builds the DAG (grid/rule_inputs.py), where the config was checked once;
the rule passes it to the command as JSON with its kind (`--spec '{"job": "train", ...}'`), and the command reads it
back into the same class (`TrainSpec.from_json`). A spec of another kind, a key the class lacks or a value of the
wrong type stops the command in one line naming the key. Sections that have typed settings of their own (a train
spec's `arch` and `train`, an export spec's `decode`) stay plain mappings here and are checked by those settings
(models/config.py, training/config.py, inference/config.py) where they are used."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from . import UserError
from .settings import Settings, json_object

S = TypeVar("S", bound="JobSpec")
FIGURE_METRIC = "loss"  # validation_curves' measure when a figure names none


@dataclass(frozen=True)
class JobSpec(Settings):
    """The shared way across a process boundary: `to_json` writes the spec with its kind, `from_json` reads it."""

    job: ClassVar[str] = ""  # the kind of job, written as "job" beside the fields
    key_noun = "key"
    leaves_out_unset: ClassVar[bool] = False  # optional parts that are None are not written

    def as_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in values.items() if v is not None} if self.leaves_out_unset else values

    def to_json(self) -> str:
        return json.dumps({"job": self.job, **self.as_dict()})

    @classmethod
    def from_json(cls: type[S], text: str, option: str = "--spec") -> S:
        return cls.of(json_object(text, option), option)

    @classmethod
    def of(cls: type[S], values: S | dict, where: str = "spec") -> S:
        """`values` as this kind of spec: the spec itself, or its fields as a mapping (with or without "job"), as a
        command line or a script writes them."""
        if isinstance(values, cls):
            return values
        assert isinstance(values, dict), f"{where}: a {type(values).__name__}, not a {cls.__name__} or its fields"
        values = dict(values)
        job = values.pop("job", cls.job)
        if job != cls.job:
            raise UserError(f"{where}: the spec of a {job!r} job; expected a {cls.job!r} job's")
        try:
            return cls.from_dict(values)
        except UserError as err:
            raise UserError(f"{where} ({cls.job} job): {err}") from None


@dataclass(frozen=True)
class TrainSpec(JobSpec):
    """`lwnmt train`: the model by name, its architecture and training settings (with the seed), and where a warm
    start or a model of the config's own comes from."""

    job: ClassVar[str] = "train"
    leaves_out_unset: ClassVar[bool] = True  # the spec as the checkpoints record it
    model: str = "transformer"
    arch: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    user_model: dict | None = None  # {"class": "pkg.module:Class", "user_dir": ...} for a model of `models:`
    init_from: str | None = None  # the checkpoint a warm start copies its tensors from


@dataclass(frozen=True)
class TranslateSpec(JobSpec):
    """`lwnmt translate --spec`: one decoding of a run, as the translate rules build it. The decoding settings
    (inference/config.py's BeamConfig checks them; empty: a model directory's own), the data directory and language
    pair a model file is decoded with (none: a model directory, which knows its own), the tuned length penalty's
    file, whose α replaces the settings' lenpen, and a model of the config's own (its code is imported only when
    named). Nothing of the scoring: editing it rescores without decoding again."""

    job: ClassVar[str] = "translate"
    leaves_out_unset: ClassVar[bool] = True
    decode: dict = field(default_factory=dict)
    data: str | None = None
    src: str | None = None
    tgt: str | None = None
    lenpen_from: str | None = None
    user_model: dict | None = None  # as TrainSpec's


@dataclass(frozen=True)
class TableSpec(JobSpec):
    """`lwnmt table`: one table of a paper with its rows resolved against the runs (grid/reports.py): per row its
    label, the paper's numbers, its state and reason, and per split the score files of every seed (and of its
    control's, `baseline_scores`, where it is compared with one)."""

    job: ClassVar[str] = "table"
    paper: str
    table: str
    rows: list
    metric: str | list = "bleu"  # one score column or several (grid.metrics_of)
    caption: str = ""
    scale: str = ""
    speeds: bool = False  # the table prints training and decoding speeds beside the scores
    significance: dict | None = None  # {test, p, mark}: report/tables.py fills in the rest
    verdict: bool = False  # every metric tested, not only BLEU
    mean_of: dict = field(default_factory=dict)  # a metric computed per seed as the mean of others
    budget: bool = False  # the table prints each run's budget
    precision: str = ""  # the paper's precision and ours, in words

    @property
    def metrics(self) -> list[str]:
        return [self.metric] if isinstance(self.metric, str) else list(self.metric)


@dataclass(frozen=True)
class FigureSpec(JobSpec):
    """`lwnmt figure`: one figure of a paper with its rows resolved to the files each kind of figure reads (a
    run's metrics.csv, an inspection of its model, its seeds' test.score.json; grid/reports.py)."""

    job: ClassVar[str] = "figure"
    paper: str
    figure: str
    kind: str  # report/figures.py KINDS
    rows: list
    caption: str = ""
    xlabel: str = ""
    metric: str = FIGURE_METRIC  # what validation curves draw
    notice: str | None = None  # a line every panel carries (the rehearsal's: stand-in data)


@dataclass(frozen=True)
class InspectSpec(JobSpec):
    """`lwnmt inspect --spec`: what a figure's row reads out of a trained model (inference/figure_readouts.py): the
    kind of readout, its options (for an attention map, what it teacher-forces) and a model of the config's own."""

    job: ClassVar[str] = "inspect"
    leaves_out_unset: ClassVar[bool] = True
    kind: str
    options: dict = field(default_factory=dict)
    user_model: dict | None = None  # as TrainSpec's


@dataclass(frozen=True)
class ExportSpec(JobSpec):
    """`lwnmt export`: what a model directory holds beside the model (inference/export.py): its languages and
    dictionaries, BPE codes (none: a word-level model), the source's tokenization and the decoding settings, and for
    an experiment's run where its tuned length penalty and training summary are and what it was (`about`)."""

    job: ClassVar[str] = "export"
    src: str
    tgt: str
    src_dict: str
    tgt_dict: str
    tokenize: dict
    decode: dict
    codes: str | None = None
    model: str | None = None  # an experiment's decoded model (averaged or final); a model.pt's export names its own
    tuned_lenpen: str | None = None  # the tuned α's JSON, which replaces the decoding's lenpen
    training: str | None = None  # the run's training.json: its precision, updates and how it stopped
    about: dict = field(default_factory=dict)  # {experiment, seed, task, settings}
    user_model: dict | None = None  # a model of the config's own: its class, checked against the experiment


@dataclass(frozen=True)
class AssembleSpec(JobSpec):
    """`lwnmt assemble`: a task's splits (train/valid/test, or one extra evaluation split), each with its cleaning
    options and its parts resolved to [raw source, raw target, tokenized source, tokenized target, format]."""

    job: ClassVar[str] = "assemble"
    splits: dict


@dataclass(frozen=True)
class ReferenceCheckSpec(JobSpec):
    """`lwnmt check-reference --spec`: the task's files to compare with a reference's (its `reference:`), each by its
    path under the task's data directory and the reference's git blob id."""

    job: ClassVar[str] = "check_reference"
    expected: dict


@dataclass(frozen=True)
class ScoreSpec(JobSpec):
    """`lwnmt score --spec`: which run and split a score is of, copied into its score.json, and the experiment's
    scoring settings (`options`: scoring/config.py's ScoreConfig checks them)."""

    job: ClassVar[str] = "score"
    experiment: str
    task: str
    seed: int
    split: str
    options: dict = field(default_factory=dict)

    @property
    def label(self) -> dict[str, Any]:
        """What score.json records of the run: experiment, task, seed and split."""
        return {k: v for k, v in self.as_dict().items() if k != "options"}
