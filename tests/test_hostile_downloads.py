"""Issue 39: downloads and extractions against what real hosts and disks do on a bad day (the hostile loopback server
of hostile_http.py, full disks simulated by an OSError at the write). Each case: one line naming the file and what
to do, nothing that failed verification under its final name, a good archive never called corrupt."""

import errno
import gzip
import hashlib
import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from conftest import make_tgz
from hostile_http import chunked, full, garbage, hostile_fixture, short  # noqa: F401 (the `hostile` fixture)
from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.data import checksums, extract, fetch
from layerwise_nmt.data import io as data_io

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = bytes(range(256)) * 64  # 16 KiB
SHA = checksums.Checksum("sha256", hashlib.sha256(PAYLOAD).hexdigest(), "a test's list")


def lwnmt(*args):
    return subprocess.run([sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, text=True)


def one_line(result) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


# 1. A body shorter than its Content-Length: resumed, never accepted short -----------------------------------------


def test_an_unpinned_download_cut_short_is_never_accepted(hostile, tmp_path):
    url = hostile.route("/newstest2012.en", short(PAYLOAD, 1000))
    out = tmp_path / "newstest2012.en"
    with pytest.raises(UserError) as err:
        fetch.download(url, out, None, expected_at="/m/wmt14-en-de/newstest2012.en")
    message = str(err.value)
    assert "\n" not in message and "closed after 1,000 of 16,384 bytes" in message
    assert f"kept in {out}.part and resumed on the next run" in message
    assert not out.exists() and not Path(f"{out}.sha256").exists()  # no final name, no hash offered to pin
    assert (tmp_path / "newstest2012.en.part").stat().st_size == 1000


def test_a_short_body_is_resumed_with_a_range_request(hostile, tmp_path):
    url = hostile.route("/corpus.bt.en-ro.en.gz", short(PAYLOAD, 1000), full(PAYLOAD))
    out = tmp_path / "corpus.bt.en-ro.en.gz"
    fetch.download(url, out, None)
    assert out.read_bytes() == PAYLOAD
    assert hostile.requests == [("/corpus.bt.en-ro.en.gz", None), ("/corpus.bt.en-ro.en.gz", "bytes=1000-")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.bt.en-ro.en.gz", "corpus.bt.en-ro.en.gz.sha256"]


# 2. A dropped chunked body or a broken HTTP exchange: the next URL, never a traceback ------------------------------


def test_a_chunked_body_cut_mid_stream_falls_through_to_the_mirror(hostile, tmp_path):
    official = hostile.route("/official/en-ro.txt.zip", chunked(PAYLOAD, sent=500))
    mirror = hostile.route("/mirror/en-ro.txt.zip", full(PAYLOAD))
    out = tmp_path / "SETIMES2.en-ro.txt.zip"
    assert fetch.download([official, mirror], out, SHA) == mirror
    assert out.read_bytes() == PAYLOAD


@pytest.mark.parametrize("behaviour, named", [(chunked(PAYLOAD, sent=0), "IncompleteRead"), (garbage, "BadStatusLine")])
def test_a_broken_exchange_on_every_url_is_one_line_and_leaves_nothing(hostile, tmp_path, capsys, behaviour, named):
    from layerwise_nmt import cli

    a, b = hostile.route("/a/2014-01.tgz", behaviour), hostile.route("/b/2014-01.tgz", behaviour)
    with pytest.raises(SystemExit) as exited:  # in-process: the fixture's retries without the 2 s wait
        cli.main(["fetch", str(tmp_path / "2014-01.tgz"), "--url", a, "--url", b, "--expected-at", "/m/2014-01.tgz"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 1
    assert line.startswith("lwnmt fetch: error: 2014-01.tgz: no source gave the file") and line.count(named) == 2
    assert line.endswith("put it at /m/2014-01.tgz")
    assert list(tmp_path.iterdir()) == []  # no 0-byte .part


# 3. A full or write-protected disk is named as such, never "corrupt archive" or "download it by hand" -----------


def failing_write(code):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize(
    "code, named",
    [
        (errno.ENOSPC, "no space left on the device (ENOSPC)"),
        (errno.EACCES, "permission denied (EACCES)"),
        (errno.EROFS, "read-only file system (EROFS)"),
    ],
)
@pytest.mark.parametrize("kind", ["tgz", "gz"])
def test_a_disk_error_during_extraction_is_named_and_the_archive_kept(tmp_path, monkeypatch, code, named, kind):
    archive = (
        make_tgz(tmp_path / "training-parallel-un.tgz", {"un/undoc.2000.fr-en.fr": PAYLOAD})
        if kind == "tgz"
        else tmp_path / "giga-fren.release2.fixed.fr.gz"
    )
    if kind == "gz":
        archive.write_bytes(gzip.compress(PAYLOAD))
    monkeypatch.setattr("shutil.copyfileobj", failing_write(code))
    out = tmp_path / "raw" / "undoc.fr"
    result_member = "un/undoc.2000.fr-en.fr" if kind == "tgz" else None
    with pytest.raises(UserError) as err:
        extract.extract_member(archive, result_member, out, None, "https://statmt.org")
    message = str(err.value)
    assert named in message and f"the archive {archive} is fine: keep it" in message
    assert "corrupt" not in message and "delete" not in message
    assert archive.exists() and not out.exists() and list(out.parent.iterdir()) == []


def test_a_full_disk_during_a_download_is_named_and_the_bytes_kept(hostile, tmp_path, monkeypatch):
    url = hostile.route("/giga-fren.tar", full(PAYLOAD))
    real_open = open

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FullDisk(f) if str(path).endswith(".part") and ("w" in mode or "a" in mode) else f

    monkeypatch.setattr(fetch, "open", full_disk_open, raising=False)
    with pytest.raises(UserError) as err:
        fetch.download(url, tmp_path / "giga-fren.tar", SHA, manual="ask someone")
    message = str(err.value)
    assert "no space left on the device (ENOSPC)" in message and f"{tmp_path}/giga-fren.tar.part" in message
    assert "by hand" not in message and "ask someone" not in message and "no source gave" not in message
    assert not (tmp_path / "giga-fren.tar").exists()


# 4. Corrupt compressed data: one line naming the archive, not a zlib.error traceback -------------------------------


def damaged(good: bytes, read) -> bytes:
    """`good` with one byte flipped where `read` (the plain library call) raises zlib.error mid-stream."""
    for pos in range(len(good) // 4, len(good) - 100, 97):
        bad = bytearray(good)
        bad[pos] ^= 0xFF
        try:
            read(bytes(bad))
        except zlib.error:
            return bytes(bad)
        except Exception:  # noqa: BLE001 (another kind of damage: try the next byte)
            continue
    raise AssertionError("no corruption that zlib reports mid-stream")


def read_tgz(data: bytes) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractfile("x/a.txt").read()


def read_zip(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        zf.read("SETIMES.en-ro.ro")


@pytest.mark.parametrize("kind", ["gz", "tgz", "zip"])
def test_corrupt_compressed_data_is_one_line_naming_the_archive(tmp_path, kind):
    text = b"".join(b"line %d of the corpus\n" % i for i in range(20000))
    if kind == "gz":
        archive, member = tmp_path / "corpus.bt.en-ro.ro.gz", None
        archive.write_bytes(damaged(gzip.compress(text), gzip.decompress))
    elif kind == "tgz":
        archive, member = tmp_path / "training-parallel-nc-v9.tgz", "x/a.txt"
        archive.write_bytes(damaged(make_tgz(tmp_path / "good.tgz", {"x/a.txt": text}).read_bytes(), read_tgz))
    else:
        archive, member = tmp_path / "SETIMES2.en-ro.txt.zip", "SETIMES.en-ro.ro"
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(member, text)
        archive.write_bytes(damaged(buffer.getvalue(), read_zip))
    result = lwnmt(
        "extract",
        archive,
        tmp_path / "out",
        "--archive",
        *(["--member", member] if member else []),
        "--where",
        "https://example.org/its-url",
    )
    line = one_line(result)
    assert line.startswith(f"lwnmt extract: error: {archive}: truncated or corrupt archive (zlib.error: ")
    assert line.endswith("delete it and fetch it again from https://example.org/its-url")
    assert not (tmp_path / "out").exists()


# 5. A truncated pinned download is resumed, not called "a different file" -----------------------------------------


def test_a_truncated_pinned_download_is_resumed_not_deleted(hostile, tmp_path):
    url = hostile.route("/training-parallel-ep-v8.tgz", short(PAYLOAD, 5000), full(PAYLOAD))
    out = tmp_path / "training-parallel-ep-v8.tgz"
    assert fetch.download(url, out, SHA) == url and out.read_bytes() == PAYLOAD
    assert hostile.requests[1] == ("/training-parallel-ep-v8.tgz", "bytes=5000-")


# 6. A complete .part (killed between the last byte and the rename): HTTP 416 is not a failure ---------------------


@pytest.mark.parametrize("checksum", [SHA, None])
def test_a_complete_part_file_and_http_416_finish_the_download(hostile, tmp_path, checksum):
    url = hostile.route("/2014-01.tgz", full(PAYLOAD))
    out = tmp_path / "2014-01.tgz"
    Path(f"{out}.part").write_bytes(PAYLOAD)
    Path(f"{out}.part.url").write_text(url)
    assert fetch.download(url, out, checksum) == url and out.read_bytes() == PAYLOAD
    assert hostile.requests == [("/2014-01.tgz", f"bytes={len(PAYLOAD)}-")]  # nothing downloaded again
    assert not Path(f"{out}.part").exists() and not Path(f"{out}.part.url").exists()


def test_a_part_file_longer_than_the_file_is_downloaded_again(hostile, tmp_path):
    url = hostile.route("/dev.tgz", full(PAYLOAD))
    out = tmp_path / "dev.tgz"
    Path(f"{out}.part").write_bytes(PAYLOAD + b"junk")
    Path(f"{out}.part.url").write_text(url)
    assert fetch.download(url, out, SHA) == url and out.read_bytes() == PAYLOAD


# 7. A member checksum error names the archive, not a temporary file ------------------------------------------------


def test_a_member_checksum_error_names_the_archive_to_replace(tmp_path):
    archive = make_tgz(tmp_path / "test.tgz", {"test/newstest2016-enro-ref.ro.sgm": b"<srcset>\n"})
    result = lwnmt(
        "extract",
        archive,
        tmp_path / "raw" / "newstest2016.ro",
        "--archive",
        "--member",
        "test/newstest2016-enro-ref.ro.sgm",
        "--sha256",
        "0" * 64,
        "--where",
        "https://data.statmt.org/x",
    )
    line = one_line(result)
    assert f"delete {archive} and replace it with a copy from https://data.statmt.org/x" in line
    assert ".tmp-" not in line


# 8. The data mirror: an empty, HTML or different unpinned file, a directory where a file should be ----------------


@pytest.mark.parametrize("content, problem", [(b"", "is empty"), (b"<!DOCTYPE html><title>404</title>", "HTML page")])
def test_a_bad_unpinned_mirror_file_is_refused(tmp_path, content, problem):
    src = tmp_path / "mirror" / "newstest2012.en"
    src.parent.mkdir()
    src.write_bytes(content)
    with pytest.raises(UserError, match=problem) as err:
        extract.copy_verified(src, tmp_path / "raw" / "newstest2012.en", None, "https://nlp.stanford.edu/x")
    assert str(err.value).startswith(str(src)) and "https://nlp.stanford.edu/x" in str(err.value)
    assert not (tmp_path / "raw" / "newstest2012.en").exists()


def test_an_unpinned_mirror_file_must_stay_the_file_first_used(tmp_path):
    src, out = tmp_path / "mirror" / "newstest2012.de", tmp_path / "raw" / "newstest2012.de"
    src.parent.mkdir()
    src.write_text("eins\nzwei\n")
    extract.copy_verified(src, out, None, "its URL")
    assert Path(f"{out}.sha256").read_text().split()[0] == hashlib.sha256(b"eins\nzwei\n").hexdigest()
    src.write_text("eins\n")  # the mirror's copy replaced by a shorter one
    out.unlink()  # as Snakemake does before it reruns the job
    with pytest.raises(UserError, match=r"is 5 bytes, but the first copy of this file had 10"):
        extract.copy_verified(src, out, None, "its URL")
    assert not out.exists()


def test_a_directory_where_a_mirror_file_should_be_is_named(tmp_path):
    config = grid.load(ROOT / "config.yaml")
    config["data_mirror"] = str(tmp_path)
    (tmp_path / "wmt14-en-de" / "newstest2012.en").mkdir(parents=True)
    with pytest.raises(UserError, match=r"newstest2012.en is a directory, not a file"):
        grid.file_source(config, "wmt14-en-de-luong", "newstest2012.en")


def test_an_unpinned_download_must_match_its_first_download(hostile, tmp_path):
    url = hostile.route("/newstest2012.de", full(PAYLOAD), full(PAYLOAD[:-1]))
    out = tmp_path / "newstest2012.de"
    fetch.download(url, out, None)
    out.unlink()
    with pytest.raises(UserError, match="16,383 bytes, but the first copy of this file had 16,384"):
        fetch.download(url, out, None)
    assert not out.exists()


# 9. The smaller ones --------------------------------------------------------------------------------------------


def test_free_space_is_printed_in_a_unit_that_shows_it(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("Usage", (), {"free": 1_200_000})())
    with pytest.raises(UserError) as err:
        data_io.require_space(tmp_path, 2_000_000, "newstest2012.en")
    assert "needs 2.0 MB but" in str(err.value) and "has 1.2 MB free" in str(err.value)


def test_html_sent_chunked_as_octet_stream_is_refused(hostile, tmp_path):
    url = hostile.route("/2014-01.tgz", chunked(b"\n<!DOCTYPE html><html><title>Sign in</title></html>"))
    with pytest.raises(UserError, match=r"sent an HTML page \(titled 'Sign in'\)"):
        fetch.download(url, tmp_path / "2014-01.tgz", None)
    assert list(tmp_path.iterdir()) == []


def special_tgz(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, link in [
            ("x/link.txt", tarfile.SYMTYPE, "../../etc/passwd"),
            ("x/hard.txt", tarfile.LNKTYPE, "x/other.txt"),
            ("x/dir", tarfile.DIRTYPE, ""),
            ("x/fifo", tarfile.FIFOTYPE, ""),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            tar.addfile(info)
    return path


@pytest.mark.parametrize(
    "member, kind",
    [
        ("x/link.txt", "a symbolic link to ../../etc/passwd"),
        ("x/hard.txt", "a hard link to x/other.txt"),
        ("x/dir", "a directory"),
        ("x/fifo", "a FIFO"),
    ],
)
def test_a_member_that_is_not_a_file_is_named_not_called_corrupt(tmp_path, member, kind):
    archive = special_tgz(tmp_path / "odd.tgz")
    result = lwnmt("extract", archive, tmp_path / "out", "--archive", "--member", member)
    line = one_line(result)
    assert f"{archive}: member {member} is {kind}, not a file" in line and "corrupt" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.tgz"]


KILLED_MID_COPY = """
import os, shutil, signal, sys
from layerwise_nmt import cli
shutil.copyfileobj = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGTERM)  # Snakemake stops the job
cli.main(sys.argv[1:])
"""


def test_sigterm_during_extraction_leaves_no_temporary_file(tmp_path):
    archive = make_tgz(tmp_path / "dev.tgz", {"dev/newstest2012.en": PAYLOAD})
    out = tmp_path / "raw" / "newstest2012.en"
    job = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLED_MID_COPY,
            "extract",
            archive,
            out,
            "--archive",
            "--member",
            "dev/newstest2012.en",
        ],
        capture_output=True,
        text=True,
    )
    assert job.returncode == 128 + signal.SIGTERM, job.stderr  # an exit, not death by the signal (-15)
    assert list(out.parent.iterdir()) == []


def test_a_temporary_file_a_killed_run_left_is_removed_by_the_rerun(tmp_path):
    archive = make_tgz(tmp_path / "dev.tgz", {"dev/newstest2012.en": PAYLOAD})
    out = tmp_path / "raw" / "newstest2012.en"
    out.parent.mkdir()
    (out.parent / ".tmp-newstest2012.en.k1ll3d").write_bytes(PAYLOAD[:100])  # SIGKILL mid-extraction
    (out.parent / ".tmp-newstest2012.enx.other").write_bytes(b"another file's")
    extract.extract_member(archive, "dev/newstest2012.en", out, SHA, "here")
    assert sorted(p.name for p in out.parent.iterdir()) == [".tmp-newstest2012.enx.other", "newstest2012.en"]


def test_two_fetches_of_one_file_download_it_once(hostile, tmp_path):
    url = hostile.route("/slow.tgz", full(PAYLOAD, pause=0.03))  # 16 pieces: about 0.5 s
    out = tmp_path / "slow.tgz"
    errors, results = [], []

    def fetch_it():
        try:
            results.append(fetch.download(url, out, SHA))
        except Exception as err:  # noqa: BLE001 (any failure of either fetch fails the test)
            errors.append(err)

    first = threading.Thread(target=fetch_it)
    first.start()
    deadline = time.monotonic() + 5
    while not hostile.requests and time.monotonic() < deadline:  # the first one is downloading
        time.sleep(0.005)
    second = threading.Thread(target=fetch_it)
    second.start()
    first.join(10)
    second.join(10)
    assert errors == [] and sorted(results) == ["", url]  # the second waited for the first, then used its file
    assert out.read_bytes() == PAYLOAD and len(hostile.requests) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.tgz"]


@pytest.mark.system
def test_snakemake_through_a_mirror_resumes_a_short_download(hostile, tmp_path):
    """The workflow's fetch → extract with a data mirror set (holding the other files): newstest2012.en is not in
    it, so it is fetched from a host that cuts the first transfer short; the job resumes it and the raw file is
    whole, its size and sha256 recorded for later copies."""
    from conftest import snakemake

    text = b"".join(b"Satz %d .\n" % i for i in range(3000))
    url = hostile.route("/newstest2012.en", short(text, 1000), full(text))
    overlay = tmp_path / "hostile.yaml"
    overlay.write_text(f"datasets:\n  wmt14-en-de-luong:\n    files:\n      newstest2012.en: {{url: '{url}'}}\n")
    mirror = tmp_path / "mirror"
    (mirror / "wmt14-en-de").mkdir(parents=True)
    work = tmp_path / "work"
    snakemake(
        work,
        "--configfile",
        str(ROOT / "config.yaml"),
        str(overlay),
        "--cores",
        "1",
        "results/raw/wmt14-en-de-luong/newstest2012.en",
        mirror=mirror,
        timeout=120,
    )
    assert (work / "results/raw/wmt14-en-de-luong/newstest2012.en").read_bytes() == text
    assert [r for _, r in hostile.requests] == [None, "bytes=1000-"]
    download = next((work / "results/downloads").glob("*/newstest2012.en"))
    assert f"# {len(text)} bytes" in Path(f"{download}.sha256").read_text()
