"""Download the raw corpora: each URL in order, resumed, an HTML page refused, the checksum verified.

A source file is identified by its URL and a checksum: `sha256`, `md5` where that is what is published (sacrebleu's
record of the WMT test-set tarballs) or a git blob id (`git_blob`: the fairseq mirror of IWSLT14, whose files are
known by their blob ids). A file whose publisher gives no checksum is still hashed: its sha256 and size are written
beside it (`<file>.sha256`) and logged, so a user can pin it in the config, and every later copy of it is compared
with them. Failures are one line each (docs/data.md, "When a download or an extraction fails"): a short or dropped
transfer is resumed, a full or read-only disk is named as such, a damaged archive as damaged.
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import http.client
import http.cookiejar
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm import tqdm

from .. import UserError
from .checksums import Checksum, changed_since_first_use, record_unpinned
from .io import CHUNK, check_writable, disk_errors, require_space

log = logging.getLogger(__name__)

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


URL_SCHEMES = ("https", "http", "ftp", "file")  # what urllib opens


def download(
    urls: str | list[str],
    out: str | os.PathLike,
    checksum: Checksum | None,
    manual: str | None = None,
    expected_at: str | None = None,
) -> str:
    """Fetch the file from the first of `urls` that gives it (official first, then mirrors); returns that URL ('' when
    another process fetched it meanwhile).

    Each URL gets HTTP-range resume of a partial `.part` file (locked while written: a second fetch of the same file
    waits for the first), a progress bar, the byte count checked against Content-Length / Content-Range (a short
    body is resumed, never accepted), HTML refusal (an error or quota page saved as the archive) and Google Drive's
    confirmation step. The final name appears only after the checksum has passed, or for a file no reference pins,
    after its size and hash matched the first download's (`<file>.sha256`). A file that failed leaves nothing behind
    but the resumable bytes of a dropped connection. When every URL fails, one line names each failure, then what to
    do by hand (`manual`) and where to put the file (`expected_at`, else `out` itself).
    """
    urls = [urls] if isinstance(urls, str) else list(urls)
    for url in urls:  # a typo is said as one, before anything is created
        if urllib.parse.urlsplit(url).scheme not in URL_SCHEMES:
            raise UserError(f"{url!r}: not a URL; expected one of {', '.join(f'{s}://' for s in URL_SCHEMES)}")
    out = Path(out)
    check_writable(out)
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
                os.replace(part, out)
                if checksum is None:  # recorded once the file is in place
                    record_unpinned(out, url, origin=url)
                _forget_origin(part)
                return url
        finally:
            if part.exists() and part.stat().st_size == 0:  # nothing worth resuming
                part.unlink()
                _forget_origin(part)
    by_hand = manual or f"download it by hand from {urls[0] if urls else 'its publisher'}"
    where = f" and put it at {expected_at or out}"
    raise UserError(
        f"{out.name}: no source gave the file ({'; '.join(failures) or 'no URL configured'}); {by_hand}{where}"
    )


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
            raise SourceFailed(
                f"{changed}; nothing was kept: if the new file is the right one, delete {out}.sha256 and rerun"
            )
        return
    actual = checksum.compute(part)
    if actual != checksum.value:
        raise SourceFailed(
            f"{checksum.kind} is {actual}, expected {checksum.value}{checksum.cited()} "
            f"(a different file or version; deleted)"
        )


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
                resume = (
                    f"; the {part.stat().st_size:,} bytes received are kept in {part} and resumed on the next run"
                    if kept
                    else ""
                )
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
            raise SourceFailed(
                f"the server sent an HTML page ({_page_title(page)}) even after Drive's confirmation "
                f"step, not the file; nothing was kept (Drive's daily quota: try again tomorrow, or "
                f"download it in a browser)"
            )
    with response:
        start, total = _extent(response, have, part)
        if total is not None:
            require_space(part.parent, total - start, url)
        origin.write_text(url)
        received = start
        with (
            disk_errors(
                part, f"downloading {url}", f"the bytes received so far stay in {part} and the download resumes"
            ),
            open(part, "ab" if start else "wb") as f,
            tqdm(total=total, initial=start, unit="B", unit_scale=True, desc=out.name, mininterval=2.0) as bar,
        ):
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
        log.warning(
            "%s (%s bytes) does not fit the file at %s (HTTP 416); downloading it again", part, f"{have:,}", url
        )
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
    return (
        f"the server sent an HTML page ({_page_title(page)}), not the file; nothing was kept (a quota, login or "
        f"error page: try again later, or download it in a browser)"
    )


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
        cookies = getattr(
            next((h for h in getattr(opener, "handlers", []) if hasattr(h, "cookiejar")), None), "cookiejar", []
        )
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
