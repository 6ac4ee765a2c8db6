"""Download (or take from a local mirror), verify and extract the raw corpora.

A source file is identified by its URL and a checksum: `sha256`, `md5` where that is what is published (sacrebleu's
record of the WMT test-set tarballs) or a git blob id (`git_blob`: the fairseq mirror of IWSLT14, whose files are
known by their blob ids). A file whose publisher gives no checksum is still hashed: its sha256 and size are written
beside it (`<file>.sha256`) and logged, so a user can pin it in the config, and every later copy of it is compared
with them. Failures are one line each (docs/data.md, "When a download or an extraction fails"): a short or dropped
transfer is resumed, a full or read-only disk is named as such, a damaged archive as damaged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import glob
import gzip
import hashlib
import html
import http.client
import http.cookiejar
import logging
import os
import re
import shutil
import signal
import stat
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
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


def checksum_from(sha256: str | None = None, git_blob: str | None = None, md5: str | None = None,
                  source: str | None = None) -> Checksum | None:
    given = [(kind, value) for kind, value in zip(KINDS, (sha256, md5, git_blob)) if value]
    if len(given) > 1:
        raise UserError("give one of sha256, md5 or git_blob for a file, not several")
    return Checksum(*given[0], source) if given else None


def record_unpinned(path: str | os.PathLike, name: str, record: str | os.PathLike | None = None,
                    origin: str | None = None) -> str:
    """No published checksum: write `<record>.sha256` (default `<path>.sha256`) and say how to pin it (trust on
    first use). Its second line, a comment `sha256sum -c` skips, keeps the size and where the file came from: a later
    download or mirror copy of the same file is compared with both (`check_first_use`)."""
    value = Checksum("sha256", "").compute(path)
    size = os.path.getsize(path)
    came = f" from {origin}" if origin else ""
    Path(f"{record or path}.sha256").write_text(f"{value}  {Path(record or path).name}\n"
                                                f"# {size} bytes, first used {time.strftime('%Y-%m-%d')}{came}\n")
    log.warning("%s has no checksum in the config; its sha256 is %s (pin it as `sha256: %s`)", name, value, value)
    return value


@dataclass(frozen=True)
class FirstUse:
    """What `<file>.sha256` recorded about the first copy of an unpinned file."""

    sha256: str
    size: int | None
    record: Path


def first_use(out: str | os.PathLike) -> FirstUse | None:
    record = Path(f"{out}.sha256")
    if not record.is_file():
        return None
    text = record.read_text()
    size = re.search(r"^# (\d+) bytes", text, re.MULTILINE)
    return FirstUse(text.split()[0] if text.split() else "", int(size.group(1)) if size else None, record)


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
        raise UserError(f"{what}: needs {human_size(needed)} but {directory} has {human_size(free)} free; "
                        f"free some space or point results/ to a larger disk")


# Errors of the local disk, not of the data: named as what they are, never "corrupt archive" or "download by hand".
DISK_ERRORS = {
    errno.ENOSPC: ("no space left on the device", "free some space on that disk (or point results/ to a larger "
                   "one; with several jobs at once, run fewer: --cores N) and rerun"),
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
        raise UserError(f"{doing}: {what} ({errno.errorcode[err.errno]}) writing {err.filename or path}; "
                        f"{kept + '; ' if kept else ''}{todo}") from None


ATTEMPTS = 2  # per URL: one retry of a transient error (a dropped connection, a 5xx, a short body), then the next URL
RETRY_WAIT = 2  # seconds before that retry
TIMEOUT = 30  # seconds without data before a connection counts as dead


class SourceFailed(Exception):
    """One URL did not give the file (the next one is tried); the message says why, in a few words. `keep`: the
    .part holds good bytes of this URL, resumed on the next run (a dropped connection), not a wrong file."""

    def __init__(self, message: str, keep: bool = False):
        super().__init__(message)
        self.keep = keep


class Transient(Exception):
    """Worth another try of the same URL: a body shorter than announced, a resume at the wrong offset."""


def download(urls: str | list[str], out: str | os.PathLike, checksum: Checksum | None, manual: str | None = None,
             expected_at: str | None = None) -> str:
    """Fetch the file from the first of `urls` that gives it (official first, then mirrors); returns that URL ('' when
    another process fetched it meanwhile).

    Each URL gets HTTP-range resume of a partial `.part` file (locked while written: a second fetch of the same file
    waits for the first), a progress bar, the byte count checked against Content-Length / Content-Range (a short
    body is resumed, never accepted), HTML refusal (an error or quota page saved as the archive) and Google Drive's
    confirmation step. The final name appears only after the checksum has passed, or for a file no reference pins,
    after its size and hash matched the first download's (`<file>.sha256`). A file that failed leaves nothing behind
    but the resumable bytes of a dropped connection. When every URL fails, one line names each failure, then what to
    do by hand (`manual`) and where the file is expected (`expected_at`: its place in the data mirror).
    """
    urls = [urls] if isinstance(urls, str) else list(urls)
    out = Path(out)
    part = out.with_name(out.name + ".part")
    with disk_errors(out.parent, f"{out.name}: creating its directory"):
        out.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    with _locked(part, out) as fetched_meanwhile:
        if fetched_meanwhile:
            return ""
        try:
            for url in urls:
                try:
                    _download_with_retry(url, part, out)
                    _verify_download(checksum, part, out)
                except SourceFailed as err:
                    if not err.keep:  # a wrong file must be neither resumed nor hashed
                        _discard(part)
                    failures.append(f"{url}: {err}")
                    log.warning("%s: %s%s", url, err, "; trying the next source" if url != urls[-1] else "")
                    continue
                if checksum is None:
                    record_unpinned(part, url, out, url)
                os.replace(part, out)
                _forget_origin(part)
                return url
        finally:
            if part.exists() and part.stat().st_size == 0:  # nothing worth resuming
                part.unlink()
                _forget_origin(part)
    by_hand = manual or f"download it by hand from {urls[0] if urls else 'its publisher'}"
    where = f" and put it at {expected_at}" if expected_at else ""
    raise UserError(f"{out.name}: no source gave the file ({'; '.join(failures) or 'no URL configured'}); "
                    f"{by_hand}{where}")


@contextlib.contextmanager
def _locked(part: Path, out: Path):
    """Hold an exclusive fcntl lock on `part` while it is written. Yields True when another process held it and
    finished the file meanwhile (`out` now exists): nothing left to do."""
    waited = False
    while True:
        with disk_errors(part, f"{out.name}: opening {part.name}"):
            fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.warning("another process is downloading %s; waiting for it to finish", part)
                fcntl.flock(fd, fcntl.LOCK_EX)
                waited = True
            try:  # the holder may have renamed (finished) or deleted the file we waited on
                current = os.stat(part)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(os.fstat(fd), current):
                done = waited and out.exists() and current.st_size == 0
                if done:
                    os.unlink(part)
                yield done
                return
        finally:
            os.close(fd)
        if waited and out.exists():
            yield True
            return


def _discard(part: Path) -> None:
    """Empty the .part (never unlink it while locked: a waiting process would lock a file no longer there)."""
    if part.exists():
        os.truncate(part, 0)
    _forget_origin(part)


def _verify_download(checksum: Checksum | None, part: Path, out: Path) -> None:
    if part.stat().st_size == 0:
        raise SourceFailed("the server sent an empty file; nothing was kept")
    if checksum is None:
        changed = changed_since_first_use(part, out)
        if changed:
            raise SourceFailed(f"{changed}; nothing was kept: if the new file is the right one, delete "
                               f"{out}.sha256 and rerun")
        return
    actual = checksum.compute(part)
    if actual != checksum.value:
        raise SourceFailed(f"{checksum.kind} is {actual}, expected {checksum.value}{checksum.cited()} "
                           f"(a different file or version; deleted)")


def _forget_origin(part: Path) -> None:
    part.with_name(part.name + ".url").unlink(missing_ok=True)


def _download_with_retry(url: str, part: Path, out: Path) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _download_once(url, part, out)
            return
        except urllib.error.HTTPError as err:
            if err.code < 500 or attempt == ATTEMPTS:  # 4xx: the file is not there; retrying cannot help
                raise SourceFailed(f"HTTP {err.code} {err.reason}") from None
            reason = f"HTTP {err.code}"
        except (Transient, http.client.HTTPException, urllib.error.URLError, OSError, TimeoutError) as err:
            reason = _describe(err)
            if attempt == ATTEMPTS:
                kept = part.exists() and part.stat().st_size > 0
                resume = (f"; the {part.stat().st_size:,} bytes received are kept in {part} and resumed on the next "
                          f"run" if kept else "")
                raise SourceFailed(reason + resume, keep=kept) from None
        log.warning("download of %s failed (%s); retrying in %ds", url, reason, RETRY_WAIT)
        time.sleep(RETRY_WAIT)


def _describe(err: BaseException) -> str:
    if isinstance(err, http.client.IncompleteRead):
        return f"the connection dropped mid-transfer (IncompleteRead after {len(err.partial):,} bytes of a chunk)"
    if isinstance(err, http.client.HTTPException):
        return f"the server broke the HTTP exchange ({type(err).__name__}: {str(err).strip()!r})"
    return str(getattr(err, "reason", err))


CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")


def _download_once(url: str, part: Path, out: Path) -> None:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    origin = part.with_name(part.name + ".url")  # a partial file is resumed only from the URL it came from
    same = part.exists() and origin.exists() and origin.read_text() == url
    have = part.stat().st_size if same else 0
    response = _open_resuming(opener, url, part, have)
    if response is None:
        return  # the .part already holds the whole file
    if _is_html(response):  # Google Drive's "can't scan for viruses" page: confirm once, as gdown does
        page = response.read(1 << 20).decode("utf-8", "replace")
        response.close()
        confirmed = drive_confirm_url(url, page, opener)
        if confirmed is None:
            raise SourceFailed(_html_refused(page))
        have = 0
        response = _open(opener, confirmed, 0)
        if _is_html(response):
            page = response.read(1 << 20).decode("utf-8", "replace")
            response.close()
            raise SourceFailed(f"the server sent an HTML page ({_page_title(page)}) even after Drive's confirmation "
                               f"step, not the file; nothing was kept (Drive's daily quota: try again tomorrow, or "
                               f"download it in a browser)")
    with response:
        start, total = _extent(response, have, part)
        if total is not None:
            require_space(part.parent, total - start, url)
        origin.write_text(url)
        received = start
        with disk_errors(part, f"downloading {url}", f"the bytes received so far stay in {part} and the download "
                                                      f"resumes"), \
                open(part, "ab" if start else "wb") as f, tqdm(
                    total=total, initial=start, unit="B", unit_scale=True, desc=out.name, mininterval=2.0) as bar:
            while block := response.read(CHUNK):
                if received == 0 and block.lstrip().lower().startswith(HTML_START):  # sniffing a chunked body
                    raise SourceFailed(_html_refused(block.decode("utf-8", "replace")))
                f.write(block)
                received += len(block)
                bar.update(len(block))
    if total is not None and received != total:  # urllib returns a short body as if it were complete
        raise Transient(f"the connection closed after {received:,} of {total:,} bytes")


def _open_resuming(opener, url: str, part: Path, have: int):
    """The response for the bytes after `have`; None when the .part is already complete (HTTP 416 with the file's
    size equal to it: a run killed between the last byte and the rename)."""
    try:
        return _open(opener, url, have)
    except urllib.error.HTTPError as err:
        if err.code != 416 or not have:
            raise
        match = re.fullmatch(r"bytes \*/(\d+)", (err.headers.get("Content-Range") or "").strip())
        if match and int(match.group(1)) == have:
            log.info("%s already holds all %s bytes of %s", part, f"{have:,}", url)
            return None
        log.warning("%s (%s bytes) does not fit the file at %s (HTTP 416); downloading it again", part,
                    f"{have:,}", url)
        os.truncate(part, 0)
        return _open(opener, url, 0)


def _extent(response, have: int, part: Path) -> tuple[int, int | None]:
    """(offset the body starts at, size of the whole file or None when the server does not say)."""
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.strip().isdigit() else None
    if not have or getattr(response, "status", None) != 206:
        return 0, length  # the server ignored the range: start over
    match = CONTENT_RANGE.match(response.headers.get("Content-Range") or "")
    if match is None:  # a 206 without Content-Range: trust that it starts where we asked
        return have, None if length is None else have + length
    if int(match.group(1)) != have:
        os.truncate(part, 0)
        raise Transient(f"the server resumed at byte {match.group(1)}, not {have}; starting over")
    return have, None if match.group(2) == "*" else int(match.group(2))


def _html_refused(page: str) -> str:
    return (f"the server sent an HTML page ({_page_title(page)}), not the file; nothing was kept (a quota, login or "
            f"error page: try again later, or download it in a browser)")


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
    """Copy a local (mirror) file after checking it; a missing file names what was expected. A file no reference
    pins must not be empty or an HTML page, and must be the file first used (`<out>.sha256`, recorded here)."""
    if not os.path.exists(src):
        raise UserError(f"{src}: missing; expected it there (data mirror or user directory): get it from {where}")
    if not os.path.isfile(src):
        raise UserError(f"{src}: not a regular file (a directory?); expected the file itself there: replace it with "
                        f"a copy from {where}")
    if checksum is not None:
        checksum.verify(src, str(src), where)
    else:
        _check_unpinned_copy(src, out, where)
    require_space(Path(out).parent, os.path.getsize(src), f"copying {src}")
    with _extraction(out, f"copying {src} to {out}", f"{src} is unchanged") as tmp:
        shutil.copyfile(src, tmp)
        if checksum is None:
            record_unpinned(tmp, str(src), out, str(src))


def _check_unpinned_copy(src: str | os.PathLike, out: str | os.PathLike, where: str) -> None:
    with open(src, "rb") as f:
        head = f.read(512)
    problem = ("is empty" if not head else "is an HTML page (an error or login page saved as the file)"
               if head.lstrip().lower().startswith(HTML_START) else None)
    if problem:
        raise UserError(f"{src} {problem}; no checksum pins this file, so it was checked by size and content: "
                        f"replace it with a copy from {where}")
    changed = changed_since_first_use(src, out)
    if changed:
        raise UserError(f"{src} is {changed}; no checksum pins this file: replace it with a copy from {where}, or, "
                        f"if this one is right, delete {out}.sha256 and rerun")


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


def extract_member(archive: str | os.PathLike, member: str | None, out: str | os.PathLike,
                   checksum: Checksum | None, where: str, pair_member: str | None = None) -> None:
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
    try:
        with _extraction(out, f"extracting {member or Path(archive).stem} from {archive}",
                         f"the archive {archive} is fine: keep it") as tmp:
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
            if checksum is not None:
                checksum.verify(tmp, name, where, culprit=archive)
            else:
                record_unpinned(tmp, name, out)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile, zlib.error, KeyError) as err:
        kind = "zlib.error" if isinstance(err, zlib.error) else type(err).__name__  # zlib's class is `error`
        raise UserError(
            f"{archive}: truncated or corrupt archive ({kind}: {err}); delete it and fetch it again from {where}"
        ) from None
    except OSError as err:  # reading the archive failed (disk errors of the output were named above)
        raise UserError(f"{archive}: could not be read ({type(err).__name__}: {err}); if the file is damaged, delete "
                        f"it and fetch it again from {where}") from None


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
                    raise UserError(f"{archive}: member {name} is {kind}, not a file; expected a regular file "
                                    f"(check the member path in config.yaml)")
                return zf.open(info)
            yield zf.namelist(), lambda name: zf.getinfo(name).file_size, open_zip
    else:
        with tarfile.open(archive) as tar:
            def open_tar(name: str):
                info = tar.getmember(name)
                if not info.isfile():  # links, directories, FIFOs, devices: never followed, never read
                    target = f" to {info.linkname}" if info.issym() or info.islnk() else ""
                    raise UserError(f"{archive}: member {name} is {_tar_kind(info)}{target}, not a file; expected a "
                                    f"regular file (check the member path in config.yaml)")
                return tar.extractfile(info)
            yield tar.getnames(), lambda name: tar.getmember(name).size, open_tar


_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def _tar_kind(info: tarfile.TarInfo) -> str:
    return ("a symbolic link" if info.issym() else "a hard link" if info.islnk() else "a directory" if info.isdir()
            else "a FIFO" if info.isfifo() else "a device" if info.isdev() else "not a regular file")


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


def unpinned_downloads(config: dict) -> list[tuple[list[str], str, str]]:
    """(datasets, file name, why) of every download or manual file the config gives no checksum for: each is
    checked by Content-Length and, from its first copy on, by the size and sha256 recorded in `<file>.sha256`."""
    from .. import config as cfg

    return [(datasets, name, entry.get("checksum_source") or "no checksum in the config")
            for (_, name), (datasets, entry) in cfg.downloads(config).items() if cfg.checksum_of(entry) is None]
