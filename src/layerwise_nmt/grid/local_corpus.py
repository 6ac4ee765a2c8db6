"""A corpus from the user's own files: a dataset's `local:` entry (a directory, and the train/valid/test file of
each language, plain text or gzip) turned into the `user_path` + `files` form every other step reads, and the
train/valid/test splits of a task on it, when the task does not spell them out.

    datasets:
      my-corpus:
        local: {dir: ~/corpora/fi-et, train: "train.{lang}.gz", valid: "dev.{lang}", test: "test.{lang}"}

A split's files are a name with `{lang}` (the task's language codes fill it in), or one name per language
(`{fi: corpus.fi, et: corpus.et}`). Further test sets go under `tests:` by name (`tests: {news: "news.{lang}"}`):
each becomes an evaluation split of that name, scored like the test set. The raw copies are
results/raw/<dataset>/<split>.<lang>, hashed on first use: a file that changes afterwards is refused
(data/extract.py)."""

from __future__ import annotations

import gzip
import os
import zlib
import re
from pathlib import Path

from .. import UserError
from .tasks import SPLIT_FORMAT, SPLITS

# File-name components that look like a language code but say something else about the file.
NOT_LANGUAGES = {
    "txt",
    "tok",
    "bpe",
    "raw",
    "gz",
    "cln",
    "out",
    "src",
    "tgt",
    "ref",
    "hyp",
    "tsv",
    "dev",
    "all",
    "new",
    "old",
    "tst",
    "sgm",
    "xml",
}
CODE = re.compile(r"^[a-z]{2,3}$")
SAMPLE_BYTES = 4 << 20  # bytes read to estimate a large file's line count and sentence length


def expand_local(config: dict) -> None:
    """Every `local:` dataset as `user_path` + `files`, and every task on one with its splits filled in; in place,
    and the same however often it runs."""
    datasets, tasks = config.get("datasets", {}), config.get("tasks", {})
    local = {name for name, spec in datasets.items() if isinstance(spec.get("local"), dict)}
    for name in local:
        spec = datasets[name]
        spec["user_path"] = spec["local"]["dir"]
        spec["files"] = {}
    for task_name, task in tasks.items():
        if task.get("dataset") not in local:
            continue
        spec = datasets[task["dataset"]]
        named = named_test_sets(spec["local"])
        for split in SPLITS + tuple(named):
            source = {"dir": spec["local"]["dir"], **named} if split in named else spec["local"]
            for lang, file in split_files(
                source, split, task, task["dataset"], task_name, "tests" if split in named else ""
            ).items():
                spec["files"][f"{split}.{lang}"] = {"path": file}
        for lang in (task["src"], task["tgt"]):
            if lang == "zh" and "tokenizer" not in task.get("tokenize", {}):  # as the WMT17 Zh-En task does it
                task.setdefault("tokenize", {}).setdefault("zh", {}).setdefault("tokenizer", "jieba")
        splits = task.setdefault("splits", {})
        for split in SPLITS + tuple(named):
            default: dict = {"parts": [f"{split}.{{lang}}"], "format": SPLIT_FORMAT}
            if split == "train":
                default["clean"] = {"ratio": 9.0, "min_len": 1, "max_len": 250}
            else:  # the user's own evaluation data (valid, test, named test sets): nothing else checked it
                default["overlap_with_train"] = "warn"
            splits[split] = {**default, **splits.get(split, {})}
        if "estimate" not in task:
            found = estimate(Path(spec["user_path"]).expanduser(), spec["files"], task)
            if found:
                task["estimate"] = found


def named_test_sets(local: dict) -> dict:
    """The further test sets of a `local:` entry, by name (`tests:`)."""
    return dict(local.get("tests") or {})


def split_files(local: dict, split: str, task: dict, dataset: str, task_name: str, group: str = "") -> dict[str, str]:
    """{language: file name under the directory} of one split, checked against the task's languages; `group`: the
    key the split is under (tests), for messages."""
    entry, key = local.get(split), f"datasets/{dataset}/local/{f'{group}/' if group else ''}{split}"
    langs = (task["src"], task["tgt"])
    if entry is None:
        raise UserError(
            f'config key {key}: missing; expected the {split} file of each language, e.g. "{split}.{{lang}}"'
        )
    if isinstance(entry, str):
        if "{lang}" not in entry:
            raise UserError(
                f"config key {key}: {entry!r} has no {{lang}}; expected a name such as "
                f'"{split}.{{lang}}" or one name per language ({langs[0]}: ..., {langs[1]}: ...)'
            )
        try:
            files = {lang: entry.format(lang=lang) for lang in langs}
        except (KeyError, IndexError, ValueError) as err:  # another {placeholder}, or a stray brace
            raise UserError(
                f"config key {key}: {entry!r} is not a name with {{lang}} in it ({type(err).__name__}: {err}); "
                f"expected {{lang}} as its only placeholder (a literal brace is written twice: {{{{ }}}})"
            ) from None
        _check_present(local, key, files, entry, task_name)
        return files
    if sorted(entry) != sorted(langs):
        raise UserError(
            f"config key {key}: files for {', '.join(entry)}, but task {task_name} translates "
            f"{langs[0]}→{langs[1]}; expected one file for each of {langs[0]} and {langs[1]}"
        )
    for lang, file in entry.items():
        named = file_language(file)
        if named is not None and named != lang and named in langs + tuple(entry):
            raise UserError(
                f"config key {key}/{lang}: {file} is named for language {named!r}, not {lang!r}; "
                f"expected the {lang} side (are the two files swapped?)"
            )
        # only a code of the task's own form contradicts it: a three-letter part beside two-letter codes is
        # another standard's code for the same language (newstest.fin.txt for fi) or a word (train.raw)
        if named is not None and named != lang and named not in langs and len(named) == len(lang):
            raise UserError(
                f"config key {key}/{lang}: {file} is named for language {named!r}, but task "
                f"{task_name} translates {langs[0]}→{langs[1]}; expected a {lang} file (or the task's "
                f"src/tgt set to the files' language codes)"
            )
    return dict(entry)


def file_language(file: str) -> str | None:
    """The language code a file's name ends with (`train.fi`, `dev.et.gz`, `news_en.txt`), if it has one."""
    parts = [p for p in re.split(r"[._\-/]", Path(file).name.lower()) if p]
    for part in reversed(parts):
        if part in NOT_LANGUAGES or part.isdigit():
            continue
        return part if CODE.match(part) else None
    return None


def _check_present(local: dict, key: str, files: dict[str, str], template: str, task_name: str) -> None:
    """A template whose files are missing while files with another language code are there: the task's language
    codes and the files' names disagree (a missing directory or file is `lwnmt status`'s to report)."""
    root = Path(local["dir"]).expanduser()
    if not root.is_dir():
        return
    pattern = re.compile(re.escape(template).replace(r"\{lang\}", r"([a-z]{2,3})") + "$")
    present = {m.group(1): f.name for f in root.iterdir() if (m := pattern.match(f.name))}
    missing = [lang for lang, file in files.items() if not (root / file).exists()]
    others = sorted(set(present) - set(files))
    if missing and others:
        raise UserError(
            f"config key {key}: {root} has {', '.join(present[o] for o in others)} but no "
            f"{', '.join(files[m] for m in missing)}; task {task_name}'s languages are "
            f"{'/'.join(files)}: expected the files' language codes to match the task's src and tgt"
        )


def estimate(root: Path, files: dict, task: dict) -> dict | None:
    """The task's `estimate` (what `lwnmt plan` prices before anything is prepared) from the training files: pairs
    (counted, or from a sample of a large file), words per sentence, and the vocabulary BPE would give."""
    train = [root / files.get(f"train.{lang}", {}).get("path", "") for lang in (task["src"], task["tgt"])]
    if not all(p.is_file() for p in train):
        return None
    try:
        pairs, words = _count(train[0])
        words_tgt = _count(train[1])[1]
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):  # unreadable: the extract job names the file and why
        return None
    if not pairs:
        return None
    merges = (task.get("bpe") or {}).get("merges")
    vocab = merges + 500 if merges else task.get("vocab", {}).get("words") or 30000
    subwords = max(1.0, round(1.2 * max(words, words_tgt), 1))  # BPE splits about one word in five
    return {"train_pairs": pairs, "subwords_per_sentence": subwords, "vocab": vocab}


def _count(path: Path) -> tuple[int, float]:
    """(lines, words per line) of a text file: counted up to SAMPLE_BYTES, extrapolated from there by size."""
    compressed = path.name.endswith(".gz")
    size = os.path.getsize(path)
    with open(path, "rb") as raw, gzip.GzipFile(fileobj=raw) if compressed else raw as f:
        sample = f.read(SAMPLE_BYTES)
        whole = not f.read(1)
        consumed = raw.tell() if compressed else len(sample)  # compressed bytes behind the sample
    lines = sample.count(b"\n") + (0 if sample.endswith(b"\n") or not sample else 1)
    words = len(sample.split()) / lines if lines else 0.0
    if whole or not consumed:
        return lines, words
    return int(lines * size / consumed), words
