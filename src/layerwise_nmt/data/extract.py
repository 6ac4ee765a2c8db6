"""Take a raw file out of an archive (tar, zip, gzip; an archive inside an archive) or copy it from a mirror,
verified: a damaged archive is named as damaged, a full disk as full, and the pairs of a wildcard member must agree
line for line."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import gzip
import os
import re
import shutil
import signal
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path

from .. import UserError
from .checksums import Checksum, changed_since_first_use, record_unpinned
from .fetch import HTML_START
from .io import CHUNK, atomic_path, check_writable, utf8_lines, disk_errors, require_space


def copy_verified(
    src: str | os.PathLike, out: str | os.PathLike, checksum: Checksum | None, where: str, text: bool = False
) -> None:
    """Copy a local (mirror) file after checking it; a missing file names what was expected. A file no reference
    pins must not be empty or an HTML page, and must be the file first used (`<out>.sha256`, recorded here). `text`:
    the file is UTF-8 text, one sentence per line, checked line by line (an invalid line named as src:line)."""
    if not os.path.exists(src):
        raise UserError(f"{src}: missing; expected it there (data mirror or user directory): get it from {where}")
    if not os.path.isfile(src):
        raise UserError(
            f"{src}: not a regular file (a directory?); expected the file itself there: replace it with "
            f"a copy from {where}"
        )
    if checksum is not None:
        checksum.verify(src, str(src), where)
    else:
        _check_unpinned_copy(src, out, where)
    check_writable(out)
    require_space(Path(out).parent, os.path.getsize(src), f"copying {src}")
    with _extraction(out, f"copying {src} to {out}", f"{src} is unchanged") as tmp:
        shutil.copyfile(src, tmp)
        if text:
            check_text(tmp, src)
    if checksum is None:  # recorded once the file is in place: a failed copy must not pin what never landed
        record_unpinned(out, str(src), origin=str(src), own=text)


def check_text(path: str | os.PathLike, name: str | os.PathLike) -> None:
    """Every line valid UTF-8 (the first invalid one named `name:line`); nothing else is asked of the text."""
    with open(path, "rb") as f:
        for _ in utf8_lines(f, name):
            pass


def _check_unchanged(
    path: str | os.PathLike, out: str | os.PathLike, source: str | os.PathLike, where: str, checksum: Checksum | None
) -> None:
    changed = None if checksum is not None else changed_since_first_use(path, out)
    if changed:
        raise UserError(
            f"{source} (decompressed) is {changed}; no checksum pins this file: replace it with the "
            f"copy first used, or, if this one is right, delete {out}.sha256 and rerun"
        )


def _check_unpinned_copy(src: str | os.PathLike, out: str | os.PathLike, where: str) -> None:
    with open(src, "rb") as f:
        head = f.read(512)
    problem = (
        "is empty"
        if not head
        else "is an HTML page (an error or login page saved as the file)"
        if head.lstrip().lower().startswith(HTML_START)
        else None
    )
    if problem:
        raise UserError(
            f"{src} {problem}; no checksum pins this file, so it was checked by size and content: "
            f"replace it with a copy from {where}"
        )
    changed = changed_since_first_use(src, out)
    if changed:
        raise UserError(
            f"{src} is {changed}; no checksum pins this file: replace it with a copy from {where}, or, "
            f"if this one is right, delete {out}.sha256 and rerun"
        )


@contextlib.contextmanager
def _extraction(out: str | os.PathLike, doing: str, kept: str):
    """atomic_path for an extraction: first removes the `.tmp-*` a killed earlier run left (SIGKILL), turns SIGTERM
    (Snakemake stopping its jobs) into an exit that removes this run's own, and names disk errors as such."""
    out = Path(out)
    for stale in out.parent.glob(f".tmp-{glob.escape(out.name)}.*") if out.parent.is_dir() else ():
        stale.unlink(missing_ok=True)
    with _sigterm_exits(), disk_errors(out.parent, doing, kept), atomic_path(out) as tmp:
        yield tmp


@contextlib.contextmanager
def _sigterm_exits():
    def exit_cleanly(signum, frame):
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, exit_cleanly)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


OWN_GZIP = "expected gzip-compressed UTF-8 text: compress it again, or name the uncompressed file in the config"


def extract_member(
    archive: str | os.PathLike,
    member: str | None,
    out: str | os.PathLike,
    checksum: Checksum | None,
    where: str,
    pair_member: str | None = None,
    text: bool = False,
) -> None:
    """Write one member of a .tgz/.tar/.zip archive (or the content of a .gz file) to `out`, then verify it.

    A member path with wildcards (`datum2017/Book*_cn.txt`) names several files: they are written in sorted order,
    each ending with a newline (a file without a final newline must not merge its last line with the next file's
    first). `pair_member`, the other side's pattern (`datum2017/Book*_en.txt`), pairs the files up by name
    (`Book1_cn.txt` with `Book1_en.txt`) and checks each pair has equal line counts.

    A damaged archive (truncated, corrupt compressed data) is named as such, once, with where to get a good copy; a
    full or write-protected disk is named as that, and the archive is kept.
    """
    archive = str(archive)
    name = f"{member or Path(archive).stem} (extracted from {archive})"
    check_writable(out)
    try:
        with _extraction(
            out, f"extracting {member or Path(archive).stem} from {archive}", f"the archive {archive} is fine: keep it"
        ) as tmp:
            if archive.endswith((".tgz", ".tar.gz", ".tar", ".zip")):
                with _opened(archive) as (names, size, open_member):
                    members = _matching(names, member, archive)
                    require_space(Path(out).parent, sum(map(size, members)), f"extracting {member}")
                    with open(tmp, "wb") as dst:
                        counts = []  # lines per member, where a wildcard's files are joined line by line
                        for name in members:
                            if _is_pattern(member):
                                counts.append(_copy_lines(open_member(name), dst))
                            else:
                                shutil.copyfileobj(open_member(name), dst, CHUNK)
                                if pair_member:  # a member named in full is checked against its pair too
                                    counts.append(_count_lines(open_member(name)))
                    if pair_member:
                        _check_pairs(archive, members, counts, _matching(names, pair_member, archive), open_member)
            elif archive.endswith(".gz"):
                require_space(Path(out).parent, gunzipped_size(archive), f"decompressing {archive}")
                with gzip.open(archive) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
                if text:  # the user's own gzipped file: its text checked, and compared with its first use
                    if os.path.getsize(tmp) == 0:  # else it passes every step up to training's first validation
                        raise UserError(f"{archive} is empty (it decompresses to nothing); expected a sentence a line")
                    check_text(tmp, archive)
                    _check_unchanged(tmp, out, archive, where, checksum)
            else:
                raise UserError(f"{archive}: unknown archive type; expected .tgz, .tar.gz, .tar, .zip or .gz")
            if checksum is not None:
                checksum.verify(tmp, name, where, culprit=archive)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile, zlib.error, KeyError) as err:
        kind = "zlib.error" if isinstance(err, zlib.error) else type(err).__name__  # zlib's class is `error`
        if text:  # the user's own file, perhaps their only copy: never advise deleting it
            raise UserError(f"{archive}: not a readable gzip file ({kind}: {err}); {OWN_GZIP}") from None
        raise UserError(
            f"{archive}: truncated or corrupt archive ({kind}: {err}); delete it and fetch it again from {where}"
        ) from None
    except OSError as err:  # reading the archive failed (disk errors of the output were named above)
        if text:  # gzip's EINVAL: too short to be gzip (a 0-byte file); another errno is the disk's
            advice = f"; {OWN_GZIP}" if err.errno in (None, errno.EINVAL) else ""
            raise UserError(f"{archive}: could not be read ({type(err).__name__}: {err}){advice}") from None
        raise UserError(
            f"{archive}: could not be read ({type(err).__name__}: {err}); if the file is damaged, delete "
            f"it and fetch it again from {where}"
        ) from None
    if checksum is None:  # recorded once the file is in place: a failed extraction must not pin what never landed
        record_unpinned(out, name, origin=archive if text else None, own=text)


@contextlib.contextmanager
def _opened(archive: str):
    """(member names, size of a member, open a member) of a tar or zip archive."""
    if archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:

            def open_zip(name: str):
                info = zf.getinfo(name)
                kind_bits = stat.S_IFMT(info.external_attr >> 16)  # Unix file type, where a zip records one
                if info.is_dir() or (kind_bits and kind_bits != stat.S_IFREG):
                    kind = "a directory" if info.is_dir() else _KINDS.get(kind_bits, "not a regular file")
                    raise UserError(
                        f"{archive}: member {name} is {kind}, not a file; expected a regular file "
                        f"(check the member path in config.yaml)"
                    )
                return zf.open(info)

            yield zf.namelist(), lambda name: zf.getinfo(name).file_size, open_zip
    else:
        with tarfile.open(archive) as tar:

            def open_tar(name: str):
                info = tar.getmember(name)
                if not info.isfile():  # links, directories, FIFOs, devices: never followed, never read
                    target = f" to {info.linkname}" if info.issym() or info.islnk() else ""
                    raise UserError(
                        f"{archive}: member {name} is {_tar_kind(info)}{target}, not a file; expected a "
                        f"regular file (check the member path in config.yaml)"
                    )
                return tar.extractfile(info)

            yield tar.getnames(), lambda name: tar.getmember(name).size, open_tar


_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _tar_kind(info: tarfile.TarInfo) -> str:
    return (
        "a symbolic link"
        if info.issym()
        else "a hard link"
        if info.islnk()
        else "a directory"
        if info.isdir()
        else "a FIFO"
        if info.isfifo()
        else "a device"
        if info.isdev()
        else "not a regular file"
    )


def _copy_lines(src, dst) -> int:
    """Copy a text member, ending its last line; returns its line count."""
    lines, last = 0, b"\n"
    with src:
        while block := src.read(CHUNK):
            dst.write(block)
            lines += block.count(b"\n")
            last = block[-1:]
    if last != b"\n":
        dst.write(b"\n")
        lines += 1
    return lines


def _count_lines(src) -> int:
    with src:
        return _copy_lines(src, _Discard())


class _Discard:
    def write(self, data: bytes) -> None:
        pass


SIDE_SUFFIX = re.compile(r"_[A-Za-z]{2}(\.[^./]*)$")  # Book1_cn.txt, casia2015_ch.txt, NEU_en.txt


def _check_pairs(archive: str, members: list[str], counts: list[int], others: list[str], open_member) -> None:
    stem = lambda name: SIDE_SUFFIX.sub(r"\1", name)  # noqa: E731
    if [stem(m) for m in members] != [stem(o) for o in others]:
        raise UserError(
            f"{archive}: the files {members} and {others} do not pair up by name; expected one "
            f"_xx file per side for each name"
        )
    for name, count, other in zip(members, counts, others, strict=True):
        other_count = _count_lines(open_member(other))
        if count != other_count:
            raise UserError(
                f"{archive}: {name} has {count} lines but {other} has {other_count}; the files of a "
                f"parallel pair must have equal line counts"
            )


def _is_pattern(member: str | None) -> bool:
    return member is not None and any(c in member for c in "*?[")


def gunzipped_size(path: str) -> int:
    """The size a .gz file inflates to: its ISIZE trailer (size mod 2^32), never less than 3× the compressed size."""
    compressed = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        isize = int.from_bytes(f.read(4), "little")
    return max(isize, 3 * compressed)


def _matching(names: list[str], member: str | None, archive: str) -> list[str]:
    if member is None:
        raise UserError(f"{archive}: an archive needs a member path")
    if not _is_pattern(member):
        if member not in names:
            raise UserError(f"{archive}: has no member {member!r}")
        return [member]
    found = sorted(n for n in names if fnmatch.fnmatchcase(n, member))
    if not found:
        raise UserError(f"{archive}: no member matches {member!r}")
    return found
