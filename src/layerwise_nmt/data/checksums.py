"""Checksums of raw files: the published ones (sha256, md5, a git blob id) verified, and a file whose publisher
gives none hashed on first use (`<file>.sha256` beside it), so that every later copy is compared with that one."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from .io import CHUNK

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checksum:
    """Expected digest of a file: kind is 'sha256', 'md5' or 'git_blob'; source says where the value came from."""

    kind: str
    value: str
    source: str | None = None

    def compute(self, path: str | os.PathLike) -> str:
        if self.kind in ("sha256", "md5"):
            digest = hashlib.new(self.kind)
        elif self.kind == "git_blob":  # what `git hash-object FILE` prints
            digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())
        else:
            raise ValueError(f"unknown checksum kind {self.kind!r}; expected sha256, md5 or git_blob")
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        return digest.hexdigest()

    def cited(self) -> str:
        return f" (from {self.source})" if self.source else ""

    def verify(self, path: str | os.PathLike, name: str, where: str, culprit: str | os.PathLike | None = None) -> None:
        """`where`: where a good copy comes from (the official URL), never the place that holds the bad one;
        `culprit`: the file to delete when it is not `path` itself (the archive a member was extracted from)."""
        actual = self.compute(path)
        if actual != self.value:
            raise UserError(
                f"{name}: {self.kind} is {actual}, expected {self.value}{self.cited()}; the file is corrupt or a "
                f"different version: delete {culprit or path} and replace it with a copy from {where}"
            )


KINDS = ("sha256", "md5", "git_blob")
HEX_DIGITS = {"sha256": 64, "md5": 32, "git_blob": 40}  # each kind's digest, as hexdigest() writes it


def checksum_from(
    sha256: str | None = None, git_blob: str | None = None, md5: str | None = None, source: str | None = None
) -> Checksum | None:
    given = [(kind, value) for kind, value in zip(KINDS, (sha256, md5, git_blob), strict=True) if value]
    if len(given) > 1:
        raise UserError("give one of sha256, md5 or git_blob for a file, not several")
    for kind, value in given:  # a mistyped value is not a corrupt file: said before any file is read or deleted
        if not re.fullmatch(f"[0-9a-fA-F]{{{HEX_DIGITS[kind]}}}", value):
            raise UserError(
                f"--{kind.replace('_', '-')} {value!r}: expected {HEX_DIGITS[kind]} hex digits (a {kind} digest)"
            )
    return Checksum(*given[0], source) if given else None


def record_unpinned(
    path: str | os.PathLike,
    name: str,
    origin: str | None = None,
    own: bool = False,
) -> str:
    """No published checksum: write `<path>.sha256` and say how to pin it (trust on
    first use). Its second line, a comment `sha256sum -c` skips, keeps the size and where the file came from: a later
    download or mirror copy of the same file is compared with both (`check_first_use`)."""
    value = Checksum("sha256", "").compute(path)
    size = os.path.getsize(path)
    came = f" from {origin}" if origin else ""
    Path(f"{path}.sha256").write_text(
        f"{value}  {Path(path).name}\n# {size} bytes, first used {time.strftime('%Y-%m-%d')}{came}\n"
    )
    if own:  # the user's own corpus: nothing published to pin, the record is the reference from now on
        log.info("%s: first use, sha256 %s recorded in %s.sha256; a later change is refused", name, value, path)
    else:
        log.warning("%s has no checksum in the config; its sha256 is %s (pin it as `sha256: %s`)", name, value, value)
    return value


@dataclass(frozen=True)
class FirstUse:
    """What `<file>.sha256` recorded about the first copy of an unpinned file."""

    sha256: str
    size: int | None
    record: Path
    origin: str | None = None  # where the first copy came from (the URL, the mirror or the user's file)


def first_use(out: str | os.PathLike) -> FirstUse | None:
    record = Path(f"{out}.sha256")
    if not record.is_file():
        return None
    text = record.read_text()
    size = re.search(r"^# (\d+) bytes", text, re.MULTILINE)
    origin = re.search(r"^# \d+ bytes, first used \S+ from (.+)$", text, re.MULTILINE)
    return FirstUse(
        text.split()[0] if text.split() else "",
        int(size.group(1)) if size else None,
        record,
        origin.group(1) if origin else None,
    )


def changed_since_first_use(path: str | os.PathLike, out: str | os.PathLike) -> str | None:
    """How an unpinned file differs from the first copy used (`<out>.sha256`): by size first (cheap), then hash;
    None when it is the same file or there was no first copy."""
    first = first_use(out)
    if first is None:
        return None
    size = os.path.getsize(path)
    if first.size is not None and size != first.size:
        return f"{size:,} bytes, but the first copy of this file had {first.size:,} (recorded in {first.record})"
    actual = Checksum("sha256", "").compute(path)
    if actual != first.sha256:
        return f"sha256 {actual}, but the first copy of this file had {first.sha256} (recorded in {first.record})"
    return None
