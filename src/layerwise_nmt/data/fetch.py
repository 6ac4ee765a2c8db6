"""Download (or take from a local mirror), verify and extract the raw corpora.

A source file is identified by its URL and a checksum: `sha256`, `md5` where that is what is published (sacrebleu's
record of the WMT test-set tarballs) or a git blob id (`git_blob`: the fairseq mirror of IWSLT14, whose files are
known by their blob ids). A file whose publisher gives no checksum is still hashed: its sha256 is written beside it
(`<file>.sha256`) and logged, so a user can pin it in the config.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import hashlib
import html
import http.cookiejar
import logging
import os
import re
import shutil
import tarfile
import time
import urllib.error
import urllib.parse
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

    def verify(self, path: str | os.PathLike, name: str, where: str) -> None:
        """`where`: where a good copy comes from (the official URL), never the place that holds the bad one."""
        actual = self.compute(path)
        if actual != self.value:
            raise UserError(
                f"{name}: {self.kind} is {actual}, expected {self.value}{self.cited()}; the file is corrupt or a "
                f"different version: delete {path} and replace it with a copy from {where}"
            )


KINDS = ("sha256", "md5", "git_blob")


def checksum_from(sha256: str | None = None, git_blob: str | None = None, md5: str | None = None,
                  source: str | None = None) -> Checksum | None:
    given = [(kind, value) for kind, value in zip(KINDS, (sha256, md5, git_blob)) if value]
    if len(given) > 1:
        raise UserError("give one of sha256, md5 or git_blob for a file, not several")
    return Checksum(*given[0], source) if given else None


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


ATTEMPTS = 2  # per URL: one retry of a transient error (a dropped connection, a 5xx), then the next URL
RETRY_WAIT = 2  # seconds before that retry
TIMEOUT = 30  # seconds without data before a connection counts as dead


class SourceFailed(Exception):
    """One URL did not give the file (the next one is tried); the message says why, in a few words."""


def download(urls: str | list[str], out: str | os.PathLike, checksum: Checksum | None, manual: str | None = None,
             expected_at: str | None = None) -> str:
    """Fetch the file from the first of `urls` that gives it (official first, then mirrors); returns that URL.

    Each URL gets HTTP-range resume of a partial `.part` file, a progress bar, HTML refusal (an error or quota page
    saved as the archive) and Google Drive's confirmation step. The final name appears only after the checksum has
    passed; a file that failed leaves nothing behind, and no hash is recorded for it. When every URL fails, one line
    names each failure, then what to do by hand (`manual`) and where the file is expected (`expected_at`: its
    place in the data mirror).
    """
    urls = [urls] if isinstance(urls, str) else list(urls)
    out = Path(out)
    part = out.with_name(out.name + ".part")
    out.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for url in urls:
        try:
            _download_with_retry(url, part)
            if checksum is not None:
                _verify_download(checksum, part)
        except SourceFailed as err:
            failures.append(f"{url}: {err}")
            log.warning("%s: %s%s", url, err, "; trying the next source" if url != urls[-1] else "")
            continue
        if checksum is None:
            record_unpinned(part, url)
            os.replace(f"{part}.sha256", f"{out}.sha256")
        os.replace(part, out)
        _forget_origin(part)
        return url
    by_hand = manual or f"download it by hand from {urls[0] if urls else 'its publisher'}"
    where = f" and put it at {expected_at}" if expected_at else ""
    raise UserError(f"{out.name}: no source gave the file ({'; '.join(failures) or 'no URL configured'}); "
                    f"{by_hand}{where}")


def _verify_download(checksum: Checksum, part: Path) -> None:
    actual = checksum.compute(part)
    if actual != checksum.value:
        part.unlink()  # a wrong file must be neither resumed nor hashed
        _forget_origin(part)
        raise SourceFailed(f"{checksum.kind} is {actual}, expected {checksum.value}{checksum.cited()} "
                           f"(a different file or version; deleted)")


def _forget_origin(part: Path) -> None:
    part.with_name(part.name + ".url").unlink(missing_ok=True)


def _download_with_retry(url: str, part: Path) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _download_once(url, part)
            return
        except urllib.error.HTTPError as err:
            if err.code < 500 or attempt == ATTEMPTS:  # 4xx: the file is not there; retrying cannot help
                raise SourceFailed(f"HTTP {err.code} {err.reason}") from None
            reason = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            if attempt == ATTEMPTS:
                raise SourceFailed(str(getattr(err, "reason", err))) from None
            reason = str(err)
        log.warning("download of %s failed (%s); retrying in %ds", url, reason, RETRY_WAIT)
        time.sleep(RETRY_WAIT)


def _download_once(url: str, part: Path) -> None:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    origin = part.with_name(part.name + ".url")  # a partial file is resumed only from the URL it came from
    same = part.exists() and origin.exists() and origin.read_text() == url
    have = part.stat().st_size if same else 0
    response = _open(opener, url, have)
    if _is_html(response):  # Google Drive's "can't scan for viruses" page: confirm once, as gdown does
        page = response.read(1 << 20).decode("utf-8", "replace")
        response.close()
        confirmed = drive_confirm_url(url, page, opener)
        if confirmed is None:
            raise SourceFailed(f"the server sent an HTML page ({_page_title(page)}), not the file; nothing was kept "
                               f"(a quota, login or error page: try again later, or download it in a browser)")
        have = 0
        response = _open(opener, confirmed, 0)
        if _is_html(response):
            page = response.read(1 << 20).decode("utf-8", "replace")
            response.close()
            raise SourceFailed(f"the server sent an HTML page ({_page_title(page)}) even after Drive's confirmation "
                               f"step, not the file; nothing was kept (Drive's daily quota: try again tomorrow, or "
                               f"download it in a browser)")
    with response:
        resumed = have and response.status == 206
        if not resumed:
            have = 0  # the server ignored the range: start over
        length = getattr(response, "length", None)  # None for FTP and chunked responses
        total = length + have if length is not None else None
        if length is not None:
            require_space(part.parent, length, url)
        origin.write_text(url)
        with open(part, "ab" if resumed else "wb") as f, tqdm(
            total=total, initial=have, unit="B", unit_scale=True, desc=part.name[: -len(".part")],
            mininterval=2.0,
        ) as bar:
            while block := response.read(CHUNK):
                f.write(block)
                bar.update(len(block))


def _open(opener: urllib.request.OpenerDirector, url: str, have: int):
    request = urllib.request.Request(url, headers={"User-Agent": "layerwise-nmt"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    return opener.open(request, timeout=TIMEOUT)


HTML_START = (b"<!doctype html", b"<html", b"<head", b"<!--")


def _is_html(response) -> bool:
    """An HTML page where a file was expected: by Content-Type, else by its first bytes (peeked, not consumed)."""
    content_type = (response.headers.get("Content-Type") or "").lower()
    if content_type.startswith(("text/html", "application/xhtml")):
        return True
    peek = getattr(getattr(response, "fp", None), "peek", None)
    head = peek(512)[:512] if peek else b""
    return head.lstrip().lower().startswith(HTML_START)


def _page_title(page: str) -> str:
    match = re.search(r"<title>(.*?)</title>", page, re.IGNORECASE | re.DOTALL)
    return f"titled {' '.join(match.group(1).split())[:80]!r}" if match else "untitled"


def drive_confirm_url(url: str, page: str, opener: urllib.request.OpenerDirector) -> str | None:
    """The URL that confirms a Google Drive download, from its warning page, the way gdown finds it: the
    drive.usercontent.google.com form (`<form id="download-form" action=…>` with hidden inputs), a `confirm=`
    token in a link, or the `download_warning` cookie. None when the page offers none of them (a quota page)."""
    form = re.search(r'<form[^>]*id="download-form"[^>]*action="([^"]+)"(.*?)</form>', page, re.DOTALL)
    if form:
        fields = dict(re.findall(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', form.group(2)))
        action = urllib.parse.urljoin(url, html.unescape(form.group(1)))
        return f"{action}?{urllib.parse.urlencode(fields)}"
    token = re.search(r"confirm=([0-9A-Za-z_-]+)", page)
    if token is None:
        cookies = getattr(next((h for h in opener.handlers if hasattr(h, "cookiejar")), None), "cookiejar", [])
        token_value = next((c.value for c in cookies if c.name.startswith("download_warning")), None)
    else:
        token_value = token.group(1)
    if token_value is None:
        return None
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    if query.get("confirm") == token_value:
        return None  # already confirmed with it: asking again gets the same page
    query["confirm"] = token_value
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def copy_verified(src: str | os.PathLike, out: str | os.PathLike, checksum: Checksum | None, where: str) -> None:
    """Copy a local (mirror) file after checking it; a missing file names what was expected."""
    if not os.path.exists(src):
        raise UserError(f"{src}: missing; expected it there (data mirror or user directory): get it from {where}")
    if checksum is not None:
        checksum.verify(src, str(src), where)
    require_space(Path(out).parent, os.path.getsize(src), f"copying {src}")
    with atomic_path(out) as tmp:
        shutil.copyfile(src, tmp)


def extract_member(archive: str | os.PathLike, member: str | None, out: str | os.PathLike,
                   checksum: Checksum | None, where: str, pair_member: str | None = None) -> None:
    """Write one member of a .tgz/.tar/.zip archive (or the content of a .gz file) to `out`, then verify it.

    A member path with wildcards (`datum2017/Book*_cn.txt`) names several files: they are written in sorted order,
    each ending with a newline (a file without a final newline must not merge its last line with the next file's
    first). `pair_member`, the other side's pattern (`datum2017/Book*_en.txt`), pairs the files up by name
    (`Book1_cn.txt` with `Book1_en.txt`) and checks each pair has equal line counts.
    """
    archive = str(archive)
    try:
        with atomic_path(out) as tmp:
            if archive.endswith((".tgz", ".tar.gz", ".tar", ".zip")):
                with _opened(archive) as (names, size, open_member):
                    members = _matching(names, member, archive)
                    require_space(Path(out).parent, sum(map(size, members)), f"extracting {member}")
                    with open(tmp, "wb") as dst:
                        counts = [_copy_lines(open_member(name), dst) if _is_pattern(member)
                                  else shutil.copyfileobj(open_member(name), dst, CHUNK) for name in members]
                    if pair_member:
                        _check_pairs(archive, members, counts, _matching(names, pair_member, archive), open_member)
            elif archive.endswith(".gz"):
                require_space(Path(out).parent, gunzipped_size(archive), f"decompressing {archive}")
                with gzip.open(archive) as src, open(tmp, "wb") as dst:
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


@contextlib.contextmanager
def _opened(archive: str):
    """(member names, size of a member, open a member) of a tar or zip archive."""
    if archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            yield zf.namelist(), lambda name: zf.getinfo(name).file_size, zf.open
    else:
        with tarfile.open(archive) as tar:
            yield tar.getnames(), lambda name: tar.getmember(name).size, tar.extractfile


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
        raise UserError(f"{archive}: the files {members} and {others} do not pair up by name; expected one "
                        f"_xx file per side for each name")
    for name, count, other in zip(members, counts, others):
        other_count = _count_lines(open_member(other))
        if count != other_count:
            raise UserError(f"{archive}: {name} has {count} lines but {other} has {other_count}; the files of a "
                            f"parallel pair must have equal line counts")


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
