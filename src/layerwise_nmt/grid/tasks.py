"""A task's parts and languages: raw file names, tokenizer options per side and split."""

from __future__ import annotations

from .. import UserError

SPLITS = ("train", "valid", "test")
VOCAB_KIND = "joint"  # a task's `vocab: {kind: ...}` left out: one dictionary for both sides
SPLIT_FORMAT = "plain"  # a split's `format:` left out: one sentence a line
SUBWORDS_PER_SENTENCE = 25  # a task's `estimate:` without subwords_per_sentence (`lwnmt plan`, budget checks)
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar", ".zip", ".gz", ".xml", ".sgm")


def part_name(template: str, lang: str) -> str:
    """`IWSLT14.TED.dev2010.de-en.{lang}.xml` → `IWSLT14.TED.dev2010.de-en.de` (fairseq's tmp/ names)."""
    name = template.format(lang=lang)
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def raw_files(task: dict) -> list[str]:
    """The dataset's files a task reads: every split's parts, both sides, in the splits' order."""
    sides = (task["src"], task["tgt"])
    names = (t.format(lang=lang) for split in task["splits"].values() for t in split.get("parts", []) for lang in sides)
    return list(dict.fromkeys(names))


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
    apostrophe mapping. A side that comes BPE-segmented (`bpe: {segmented: [xx]}`) is tokenized already."""
    out: dict = {}
    for entry in (task.get("tokenize", {}), split.get("tokenize", {})):
        out.update({k: v for k, v in entry.items() if not isinstance(v, dict)})
        out.update(entry.get(lang, {}))
    if lang in segmented(task):
        out["tokenizer"] = "none"
    return {
        **out,
        "lowercase": bool(task.get("lowercase")),
        "normalize_apostrophe": bool(split.get("normalize_apostrophe")),
    }


def vocab_kind(task: dict) -> str:
    return (task.get("vocab") or {}).get("kind", VOCAB_KIND)


def split_format(split: dict) -> str:
    return split.get("format", SPLIT_FORMAT)


def pair(task: dict) -> str:
    return f"{task['src']}-{task['tgt']}"


def segmented(task: dict) -> list[str]:
    """The sides that come BPE-segmented: no codes are learned on them or applied to them."""
    return list((task.get("bpe") or {}).get("segmented", []))


HELDOUT_ENV = "LWNMT_HELDOUT_DIR"


def heldout_dir(config: dict) -> str | None:
    """The folder of the tasks' held-out source files: config key heldout_dir, else $LWNMT_HELDOUT_DIR."""
    import os

    value = config.get("heldout_dir") or os.environ.get(HELDOUT_ENV)
    if value and not os.path.isdir(os.path.expanduser(value)):
        raise UserError(
            f"heldout_dir {value!r} is not a directory (config key heldout_dir or ${HELDOUT_ENV}); "
            f"expected the folder holding the files the tasks' heldout_sets name"
        )
    return os.path.expanduser(value) if value else None


def heldout_sets(config: dict, task_name: str) -> dict[str, str]:
    """Task `task_name`'s held-out source files by set name, under the held-out folder; {} when the task has none
    or no folder is named. A named file that is not there is an error naming it."""
    import os

    sets = config["tasks"][task_name].get("heldout_sets") or {}
    folder = heldout_dir(config) if sets else None
    if not folder:
        return {}
    files = {name: os.path.join(folder, file) for name, file in sets.items()}
    for name, path in files.items():
        if not os.path.isfile(path):
            raise UserError(
                f"tasks/{task_name}/heldout_sets/{name}: {path} is not a file; expected the raw "
                f"{config['tasks'][task_name]['src']} source text (plain or .gz) in the held-out folder"
            )
    return files
