"""A task's parts and languages: raw file names, tokenizer options per side and split."""

from __future__ import annotations

from .. import UserError

SPLITS = ("train", "valid", "test")
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar", ".zip", ".gz", ".xml", ".sgm")


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
    apostrophe mapping. A side that comes BPE-segmented (`bpe: {segmented: [xx]}`) is tokenized already."""
    out: dict = {}
    for entry in (task.get("tokenize", {}), split.get("tokenize", {})):
        out.update({k: v for k, v in entry.items() if not isinstance(v, dict)})
        out.update(entry.get(lang, {}))
    if lang in segmented(task):
        out["tokenizer"] = "none"
    return {**out, "lowercase": bool(task.get("lowercase")),
            "normalize_apostrophe": bool(split.get("normalize_apostrophe"))}


def pair(task: dict) -> str:
    return f"{task['src']}-{task['tgt']}"


def segmented(task: dict) -> list[str]:
    """The sides that come BPE-segmented: no codes are learned on them or applied to them."""
    return list((task.get("bpe") or {}).get("segmented", []))
