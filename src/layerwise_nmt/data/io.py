"""Small file helpers shared by the data steps: strict UTF-8 reading and atomic writes."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import urllib.error
import tempfile
from pathlib import Path
from collections.abc import Iterable, Iterator

from .. import UserError

CHUNK = 1 << 20  # bytes per read when copying, hashing or downloading
_UMASK = os.umask(0)
os.umask(_UMASK)


def check_writable(path: str | os.PathLike) -> None:
    """A UserError, before any work, when `path` cannot become a file: it is a directory, or one of the folders
    above it is a file. Commands call it on their output paths first, so that a typo costs nothing computed."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory; expected the path of a file to write")
    check_folders(path)


def check_folders(path: str | os.PathLike) -> None:
    """A UserError when one of the folders above `path` exists as a file (mkdir's bare "File exists" otherwise)."""
    path = Path(path)
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise UserError(f"{path}: {folder} is a file, not a folder; expected a path whose folders are folders")
            break


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ""):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    Nothing half-written is ever left under the final name (a killed job leaves at most a `.tmp-*` file, whose name
    ends with `suffix`).
    """
    path = Path(path)
    check_writable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}.", suffix=suffix, dir=path.parent)
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
    """Lines of a UTF-8 text file (gzip-compressed where its name ends in .gz) without their newline; invalid UTF-8
    is an error naming file and line."""
    if str(path).endswith(".gz"):
        import gzip

        with gzip.open(path, "rb") as f:
            yield from utf8_lines(f, path)
        return
    with open(path, "rb") as f:
        yield from utf8_lines(f, path)


def utf8_lines(raw_lines: Iterable[bytes], name: str | os.PathLike) -> Iterator[str]:
    """Byte lines (a binary file, sys.stdin.buffer) as text lines without their newline; invalid UTF-8 is an
    error naming `name` and the line."""
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(
                f"{name}:{number}: invalid UTF-8 at byte {err.start} of the line "
                f"({raw[max(0, err.start - 10) : err.start + 10]!r}); expected UTF-8 text"
            ) from None
        yield line.rstrip("\n").rstrip("\r")


def count_lines(path: str | os.PathLike) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def human_size(n: float) -> str:
    """1234 → '1.2 KB': a free-space message must never read 'needs 0.00 GB but has 0.00 GB free'."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def require_space(directory: str | os.PathLike, needed: int, what: str) -> None:
    """Fail before writing `needed` bytes into `directory` if the disk cannot hold them (10% margin)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if needed * 1.1 > free:
        raise UserError(
            f"{what}: needs {human_size(needed)} but {directory} has {human_size(free)} free; "
            f"free some space or point results/ to a larger disk"
        )


# Errors of the local disk, not of the data: named as what they are, never "corrupt archive" or "download by hand".
DISK_ERRORS = {
    errno.ENOSPC: (
        "no space left on the device",
        "free some space on that disk (or point results/ to a larger "
        "one; with several jobs at once, run fewer: --cores N) and rerun",
    ),
    errno.EDQUOT: ("disk quota exceeded", "free some space within your quota and rerun"),
    errno.EFBIG: ("file too large for the file system", "put results/ on a file system that holds large files"),
    errno.EROFS: ("read-only file system", "run where results/ is writable"),
    errno.EACCES: ("permission denied", "make that directory writable for you (or run from a checkout you own)"),
    errno.EPERM: ("operation not permitted", "make that directory writable for you (or run from a checkout you own)"),
}


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike, doing: str, kept: str = ""):
    """Turn a full disk or a write-protected directory met while `doing` into one line naming it (errno included)
    and what to do; `kept`: what stays good (the archive, the bytes downloaded so far)."""
    try:
        yield
    except OSError as err:
        if err.errno not in DISK_ERRORS or isinstance(err, urllib.error.URLError):
            raise
        what, todo = DISK_ERRORS[err.errno]
        raise UserError(
            f"{doing}: {what} ({errno.errorcode[err.errno]}) writing {err.filename or path}; "
            f"{kept + '; ' if kept else ''}{todo}"
        ) from None
