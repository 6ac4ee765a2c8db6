"""Small file helpers shared by the data steps: strict UTF-8 reading and atomic writes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from .. import UserError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    Nothing half-written is ever left under the final name (a killed job leaves at most a `.tmp-*` file).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the permissions open() would
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Write lines (without newlines) atomically, one per line; returns the count."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line)
            f.write("\n")
            n += 1
    return n


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """Lines of a UTF-8 text file without their newline; invalid UTF-8 is an error naming file and line."""
    with open(path, "rb") as f:
        yield from decode_lines(f, path)


def decode_lines(raw_lines: Iterable[bytes], name: str | os.PathLike) -> Iterator[str]:
    """Byte lines (a binary file, sys.stdin.buffer) as text lines without their newline; invalid UTF-8 is an
    error naming `name` and the line."""
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(
                f"{name}:{number}: invalid UTF-8 at byte {err.start} of the line "
                f"({raw[max(0, err.start - 10):err.start + 10]!r}); expected UTF-8 text"
            ) from None
        yield line.rstrip("\n").rstrip("\r")


def count_lines(path: str | os.PathLike) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)
