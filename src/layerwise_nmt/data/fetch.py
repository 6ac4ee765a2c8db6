"""Download (or take from a local mirror), verify and extract the raw corpora.

A source file is identified by its URL and a checksum: `sha256`, or a git blob id (`git_blob`) where that is
what is published (e.g. the fairseq mirror of IWSLT14, whose files are known by their blob ids).
"""

from __future__ import annotations

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
        if self.kind == "sha256":
            digest = hashlib.sha256()
        elif self.kind == "git_blob":  # what `git hash-object FILE` prints
            digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())
        else:
            raise ValueError(f"unknown checksum kind {self.kind!r}; expected sha256 or git_blob")
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


def checksum_from(sha256: str | None, git_blob: str | None) -> Checksum | None:
    if sha256 and git_blob:
        raise UserError("give either sha256 or git_blob for a file, not both")
    if sha256:
        return Checksum("sha256", sha256)
    if git_blob:
        return Checksum("git_blob", git_blob)
    return None


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
        total = response.length + have if response.length is not None else None
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
    with atomic_path(out) as tmp:
        shutil.copyfile(src, tmp)


def extract_member(archive: str | os.PathLike, member: str | None, out: str | os.PathLike,
                   checksum: Checksum | None, where: str) -> None:
    """Write one member of a .tgz/.tar/.zip archive (or the content of a .gz file) to `out`, then verify it."""
    archive = str(archive)
    try:
        with atomic_path(out) as tmp:
            with open(tmp, "wb") as dst:
                if archive.endswith((".tgz", ".tar.gz", ".tar")):
                    with tarfile.open(archive) as tar:
                        src = tar.extractfile(_tar_member(tar, member, archive))
                        shutil.copyfileobj(src, dst, CHUNK)
                elif archive.endswith(".zip"):
                    with zipfile.ZipFile(archive) as zf, zf.open(member) as src:
                        shutil.copyfileobj(src, dst, CHUNK)
                elif archive.endswith(".gz"):
                    with gzip.open(archive) as src:
                        shutil.copyfileobj(src, dst, CHUNK)
                else:
                    raise UserError(f"{archive}: unknown archive type; expected .tgz, .tar.gz, .tar, .zip or .gz")
            if checksum is not None:
                checksum.verify(tmp, f"{member or Path(archive).stem} (extracted from {archive})", where)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile, KeyError, OSError) as err:
        raise UserError(
            f"{archive}: truncated or corrupt archive ({type(err).__name__}: {err}); delete it and fetch it again "
            f"from {where}"
        ) from None


def _tar_member(tar: tarfile.TarFile, member: str | None, archive: str) -> tarfile.TarInfo:
    if member is None:
        raise UserError(f"{archive}: an archive needs a member path")
    try:
        return tar.getmember(member)
    except KeyError:
        raise UserError(f"{archive}: has no member {member!r}") from None
