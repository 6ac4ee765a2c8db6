"""The experiment grid as data: loading, schema validation, and the questions the workflow asks of it.

Used by the Snakefile (input functions, targets) and by `lwnmt status`, so both read the config the same way.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from . import UserError

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
MIRROR_ENV = "LWNMT_DATA_MIRROR"
SPLITS = ("train", "valid", "test")
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar", ".zip", ".gz", ".xml", ".sgm")


def load(*paths: str | os.PathLike) -> dict:
    """Load and deep-merge config files (later ones override), then validate; an error names the file that set
    the key it is about."""
    config: dict = {}
    for path in paths:
        deep_update(config, read(path))
    try:
        validate(config)
    except UserError as err:
        if "(top level)" in str(err) and "required property" in str(err):  # an overlay given alone
            raise UserError(f"{err} in {', '.join(map(str, paths))}; an overlay such as config/demo.yaml goes "
                            f"after the full config: --config config.yaml --config config/demo.yaml")
        raise located(err, paths) from None
    return config


def read(path: str | os.PathLike) -> dict:
    """One config file as a dict, or a one-line UserError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as err:
        raise UserError(f"config file {path}: {err.strerror}; expected a YAML file (run from the checkout, or "
                        f"pass --config path/to/config.yaml)")
    except yaml.YAMLError as err:
        raise UserError(f"config file {path}: not valid YAML ({' '.join(str(err).split())})")
    if not isinstance(data, dict):
        raise UserError(f"config file {path}: a {type(data).__name__}; expected a mapping of keys (datasets:, "
                        f"tasks:, experiments:, ...)")
    return data


KEY = re.compile(r"config key ([^\s:]+)")


def located(err: UserError, paths) -> UserError:
    """`err` ("config key a/b/c: ...") prefixed with the config file that sets the key, where several are merged:
    the last one holding the longest prefix of the key's path (an overlay's typo is named in the overlay, a value
    an experiment inherits through `extends` or `defaults` in the file that holds the experiment)."""
    match = KEY.match(str(err))
    if match is None or len(paths) < 2:
        return err
    keys, best = match.group(1).split("/"), (0, None)
    for path in paths:
        try:
            node = read(path)
        except UserError:
            continue
        depth = 0
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                break
            node, depth = node[key], depth + 1
        if depth and depth >= best[0]:
            best = (depth, path)
    return UserError(f"{best[1]}: {err}") if best[1] else err


def deep_update(base: dict, new: dict) -> dict:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = value
    return base


def validate(config: dict) -> None:
    """Schema check plus the cross-references a schema cannot express; errors name the offending key."""
    import jsonschema  # here, not at the top: reading a config (gpu_check on a GPU machine without it) needs none

    with open(SCHEMA, encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise schema_error(error)
    resolve_extends(config.get("experiments", {}))
    datasets, tasks, experiments = config["datasets"], config["tasks"], config.get("experiments", {})
    for name, task in tasks.items():
        if task["dataset"] not in datasets:
            raise UserError(f"config key tasks/{name}/dataset: unknown dataset {task['dataset']!r}")
        dataset = datasets[task["dataset"]]
        ready = "pending" not in dataset and "user_path" not in dataset
        if ready and "splits" not in task:
            raise UserError(f"config key tasks/{name}/splits: missing; expected train, valid and test")
        for split_name, split in task.get("splits", {}).items():
            if ready and not split.get("parts") and not split.get("hold_out_every"):
                raise UserError(f"config key tasks/{name}/splits/{split_name}: expected parts or hold_out_every")
            for part in split.get("parts", []):
                for lang in (task["src"], task["tgt"]):
                    if ready and part.format(lang=lang) not in dataset.get("files", {}):
                        raise UserError(
                            f"config key tasks/{name}/splits: part {part!r} needs file "
                            f"{part.format(lang=lang)!r}, which datasets/{task['dataset']}/files does not declare"
                        )
    for name, spec in experiments.items():
        if spec["task"] not in tasks:
            raise UserError(f"config key experiments/{name}/task: unknown task {spec['task']!r}")
        parent = spec.get("warm_start")
        if isinstance(parent, str):  # {path: …}: a model file, checked against the task when training starts
            if parent not in experiments:
                raise UserError(f"config key experiments/{name}/warm_start: unknown experiment {parent!r}")
            data = [(experiments[n]["task"], experiment(config, n)["vocab"]) for n in (name, parent)]
            if data[0] != data[1]:
                raise UserError(f"config key experiments/{name}/warm_start: {parent!r} trains on other data "
                                f"({'/'.join(data[1])} vs {'/'.join(data[0])})")
    for row in rows(config):
        for key in ("experiment", "compare_to"):
            if key in row.spec and row.spec[key] not in experiments:
                raise UserError(f"config key {row.key}/{key}: unknown experiment {row.spec[key]!r}")


def schema_error(error: "jsonschema.ValidationError") -> UserError:
    """A schema violation as one line naming the key; an unknown key with the known ones closest to it."""
    where = [str(p) for p in error.absolute_path]
    allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and allowed and isinstance(error.instance, dict):
        unknown = [k for k in error.instance if k not in allowed]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), list(allowed), n=3)
            hint = (f"did you mean {' or '.join(map(repr, close))}?" if close
                    else f"expected one of {', '.join(allowed)}")
            return UserError(f"config key {'/'.join(where + [str(unknown[0])])}: unknown key {unknown[0]!r}; {hint}")
    return UserError(f"config key {'/'.join(where) or '(top level)'}: {error.message}")


def resolve_extends(experiments: dict) -> None:
    """`extends: <experiment>` (ablations and sweeps as a few overrides of one row): the experiment starts as a
    copy of that one's settings (its description aside), and its own keys win, key by key within a stage. In place;
    a resolved experiment has no `extends` key left, so resolving twice changes nothing."""

    def resolved(name: str, chain: tuple[str, ...]) -> dict:
        spec = experiments[name]
        parent = spec.get("extends")
        if parent is None:
            return spec
        if parent not in experiments:
            raise UserError(f"config key experiments/{name}/extends: unknown experiment {parent!r}")
        if parent in chain:
            raise UserError(f"config key experiments/{name}/extends: cycle {' → '.join(chain + (parent,))}")
        base = {k: (dict(v) if isinstance(v, dict) else v)
                for k, v in resolved(parent, chain + (parent,)).items() if k != "description"}
        own = {k: v for k, v in spec.items() if k != "extends"}
        experiments[name] = deep_update(base, own)
        return experiments[name]

    for name in list(experiments):
        resolved(name, (name,))
        missing = [k for k in ("task", "model") if k not in experiments[name]]
        if missing:
            raise UserError(f"config key experiments/{name}: missing {' and '.join(missing)} (set it or `extends`)")


# ---------------------------------------------------------------------------------------------------------------
# Data sources


def mirror_dir(config: dict) -> Path | None:
    """`data_mirror` from config, else the LWNMT_DATA_MIRROR environment variable, else None (download)."""
    value = config.get("data_mirror") or os.environ.get(MIRROR_ENV)
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"data_mirror {value!r} is not a directory (config key data_mirror or ${MIRROR_ENV})")
    return path


@dataclass(frozen=True)
class FileSource:
    """Where the workflow gets one raw file: the path it reads and how to turn that into the file."""

    path: str  # a mirror file, a mirror archive, or the download location of the archive
    member: str | None  # path inside the archive; None when `path` is the file itself or a .gz of it
    is_archive: bool
    checksum: tuple[str, str] | None  # ("sha256"|"md5"|"git_blob", digest) of the extracted file
    where: str  # where a good copy comes from (the official URL, or what to do by hand), for error messages
    archive_checksum: tuple[str, str] | None = None  # checked before extracting from a mirrored archive
    checksum_source: str | None = None  # where `checksum` was published (named when it does not match)
    archive_checksum_source: str | None = None
    pair_member: str | None = None  # the other side's wildcard member: files read pairwise, counts checked


def checksum_of(entry: dict) -> tuple[str, str] | None:
    for kind in ("sha256", "md5", "git_blob"):
        if entry.get(kind):
            return kind, entry[kind]
    return None


def urls_of(entry: dict) -> list[str]:
    """Where a download comes from, in the order tried: the official URL, then known mirrors."""
    return ([entry["url"]] if entry.get("url") else []) + list(entry.get("mirrors", []))


def where_from(entry: dict) -> str:
    urls = urls_of(entry)
    return " or ".join(urls) if urls else f"by hand ({entry.get('manual', 'see its dataset description')})"


def file_source(config: dict, dataset: str, name: str) -> FileSource:
    """Where one raw file of a dataset comes from, in this order: the user's directory (licensed data), the data
    mirror (the file itself, its `mirror` copy, or its archive), else the official download. An archive may itself
    be a file of the dataset (an archive inside an archive: IWSLT's per-pair .tgz in the campaign .tgz)."""
    spec = config["datasets"][dataset]
    entry = spec["files"][name]
    if "user_path" in spec:
        path = Path(spec["user_path"]).expanduser() / entry.get("path", name)
        return FileSource(str(path), None, False, checksum_of(entry), f"datasets/{dataset}/user_path ({path})")
    archive_name = entry.get("archive")
    archive = spec.get("archives", {}).get(archive_name, {}) if archive_name else {}
    member = entry.get("path")
    where = where_from(archive or entry)
    own = dict(checksum=checksum_of(entry), checksum_source=entry.get("checksum_source"),
               pair_member=pair_member(spec, name))
    mirror = mirror_dir(config)
    if mirror is not None:
        base = mirror / spec.get("mirror", dataset)
        copy = entry.get("mirror")
        if copy and mirrored(base / copy["path"]):
            if copy["path"].endswith(".gz"):  # a compressed copy: check it, then the file it inflates to
                return FileSource(str(base / copy["path"]), None, True, where=where, archive_checksum=checksum_of(
                    copy), archive_checksum_source=copy.get("checksum_source"), **own)
            return FileSource(str(base / copy["path"]), None, False, checksum_of(copy), where,
                              checksum_source=copy.get("checksum_source"))
        if member and mirrored(base / member):
            return FileSource(str(base / member), None, False, where=where, **own)
        if archive_name and mirrored(base / archive_name):
            return FileSource(str(base / archive_name), member, True, where=where, archive_checksum=checksum_of(
                archive), archive_checksum_source=archive.get("checksum_source"), **own)
        if not archive_name and mirrored(base / name):
            return FileSource(str(base / name), None, False, where=where, **own)
        # not mirrored: fall through to the official download (an air-gapped run then fails there, by name)
    if archive_name in spec.get("files", {}):  # extracted from an outer archive first (its own extract job)
        outer = file_source(config, dataset, archive_name)
        return FileSource(raw_path(dataset, archive_name), member, True, where=outer.where, **own)
    if archive_name:
        return FileSource(download_path(archive, archive_name), member, True, where=where, **own)
    return FileSource(download_path(entry, name), None, False, where=where, **own)


def mirrored(path: Path) -> bool:
    """Whether the data mirror holds this file; something else at its place (a directory) is an error, not a
    silent fall-back to the download."""
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is a directory, not a file (or another non-file); expected the file itself there "
                        f"(the data mirror's layout: README.md): move it away or replace it with the file")
    return path.is_file()


def pair_member(spec: dict, name: str) -> str | None:
    """The other side of a wildcard member (CWMT's `casia2015/*_c[hn].txt` ↔ `casia2015/*_en.txt`): the one other
    wildcard file of the same archive. Its files are paired with this one's by name and their line counts checked."""
    entry = spec["files"][name]
    if not any(c in entry.get("path", "") for c in "*?["):
        return None
    others = [e["path"] for n, e in spec["files"].items() if n != name and e.get("archive") == entry.get("archive")
              and any(c in e.get("path", "") for c in "*?[")]
    return others[0] if len(others) == 1 else None


def download_key(entry: dict, name: str) -> str:
    """One download per source, shared by every dataset that names it: keyed by its URL (or, for a file only a
    person can fetch, by its instructions) and its name."""
    source = urls_of(entry)[:1] or [entry.get("manual", "")]
    return hashlib.sha256(f"{source[0]}\n{name}".encode()).hexdigest()[:12]


def downloads(config: dict) -> dict[tuple[str, str], tuple[list[str], dict]]:
    """(key, name) → (the datasets naming it, its entry) for every downloadable archive or file."""
    out: dict = {}
    for dataset, spec in config["datasets"].items():
        if "user_path" in spec:
            continue
        entries = {**{n: e for n, e in spec.get("files", {}).items() if urls_of(e) or "manual" in e},
                   **spec.get("archives", {})}
        for name, entry in entries.items():
            out.setdefault((download_key(entry, name), name), ([], entry))[0].append(dataset)
    return out


def download_spec(config: dict, key: str, name: str) -> tuple[list[str], dict]:
    """(datasets naming it, entry: URLs, checksum, manual instructions) of results/downloads/<key>/<name>."""
    found = downloads(config).get((key, name))
    if found is None:
        raise UserError(f"results/downloads/{key}/{name}: no archive or file of the config downloads to it")
    return found


def mirror_location(config: dict, dataset: str, name: str) -> str:
    """Where the data mirror is expected to hold an archive (or single file) of a dataset."""
    mirror = config.get("data_mirror") or os.environ.get(MIRROR_ENV) or f"<data_mirror or ${MIRROR_ENV}>"
    return f"{mirror}/{config['datasets'][dataset].get('mirror', dataset)}/{name}"


# ---------------------------------------------------------------------------------------------------------------
# Tasks


def part_name(template: str, lang: str) -> str:
    """`IWSLT14.TED.dev2010.de-en.{lang}.xml` → `IWSLT14.TED.dev2010.de-en.de` (fairseq's tmp/ names)."""
    name = template.format(lang=lang)
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def find_part(task: dict, part: str, lang: str) -> tuple[str, dict]:
    """The split spec and raw file name behind a tokenized part name."""
    for split in task["splits"].values():
        for template in split.get("parts", []):
            if part_name(template, lang) == f"{part}.{lang}":
                return template.format(lang=lang), split
    raise UserError(f"no split of this task has a part named {part!r}")


def tokenize_options(task: dict, lang: str, split: dict) -> dict:
    """TokenizeOptions fields for one side of one part: the task's `tokenize` entry, its per-language overrides
    (`tokenize: {ro: {romanian: true}}`), the split's own overrides, the task's lowercasing and the split's
    apostrophe mapping."""
    out: dict = {}
    for entry in (task.get("tokenize", {}), split.get("tokenize", {})):
        out.update({k: v for k, v in entry.items() if not isinstance(v, dict)})
        out.update(entry.get(lang, {}))
    return {**out, "lowercase": bool(task.get("lowercase")),
            "normalize_apostrophe": bool(split.get("normalize_apostrophe"))}


def pair(task: dict) -> str:
    return f"{task['src']}-{task['tgt']}"


# ---------------------------------------------------------------------------------------------------------------
# Experiments

STAGES = ("arch", "train", "decode", "score")


def experiment(config: dict, name: str) -> dict:
    """An experiment with the config's `defaults` filled in (the experiment's keys win, key by key)."""
    spec = config["experiments"][name]
    defaults = config.get("defaults", {})
    task = config["tasks"][spec["task"]]
    out = {"name": name, "task": spec["task"], "model": spec["model"], "warm_start": spec.get("warm_start"),
           "vocab": spec.get("vocab", task.get("vocab", {}).get("kind", "joint")),
           "average": spec.get("average", defaults.get("average")),
           "seeds": spec.get("seeds", defaults.get("seeds", [1])),
           "src": task["src"], "tgt": task["tgt"], "pair": pair(task)}
    for stage in STAGES:
        out[stage] = {**defaults.get(stage, {}), **spec.get(stage, {})}
    return out


# ---------------------------------------------------------------------------------------------------------------
# Where things are: the results/ paths the package and the workflow's input functions share (rule outputs spell
# the same templates as Snakemake patterns)


def raw_path(dataset: str, name: str) -> str:
    return f"results/raw/{dataset}/{name}"


def download_path(entry: dict, name: str) -> str:
    return f"results/downloads/{download_key(entry, name)}/{name}"


def data_path(task: str, *parts: str) -> str:
    """results/<task>/data[/<parts>]: norm/ tok/ text/ ref/ bpe/ bin-joint/ bin-separate/."""
    return "/".join([f"results/{task}/data", *parts])


def bin_dir(task: str, vocab: str) -> str:
    return data_path(task, f"bin-{vocab}")


def run_dir(task: str, experiment: str, seed: int | str) -> str:
    return f"results/{task}/{experiment}/seed{seed}"


def save_dir(run: str | os.PathLike) -> str:
    """What `lwnmt train --save-dir` owns in a run: checkpoints, metrics.csv, training.json, tensorboard/ (the final
    model is the train rule's output, beside it)."""
    return f"{run}/checkpoints"


def experiment_dir(config: dict, name: str, seed: int) -> str:
    return run_dir(config["experiments"][name]["task"], name, seed)


def trained_model(config: dict, name: str, seed: int | None = None) -> dict:
    """What translating raw text with an experiment's trained model needs: the model the workflow decodes (averaged
    or final), its binarized data directory, languages, the task's tokenization of the source (as for its test set),
    BPE codes (None for word-level tasks), decoding settings, and what the model must match (its name, arch)."""
    if name not in config["experiments"]:
        raise UserError(f"--experiment {name!r}: not an experiment of the config")
    e = experiment(config, name)
    seed = seed if seed is not None else e["seeds"][0]
    task = config["tasks"][e["task"]]
    run = experiment_dir(config, name, seed)
    return {"model": f"{run}/{'averaged.pt' if e['average'] else 'model.pt'}",
            "data": bin_dir(e["task"], e["vocab"]), "src": e["src"], "tgt": e["tgt"],
            "tokenize": tokenize_options(task, e["src"], task["splits"].get("test", {})),
            "codes": data_path(e["task"], "bpe", "code") if task.get("bpe") else None, "decode": e["decode"],
            "experiment": {"name": name, "model": e["model"], "arch": e["arch"], "seed": seed}}


def metrics_of(table: dict) -> list[str]:
    """A table's score columns: "bleu" or "chrf" (= test), or "<split>_bleu" / "<split>_chrf" read from that split's
    `<split>.score.json` (valid_bleu, test_chrf; NIST's mt04_bleu etc. once its test sets are splits)."""
    metric = table.get("metric", "bleu")
    return [metric] if isinstance(metric, str) else list(metric)


def measure_of(metric: str) -> str:
    """The score.json key a metric column reads: bleu or chrf."""
    return "chrf" if metric.endswith("chrf") else "bleu"


def split_of(metric: str) -> str:
    measure = measure_of(metric)
    return "test" if metric == measure else metric.removesuffix(f"_{measure}")


def tables(config: dict, kind: str = "tables", targeted: bool = True) -> list[tuple[str, str]]:
    """The targeted (paper, table) pairs (targeted=False: all declared); kind="figures" for (paper, figure) pairs."""
    wanted = config.get("targets", {}).get(kind, "all") if targeted else "all"
    declared = [(p, t) for p, spec in config.get("papers", {}).items() for t in spec.get(kind, {})]
    if wanted == "all":
        return declared
    missing = [w for w in wanted if tuple(w.split("/", 1)) not in declared]
    if missing:
        raise UserError(f"config key targets/{kind}: unknown {kind[:-1]}(s) {', '.join(missing)}; "
                        f"expected <paper>/<{kind[:-1]}>")
    return [tuple(w.split("/", 1)) for w in wanted]


@dataclass(frozen=True)
class Row:
    """One row of a paper's table or figure, where the config declares it."""

    paper: str
    kind: str  # tables | figures
    name: str  # the table or figure
    index: int
    spec: dict

    @property
    def key(self) -> str:
        return f"papers/{self.paper}/{self.kind}/{self.name}/rows/{self.index}"

    @property
    def label(self) -> str:
        return f"{self.paper} {self.name} · {self.spec['label']}"


def rows(config: dict, kinds: tuple[str, ...] = ("tables", "figures"), targeted: bool = False) -> Iterator[Row]:
    """The papers → tables (figures) → rows walk, in config order; targeted=True: the targeted tables' only."""
    for kind in kinds:
        for paper, name in tables(config, kind, targeted):
            for index, row in enumerate(config["papers"][paper][kind][name]["rows"]):
                yield Row(paper, kind, name, index, row)


# ---------------------------------------------------------------------------------------------------------------
# What can run


@dataclass(frozen=True)
class Status:
    kind: str  # task | experiment | row
    name: str
    runnable: bool
    reason: str
    quoted: bool = False  # a row the paper quotes from other work: never run, never ours
    fetch: str = ""  # a runnable task whose data is not all at hand: "download" (automatic) or "manual"

    @property
    def state(self) -> str:
        return (self.fetch or "ok") if self.runnable else "quoted" if self.quoted else "blocked"


def task_status(config: dict, name: str) -> Status:
    task = config["tasks"][name]
    dataset = config["datasets"][task["dataset"]]
    if "pending" in dataset:
        return Status("task", name, False, f"dataset {task['dataset']}: {dataset['pending']}")
    if "user_path" in dataset and not dataset["user_path"]:
        return Status("task", name, False, f"needs licensed data the user must supply: set datasets/"
                      f"{task['dataset']}/user_path (its description in config.yaml lists the files)")
    if dataset.get("user_path"):
        root = Path(dataset["user_path"]).expanduser()
        missing = [entry.get("path", file) for file, entry in dataset.get("files", {}).items()
                   if not (root / entry.get("path", file)).is_file()]
        if missing:
            return Status("task", name, False, f"datasets/{task['dataset']}/user_path {root} lacks "
                          f"{', '.join(missing)}")
    by_hand, automatic = fetch_needs(config, task["dataset"])
    if by_hand:  # still runnable: its fetch job fails with the instructions, and a user may mirror the files
        return Status("task", name, True, "no working automatic source for " + "; ".join(
            f"{', '.join(files)} ({why}; put {'it' if len(files) == 1 else 'them'} in "
            f"{mirror_location(config, task['dataset'], '')})" for why, files in by_hand.items()), fetch="manual")
    if automatic:
        return Status("task", name, True, f"downloads {', '.join(automatic)} (not in the data mirror)",
                      fetch="download")
    return Status("task", name, True, "ready")


def fetch_needs(config: dict, dataset: str) -> tuple[dict[str, list[str]], list[str]]:
    """The downloads a dataset's files need (those not in the data mirror): ({why a person must fetch them: names},
    [names fetched automatically])."""
    spec = config["datasets"][dataset]
    by_hand, automatic = {}, []
    for name in spec.get("files", {}) if "user_path" not in spec else ():
        path = file_source(config, dataset, name).path
        if not path.startswith("results/downloads/"):
            continue
        file = path.rsplit("/", 1)[1]
        entry = spec.get("archives", {}).get(file) or spec["files"][file]
        if not urls_of(entry) or entry.get("reported_broken"):
            why = "; ".join(filter(None, [entry.get("reported_broken"), entry.get("manual")]))
            if file not in by_hand.setdefault(why, []):
                by_hand[why].append(file)
        elif file not in automatic:
            automatic.append(file)
    return by_hand, automatic


def experiment_status(config: dict, name: str) -> Status:
    """Whether an experiment can run (its model name is checked at DAG time: checks.check_model_name)."""
    experiment = config["experiments"][name]
    task = task_status(config, experiment["task"])
    if not task.runnable:
        return Status("experiment", name, False, task.reason)
    if isinstance(experiment.get("warm_start"), dict):
        path = experiment["warm_start"]["path"]
        if not Path(path).exists():
            return Status("experiment", name, False, f"warm start from {path}: no such file")
    elif experiment.get("warm_start"):
        parent = experiment_status(config, experiment["warm_start"])
        if not parent.runnable:
            return Status("experiment", name, False, f"warm start from {experiment['warm_start']}: {parent.reason}")
    return Status("experiment", name, True, "ready")


def row_statuses(config: dict) -> list[Status]:
    out = []
    for row in rows(config, ("tables",)):
        if "experiment" in row.spec:
            s = experiment_status(config, row.spec["experiment"])
            out.append(Status("row", row.label, s.runnable, s.reason))
        else:
            quoted = "quoted_from" in row.spec
            reason = f"quoted from {row.spec['quoted_from']}" if quoted else row.spec.get("not_run", "no experiment")
            out.append(Status("row", row.label, False, reason, quoted=quoted))
    return out


def rows_by_experiment(config: dict) -> dict[str, list[str]]:
    """Experiment → the targeted table and figure rows that run it ("<paper> <table> · <label>")."""
    out: dict[str, list[str]] = {}
    for row in rows(config, targeted=True):
        if "experiment" in row.spec:
            out.setdefault(row.spec["experiment"], []).append(row.label)
    return out


def all_statuses(config: dict) -> list[Status]:
    return (
        [task_status(config, t) for t in config["tasks"]]
        + [experiment_status(config, e) for e in config.get("experiments", {})]
        + row_statuses(config)
    )


def runnable_tasks(config: dict) -> list[str]:
    wanted = config.get("targets", {}).get("tasks", "all")
    names = list(config["tasks"]) if wanted == "all" else wanted
    return [t for t in names if task_status(config, t).runnable]


def get(config: dict, path: str, default: Any = None) -> Any:
    node: Any = config
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node
