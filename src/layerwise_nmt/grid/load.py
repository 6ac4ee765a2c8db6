"""Reading the grid: config files deep-merged, checked against the schema, expanded (`expand`: what is written in
short written out) and checked for the cross-references a schema cannot express (`check`: task → dataset,
experiment → task, warm starts, rows → experiments), each error naming its key."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import yaml

from .. import UserError
from .compare import expand_comparisons
from .experiments import experiment
from .local_corpus import expand_local
from .own_models import check_models
from .papers import append_rows, rows
from .protocol import check as check_protocol

if TYPE_CHECKING:  # imported where a config is validated: reading one needs no jsonschema
    import jsonschema

# Package data, so that an installed package validates too; the workflow validates with this same file
# (snakemake_glue/snakefile.py: check_config).
SCHEMA = files(__package__) / "config.schema.yaml"


def load(*paths: str | os.PathLike) -> dict:
    """Load and deep-merge config files (later ones override), then validate; an error names the file that set
    the key it is about."""
    config: dict = {}
    for path in paths:
        deep_update(config, unshared(read(path)))
    try:
        validate(config)
    except UserError as err:
        if "(top level)" in str(err) and "required property" in str(err):  # an overlay given alone
            raise UserError(
                f"{err} in {', '.join(map(str, paths))}; an overlay such as config/demo.yaml goes "
                f"after the full config: --config config.yaml --config config/demo.yaml"
            ) from None
        raise located(err, paths) from None
    return config


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML whose mappings hold each key once: PyYAML keeps the last of two equal keys, so a setting (or a whole
    `experiments:` block) written twice would vanish in silence. A merge (`<<: *anchor`) may still be overridden."""

    def construct_mapping(self, node, deep=False):
        first: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in first:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"key {key!r} given twice (first at line {first[key].line + 1}); expected each key once",
                    key_node.start_mark,
                )
            first[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def read(path: str | os.PathLike) -> dict:
    """One config file as a dict, or a one-line UserError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=UniqueKeyLoader) or {}
    except OSError as err:
        raise UserError(
            f"config file {path}: {err.strerror}; expected a YAML file (run from the checkout, or "
            f"pass --config path/to/config.yaml)"
        ) from None
    except yaml.YAMLError as err:
        from .names import yaml_error

        raise yaml_error(f"config file {path}", err) from None
    except UnicodeDecodeError:  # a binary file, or text in another encoding
        raw = Path(path).read_bytes()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:  # where in the file, not in the chunk the reader had decoded
            line, byte = raw[: err.start].count(b"\n") + 1, raw[err.start]
            raise UserError(
                f"config file {path}:{line}: byte 0x{byte:02x} is not UTF-8; expected a YAML file in UTF-8"
            ) from None
        raise
    if not isinstance(data, dict):
        raise UserError(
            f"config file {path}: a {type(data).__name__}; expected a mapping of keys (datasets:, "
            f"tasks:, experiments:, ...)"
        )
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
    if keys[0] == "experiments" and len(keys) > 1 and (made := made_by_comparison(keys[1], paths)):
        path, comparison = made
        said = re.sub(r" \(or defaults/[^)]*\)", "", str(err).removeprefix("config key experiments/"))
        return UserError(f"{path}: config key compare/{comparison}, whose experiment {said}")
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


def made_by_comparison(name: str, paths) -> tuple[str | os.PathLike, str] | None:
    """(the file, the comparison) whose `compare:` entry makes experiment `name`, which no file declares."""
    found = None
    for path in paths:
        try:
            data = read(path)
        except UserError:
            continue
        if name in (data.get("experiments") or {}):
            return None
        owner = next((c for c in data.get("compare") or {} if name.startswith(f"{c}.")), None)
        found = (path, owner) if owner else found
    return found


def unshared(node: Any) -> Any:
    """A copy in which no two places hold the same dict or list: YAML's anchors (`train: *cpu_train`) give several
    experiments one object, and an overlay merged into one of them would change them all."""
    if isinstance(node, dict):
        return {key: unshared(value) for key, value in node.items()}
    if isinstance(node, list):
        return [unshared(value) for value in node]
    return node


def deep_update(base: dict, new: dict) -> dict:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = value
    return base


def validate(config: dict) -> None:
    """The config checked and expanded in place (the workflow's `config` is Snakemake's one dict): the schema and
    what must hold before expanding (`check_schema`), then `expand`, then the cross-references (`check`); errors
    name the offending key."""
    check_schema(config)
    expanded = expand(config)
    config.clear()
    config.update(expanded)
    check(config)


def check_schema(config: dict) -> None:
    """The schema, a task's two languages, and the models of the config's own."""
    import jsonschema  # here, not at the top: reading a config (gpu_check on a GPU machine without it) needs none

    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise schema_error(error)
    for name, task in config["tasks"].items():
        if task["src"] == task["tgt"]:
            raise UserError(
                f"config key tasks/{name}/tgt: {task['tgt']!r}, the source language too; expected the language "
                f"translated into"
            )
    check_models(config)


def expand(config: dict) -> dict:
    """A new config in which what the user writes in short is written out: tables' and figures' appended rows
    after their rows, a corpus in the user's files and `compare:` entries as ordinary datasets, tasks, experiments,
    papers and targets, and each experiment's `extends:` resolved. The config given is left as it is; expanding an
    expanded config changes nothing."""
    import copy

    config = copy.deepcopy(config)
    append_rows(config)
    expand_local(config)
    expand_comparisons(config)
    resolve_extends(config.get("experiments", {}))
    return config


def check(config: dict) -> None:
    """The cross-references of an expanded config that a schema cannot express: task → dataset and its files,
    experiment → task, warm starts (no cycle, the same data), rows → experiments; then each study row against its
    paper's (grid/protocol.py)."""
    datasets, tasks, experiments = config["datasets"], config["tasks"], config.get("experiments", {})
    for name, task in tasks.items():
        if task["dataset"] not in datasets:
            raise UserError(f"config key tasks/{name}/dataset: unknown dataset {task['dataset']!r}")
        dataset = datasets[task["dataset"]]
        ready = "pending" not in dataset and "user_path" not in dataset
        if ready and "splits" not in task:
            raise UserError(f"config key tasks/{name}/splits: missing; expected train, valid and test")
        for split_name, split in task.get("splits", {}).items():
            if split_name != "train" and split.get("empty_lines") == "drop":
                raise UserError(
                    f"config key tasks/{name}/splits/{split_name}/empty_lines: drop; an evaluation "
                    f"set's lines must stay aligned with its references: expected refuse (remove the "
                    f"pair from both files)"
                )
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
            chain = [name]
            while isinstance(parent, str) and parent in experiments and parent not in chain:
                chain.append(parent)
                parent = experiments[parent].get("warm_start")
            if parent in chain:  # a model would start from itself: no training could ever begin
                raise UserError(
                    f"config key experiments/{name}/warm_start: cycle {' → '.join([*chain, parent])}; expected "
                    f"a chain that ends in a model trained from scratch"
                )
            parent = spec["warm_start"]
            data = [(experiments[n]["task"], experiment(config, n)["vocab"]) for n in (name, parent)]
            if data[0] != data[1]:
                raise UserError(
                    f"config key experiments/{name}/warm_start: {parent!r} trains on other data "
                    f"({'/'.join(data[1])} vs {'/'.join(data[0])})"
                )
    for row in rows(config):
        for key in ("experiment", "compare_to"):
            if key in row.spec and row.spec[key] not in experiments:
                raise UserError(f"config key {row.key}/{key}: unknown experiment {row.spec[key]!r}")
    check_protocol(config)


def schema_error(error: jsonschema.ValidationError) -> UserError:
    """A schema violation as one line naming the key; an unknown key with the known ones closest to it."""
    where = [str(p) for p in error.absolute_path]
    allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and allowed and isinstance(error.instance, dict):
        unknown = [k for k in error.instance if k not in allowed]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), list(allowed), n=3)
            hint = (
                f"did you mean {' or '.join(map(repr, close))}?" if close else f"expected one of {', '.join(allowed)}"
            )
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
        base = {
            k: (dict(v) if isinstance(v, dict) else v)
            for k, v in resolved(parent, chain + (parent,)).items()
            if k != "description"
        }
        if "departures" in base:  # a relation to a control or a parent is the row's own, never inherited
            base["departures"] = {k: v for k, v in base["departures"].items() if not k.startswith("relation/")}
        own = {k: v for k, v in spec.items() if k != "extends"}
        experiments[name] = deep_update(base, own)
        return experiments[name]

    for name in list(experiments):
        resolved(name, (name,))
        missing = [k for k in ("task", "model") if k not in experiments[name]]
        if missing:
            raise UserError(f"config key experiments/{name}: missing {' and '.join(missing)} (set it or `extends`)")


def get(config: dict, path: str, default: Any = None) -> Any:
    node: Any = config
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node
