"""Download (or take from a local mirror), verify and extract the raw corpora.

A source file is identified by its URL and a checksum: `sha256`, `md5` where that is what is published (sacrebleu's
record of the WMT test-set tarballs) or a git blob id (`git_blob`: the fairseq mirror of IWSLT14, whose files are
known by their blob ids). A file whose publisher gives no checksum is still hashed: its sha256 is written beside it
(`<file>.sha256`) and logged, so a user can pin it in the config.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import logging
import os
import shutil
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from .. import UserError
from .io import atomic_path

log = logging.getLogger(__name__)
CHUNK = 1 << 20


@dataclass(frozen=True)
class Checksum:
    """Expected digest of a file: kind is 'sha256' or 'git_blob'."""

    kind: str
    value: str

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

    def verify(self, path: str | os.PathLike, name: str, where: str) -> None:
        actual = self.compute(path)
        if actual != self.value:
            raise UserError(
                f"{name}: {self.kind} is {actual}, expected {self.value}; the file is corrupt or a different "
                f"version: delete it and get it again from {where}"
            )


KINDS = ("sha256", "md5", "git_blob")


def checksum_from(sha256: str | None = None, git_blob: str | None = None, md5: str | None = None) -> Checksum | None:
    given = [(kind, value) for kind, value in zip(KINDS, (sha256, md5, git_blob)) if value]
    if len(given) > 1:
        raise UserError("give one of sha256, md5 or git_blob for a file, not several")
    return Checksum(*given[0]) if given else None


def record_unpinned(path: str | os.PathLike, name: str) -> str:
    """No published checksum: write `<path>.sha256` and say how to pin it (trust on first download)."""
    value = Checksum("sha256", "").compute(path)
    Path(f"{path}.sha256").write_text(f"{value}  {Path(path).name}\n")
    log.warning("%s has no checksum in the config; its sha256 is %s (pin it as `sha256: %s`)", name, value, value)
    return value


def require_space(directory: str | os.PathLike, needed: int, what: str) -> None:
    """Fail before writing `needed` bytes into `directory` if the disk cannot hold them (10% margin)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if needed * 1.1 > free:
        raise UserError(f"{what}: needs {needed / 1e9:.2f} GB but {directory} has {free / 1e9:.2f} GB free; "
                        f"free some space or point results/ to a larger disk")


def download(url: str, out: str | os.PathLike, checksum: Checksum | None, retries: int = 4) -> None:
    """Fetch `url` to `out` with retries, HTTP-range resume of a partial `.part` file, and a progress bar.

    The final name appears only after the checksum has passed.
    """
    out = Path(out)
    part = out.with_name(out.name + ".part")
    out.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, retries + 1):
        try:
            _download_once(url, part)
            break
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            if attempt == retries:
                raise UserError(
                    f"{url}: download failed after {retries} attempts ({err}); check the network, or put the "
                    f"file in a data mirror directory and set data_mirror (config key or LWNMT_DATA_MIRROR)"
                ) from None
            wait = 2**attempt
            log.warning("download of %s failed (%s); retry %d/%d in %ds", url, err, attempt, retries, wait)
            time.sleep(wait)
    if checksum is not None:
        try:
            checksum.verify(part, url, url)
        except UserError:
            part.unlink()  # a corrupt download must not be resumed
            raise
    else:
        record_unpinned(part, url)
        os.replace(f"{part}.sha256", f"{out}.sha256")
    os.replace(part, out)


def _download_once(url: str, part: Path) -> None:
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "layerwise-nmt"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(request, timeout=60) as response:
        resumed = have and response.status == 206
        if not resumed:
            have = 0  # the server ignored the range: start over
        length = getattr(response, "length", None)  # None for FTP and chunked responses
        total = length + have if length is not None else None
        if length is not None:
            require_space(part.parent, length, url)
        with open(part, "ab" if resumed else "wb") as f, tqdm(
            total=total, initial=have, unit="B", unit_scale=True, desc=part.name[: -len(".part")],
            mininterval=2.0,
        ) as bar:
            while block := response.read(CHUNK):
                f.write(block)
                bar.update(len(block))


def copy_verified(src: str | os.PathLike, out: str | os.PathLike, checksum: Checksum | None, where: str) -> None:
    """Copy a local (mirror) file after checking it; a missing file names what was expected."""
    if not os.path.exists(src):
        raise UserError(f"{src}: missing; expected it in the data mirror ({where})")
    if checksum is not None:
        checksum.verify(src, str(src), where)
    require_space(Path(out).parent, os.path.getsize(src), f"copying {src}")
    with atomic_path(out) as tmp:
        shutil.copyfile(src, tmp)


def extract_member(archive: str | os.PathLike, member: str | None, out: str | os.PathLike,
                   checksum: Checksum | None, where: str) -> None:
    """Write one member of a .tgz/.tar/.zip archive (or the content of a .gz file) to `out`, then verify it.

    A member path with wildcards (`datum2017/Book*_cn.txt`) names several files: they are concatenated in sorted
    order, so both sides of a corpus split over many files line up.
    """
    archive = str(archive)
    try:
        with atomic_path(out) as tmp:
            with open(tmp, "wb") as dst:
                if archive.endswith((".tgz", ".tar.gz", ".tar")):
                    with tarfile.open(archive) as tar:
                        members = _matching(tar.getnames(), member, archive)
                        infos = [tar.getmember(name) for name in members]
                        require_space(Path(out).parent, sum(i.size for i in infos), f"extracting {member}")
                        for info in infos:
                            shutil.copyfileobj(tar.extractfile(info), dst, CHUNK)
                elif archive.endswith(".zip"):
                    with zipfile.ZipFile(archive) as zf:
                        members = _matching(zf.namelist(), member, archive)
                        require_space(Path(out).parent, sum(zf.getinfo(m).file_size for m in members),
                                      f"extracting {member}")
                        for name in members:
                            with zf.open(name) as src:
                                shutil.copyfileobj(src, dst, CHUNK)
                elif archive.endswith(".gz"):
                    require_space(Path(out).parent, gunzipped_size(archive), f"decompressing {archive}")
                    with gzip.open(archive) as src:
                        shutil.copyfileobj(src, dst, CHUNK)
                else:
                    raise UserError(f"{archive}: unknown archive type; expected .tgz, .tar.gz, .tar, .zip or .gz")
            name = f"{member or Path(archive).stem} (extracted from {archive})"
            if checksum is not None:
                checksum.verify(tmp, name, where)
            else:
                record_unpinned(tmp, name)
                os.replace(f"{tmp}.sha256", f"{out}.sha256")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile, KeyError, OSError) as err:
        raise UserError(
            f"{archive}: truncated or corrupt archive ({type(err).__name__}: {err}); delete it and fetch it again "
            f"from {where}"
        ) from None


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
    if not any(c in member for c in "*?["):
        if member not in names:
            raise UserError(f"{archive}: has no member {member!r}")
        return [member]
    found = sorted(n for n in names if fnmatch.fnmatchcase(n, member))
    if not found:
        raise UserError(f"{archive}: no member matches {member!r}")
    return found
