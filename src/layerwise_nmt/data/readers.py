"""Corpus readers: one segment per returned line, whatever the release format.

Formats (named in config as a part's `format`):
  plain     one segment per line
  xml       IWSLT/WMT-style `<seg id="N"> … </seg>` lines (the ids are returned so both sides can be paired)
  ted_tags  IWSLT `train.tags.*` files: TED talk text with metadata lines
The transformations are exactly those of fairseq's `prepare-iwslt14.sh` (grep/sed), so outputs match it byte for byte.
"""

from __future__ import annotations

import re
from typing import Callable

from .. import UserError
from .io import read_lines

SEG_OPEN = re.compile(r'<seg id="([0-9]*)">\s*')
SEG_CLOSE = re.compile(r"\s*</seg>\s*")
# prepare-iwslt14.sh: `grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>'`, then strips the
# title/description tags but keeps their text as training segments.
TAGS_DROP = ("<url>", "<talkid>", "<keywords>")
TAGS_STRIP = re.compile(r"</?(?:title|description)>")


def read_plain(path: str) -> tuple[list[str], list[str] | None]:
    return list(read_lines(path)), None


def read_xml(path: str) -> tuple[list[str], list[str]]:
    segments, ids = [], []
    for line in read_lines(path):
        if "<seg id" not in line:
            continue
        match = SEG_OPEN.search(line)
        if match is None:
            raise UserError(f"{path}: malformed <seg> line {line[:60]!r}; expected <seg id=\"N\">")
        ids.append(match.group(1))
        segments.append(SEG_CLOSE.sub("", SEG_OPEN.sub("", line)))
    if not segments:
        raise UserError(f"{path}: no <seg id=...> elements; expected an IWSLT/WMT XML or SGML set")
    return segments, ids


def read_ted_tags(path: str) -> tuple[list[str], None]:
    lines = (line for line in read_lines(path) if not any(tag in line for tag in TAGS_DROP))
    return [TAGS_STRIP.sub("", line) for line in lines], None


READERS: dict[str, Callable[[str], tuple[list[str], list[str] | None]]] = {
    "plain": read_plain,
    "xml": read_xml,
    "ted_tags": read_ted_tags,
}


def read_parallel(src_path: str, tgt_path: str, fmt: str) -> tuple[list[str], list[str]]:
    """Read both sides of a parallel part and check they pair up (same count; same seg ids for XML)."""
    if fmt not in READERS:
        raise UserError(f"unknown corpus format {fmt!r} for {src_path}; expected one of {sorted(READERS)}")
    src, src_ids = READERS[fmt](src_path)
    tgt, tgt_ids = READERS[fmt](tgt_path)
    if src_ids is not None and src_ids != tgt_ids:
        at = next((i for i, (a, b) in enumerate(zip(src_ids, tgt_ids)) if a != b), min(len(src_ids), len(tgt_ids)))
        first = lambda ids: ids[at] if at < len(ids) else "end of file"  # noqa: E731
        raise UserError(
            f"{src_path} and {tgt_path}: <seg> ids do not pair up at segment {at + 1} "
            f"(id {first(src_ids)} vs {first(tgt_ids)}); expected the same ids in the same order"
        )
    if len(src) != len(tgt):
        raise UserError(
            f"{src_path} has {len(src)} segments but {tgt_path} has {len(tgt)}; parallel files must have equal counts"
        )
    return src, tgt
