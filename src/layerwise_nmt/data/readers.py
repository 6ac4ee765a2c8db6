"""Corpus readers: one segment per returned line, whatever the release format.

Formats (named in config as a part's `format`):
  plain     one segment per line
  xml       IWSLT/WMT-style `<seg id="N"> … </seg>` lines (the ids are returned so both sides can be paired)
  wmt       a WMT dev/test set: the official SGML (read as xml), or the plain text a mirror may hold instead.
            On newstest2014 the two give the same segments except 4 source lines where the SGML has a double
            space that the plain extraction collapsed (tests/test_datasets.py); tokenization removes the difference.
  ted_tags  IWSLT `train.tags.*` files: TED talk text with metadata lines
  nist      NIST MT0x SGML (LDC): a source set, or a reference set with several translations per document
The transformations are exactly those of fairseq's `prepare-iwslt14.sh` (grep/sed), so outputs match it byte for byte.
Plain and ted_tags files are streamed (training corpora have tens of millions of lines); xml sets are small.
NIST MT0x sets (LDC) have several reference translations: `read_references` returns one stream per reference.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable

from .. import UserError
from .io import read_lines

SEG_OPEN = re.compile(r'<seg id="([0-9]*)">\s*')
SEG_CLOSE = re.compile(r"\s*</seg>\s*")
# prepare-iwslt14.sh: `grep -v '<url>' | grep -v '<talkid>' | grep -v '<keywords>'`, then strips the
# title/description tags but keeps their text as training segments.
TAGS_DROP = ("<url>", "<talkid>", "<keywords>")
TAGS_STRIP = re.compile(r"</?(?:title|description)>")


def read_plain(path: str) -> tuple[Iterable[str], None]:
    return read_lines(path), None


def read_xml(path: str) -> tuple[list[str], list[str]]:
    segments, ids = [], []
    for line in read_lines(path):
        if "<seg id" not in line:
            continue
        match = SEG_OPEN.search(line)
        if match is None:
            raise UserError(f'{path}: malformed <seg> line {line[:60]!r}; expected <seg id="N">')
        ids.append(match.group(1))
        segments.append(SEG_CLOSE.sub("", SEG_OPEN.sub("", line)))
    if not segments:
        raise UserError(f"{path}: no <seg id=...> elements; expected an IWSLT/WMT XML or SGML set")
    return segments, ids


def read_ted_tags(path: str) -> tuple[Iterable[str], None]:
    lines = (line for line in read_lines(path) if not any(tag in line for tag in TAGS_DROP))
    return (TAGS_STRIP.sub("", line) for line in lines), None


def read_wmt(path: str) -> tuple[Iterable[str], list[str] | None]:
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    return read_xml(path) if head[:1] == b"<" else read_plain(path)


DOC = re.compile(r"<doc\b", re.IGNORECASE)
SYSID = re.compile(r'\bsysid="([^"]*)"', re.IGNORECASE)


def read_references(path: str) -> list[list[str]]:
    """A NIST reference SGML (`<refset>` holding each document once per reference, `<doc docid=… sysid=ref1>`):
    one list of segments per sysid, each in document order, checked to have equal lengths."""
    streams: dict[str, list[str]] = defaultdict(list)
    sysid = None
    for number, line in enumerate(read_lines(path), start=1):
        if DOC.search(line):
            match = SYSID.search(line)
            sysid = match.group(1) if match else "ref"
        elif "<seg" in line.lower():
            if sysid is None:
                raise UserError(f"{path}:{number}: <seg> outside a <doc sysid=...>; expected NIST reference SGML")
            text = re.sub(r"^.*?<seg[^>]*>\s*", "", line, flags=re.IGNORECASE)
            streams[sysid].append(re.sub(r"\s*</seg>.*$", "", text, flags=re.IGNORECASE))
    if not streams:
        raise UserError(f"{path}: no <doc sysid=...> with <seg> elements; expected NIST reference SGML")
    lengths = {name: len(segs) for name, segs in streams.items()}
    if len(set(lengths.values())) != 1:
        raise UserError(f"{path}: references have different segment counts {lengths}; expected equal counts")
    return [streams[name] for name in sorted(streams)]


def read_nist(path: str) -> tuple[list[str], None]:
    """A NIST source or reference SGML: its first translation (tokenized text, training-time validation)."""
    return read_references(path)[0], None


READERS: dict[str, Callable[[str], tuple[Iterable[str], list[str] | None]]] = {
    "plain": read_plain,
    "xml": read_xml,
    "wmt": read_wmt,
    "ted_tags": read_ted_tags,
    "nist": read_nist,
}


def read_all_references(path: str, fmt: str) -> Iterable[str]:
    """Every reference of an evaluation file, one after the other (K × N lines for K references of N segments);
    a single-reference format gives its N segments."""
    if fmt == "nist":
        return [segment for stream in read_references(path) for segment in stream]
    return READERS[fmt](path)[0]


def count_segments(path: str, fmt: str) -> tuple[int, list[str] | None]:
    """How many segments a raw file has (streamed), with the <seg> ids of xml sets."""
    if fmt not in READERS:
        raise UserError(f"unknown corpus format {fmt!r} for {path}; expected one of {sorted(READERS)}")
    segments, ids = READERS[fmt](path)
    return sum(1 for _ in segments), ids


def check_parallel(src_path: str, tgt_path: str, fmt: str) -> int:
    """Check both sides of a parallel part pair up (same count; same seg ids for XML); returns the count."""
    n_src, src_ids = count_segments(src_path, fmt)
    n_tgt, tgt_ids = count_segments(tgt_path, fmt)
    if src_ids is not None and tgt_ids is not None and src_ids != tgt_ids:
        at = next(  # the two lists may differ in length: equal up to the shorter's end, the mismatch is past it
            (i for i, (a, b) in enumerate(zip(src_ids, tgt_ids, strict=False)) if a != b),
            min(len(src_ids), len(tgt_ids)),
        )
        first = lambda ids: ids[at] if at < len(ids) else "end of file"  # noqa: E731
        raise UserError(
            f"{src_path} and {tgt_path}: <seg> ids do not pair up at segment {at + 1} "
            f"(id {first(src_ids)} vs {first(tgt_ids)}); expected the same ids in the same order"
        )
    if n_src != n_tgt:
        raise UserError(
            f"{src_path} has {n_src} segments but {tgt_path} has {n_tgt}; parallel files must have equal counts"
        )
    return n_src
