"""The first real download: fallback URLs, HTML pages refused, Google Drive's confirmation step, one download per
URL shared by every dataset, CWMT members read pairwise. All offline: a local http.server and file:// URLs."""

import hashlib
import http.server
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.data import checksums, extract, fetch
from layerwise_nmt.rehearsal.run import job_counts

from conftest import snakemake

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = bytes(range(256)) * 64
DRIVE_WARNING = """<!DOCTYPE html><html><head><title>Google Drive - Virus scan warning</title></head><body>
<form id="download-form" action="/confirmed" method="get">
<input type="hidden" name="id" value="abc"><input type="hidden" name="confirm" value="t">
<input type="hidden" name="uuid" value="42"></form></body></html>"""


class Routes(http.server.BaseHTTPRequestHandler):
    """/file: the archive; /html: a quota page; /sniff: HTML sent as application/octet-stream; /drive: Drive's
    warning form, whose /confirmed target sends the file; anything else: 404."""

    def log_message(self, *args):
        pass

    def send(self, body: bytes, content_type: str, status: int = 200):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path, query = urlsplit(self.path).path, parse_qs(urlsplit(self.path).query)
        if path == "/file":
            self.send(PAYLOAD, "application/octet-stream")
        elif path == "/html":
            self.send(b"<html><head><title>Quota exceeded</title></head></html>", "text/html; charset=utf-8")
        elif path == "/sniff":
            self.send(b"\n  <!DOCTYPE html><html><title>Sign in</title></html>", "application/octet-stream")
        elif path == "/drive":
            self.send(DRIVE_WARNING.encode(), "text/html")
        elif path == "/confirmed" and query == {"id": ["abc"], "confirm": ["t"], "uuid": ["42"]}:
            self.send(PAYLOAD, "application/octet-stream")
        else:
            self.send_error(404)


@pytest.fixture
def url():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Routes)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


SHA = checksums.Checksum("sha256", hashlib.sha256(PAYLOAD).hexdigest())


@pytest.mark.parametrize("route", ["/html", "/sniff"])
def test_an_html_page_is_refused_and_nothing_is_kept(url, tmp_path, route):
    out = tmp_path / "2014-01.tgz"
    with pytest.raises(UserError) as err:
        fetch.download(url + route, out, None, expected_at="/mirror/iwslt14-ro-en/2014-01.tgz")
    message = str(err.value)
    assert "\n" not in message and "sent an HTML page" in message and "nothing was kept" in message
    assert "put it at /mirror/iwslt14-ro-en/2014-01.tgz" in message
    assert list(tmp_path.iterdir()) == []  # neither the page nor a .sha256 of it


def test_the_next_url_is_used_after_a_failing_one(url, tmp_path):
    out = tmp_path / "corpus.tgz"
    start = time.perf_counter()
    used = fetch.download([f"{url}/gone", f"{url}/html", f"{url}/file"], out, SHA)
    assert used == f"{url}/file" and out.read_bytes() == PAYLOAD
    assert time.perf_counter() - start < 5  # a 404 and an HTML page are not retried


def test_a_mirror_with_the_wrong_file_is_skipped_and_every_failure_named(url, tmp_path):
    wrong = tmp_path / "www" / "corpus.tgz"
    wrong.parent.mkdir()
    wrong.write_bytes(b"another version")
    out = tmp_path / "dl" / "corpus.tgz"
    checksum = checksums.Checksum("sha256", SHA.value, "TFDS url_checksums")
    assert fetch.download([wrong.as_uri(), f"{url}/file"], out, checksum) == f"{url}/file"
    with pytest.raises(UserError) as err:
        fetch.download(
            [wrong.as_uri(), f"{url}/gone"], tmp_path / "dl" / "again.tgz", checksum, manual="ask the organisers for it"
        )
    message = str(err.value)
    assert f"expected {SHA.value} (from TFDS url_checksums)" in message and "HTTP 404" in message
    assert message.endswith(f"ask the organisers for it and put it at {tmp_path / 'dl' / 'again.tgz'}")
    assert sorted(p.name for p in out.parent.iterdir()) == ["corpus.tgz"]  # nothing of the failed one


def test_google_drive_confirmation_form_is_followed(url, tmp_path):
    out = tmp_path / "2014-01.tgz"
    fetch.download(f"{url}/drive", out, None)
    assert out.read_bytes() == PAYLOAD
    assert (tmp_path / "2014-01.tgz.sha256").read_text().split()[0] == SHA.value


def test_drive_confirm_token_from_a_link_or_the_cookie():
    class Jar:
        cookiejar = [type("Cookie", (), {"name": "download_warning_123_abc", "value": "XyZ"})()]

    opener = type("Opener", (), {"handlers": [Jar()]})()
    page = '<a href="/uc?export=download&amp;confirm=Tok-3&amp;id=abc">Download anyway</a>'
    base = "https://drive.google.com/uc?export=download&id=abc"
    assert fetch.drive_confirm_url(base, page, opener).endswith("&confirm=Tok-3")
    assert fetch.drive_confirm_url(base, "<html>no token</html>", opener).endswith("&confirm=XyZ")
    assert fetch.drive_confirm_url(base + "&confirm=XyZ", "<html></html>", opener) is None  # asked already


def test_the_fetch_command_names_the_mirror_location_and_what_to_do(url, tmp_path):
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "fetch",
            str(tmp_path / "casia2015.zip"),
            "--url",
            f"{url}/gone",
            "--manual",
            "get it from the CWMT organisers",
            "--expected-at",
            "/m/wmt17-zh-en/casia2015.zip",
        ],
        capture_output=True,
        text=True,
    )
    assert time.perf_counter() - start < 20  # was 46 s: 4 tries × 3 Snakemake attempts
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("lwnmt fetch: error: casia2015.zip: no source gave the file")
    assert last.endswith("get it from the CWMT organisers and put it at /m/wmt17-zh-en/casia2015.zip")


def test_an_archive_several_datasets_name_is_downloaded_once(monkeypatch):
    # the download keys, not a mirror's copies (make test sets it)
    monkeypatch.delenv("LWNMT_DATA_MIRROR", raising=False)
    config = grid.load(ROOT / "config.yaml")
    ende = grid.file_source(config, "wmt14-en-de", "europarl-v7.de-en.en")
    enfr = grid.file_source(config, "wmt14-en-fr", "europarl-v7.fr-en.fr")
    assert ende.path == enfr.path and ende.path.startswith("results/downloads/")
    campaign = {
        grid.file_source(config, d, f"{p}.tgz").path
        for d, p in (("iwslt14-ro-en", "ro-en"), ("iwslt14-es-en", "es-en"))
    }
    assert len(campaign) == 1  # the WIT3 2014-01 archive, for Ro-En and Es-En
    dev = {
        grid.file_source(config, d, f).path
        for d, f in (("wmt14-en-de", "newstest2013.en"), ("wmt17-zh-en", "newsdev2017.zh"))
    }
    assert len(dev) == 1  # both name https://data.statmt.org/wmt17/translation-task/dev.tgz
    key, name = Path(ende.path).parent.name, Path(ende.path).name
    datasets, entry = grid.download_spec(config, key, name)
    assert datasets == ["wmt14-en-de", "wmt14-en-fr"] and grid.urls_of(entry) == [
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"
    ]


@pytest.mark.system  # runs Snakemake
def test_the_extract_jobs_of_a_shared_archive_download_it_into_one_place(tmp_path):
    """Each extract job downloads its archive into the cache when it is not there (the download is locked: the
    second job waits for the first and uses its file), so a shared archive is fetched once."""
    targets = ["results/raw/wmt14-en-de/europarl-v7.de-en.en", "results/raw/wmt14-en-fr/europarl-v7.fr-en.fr"]
    result = snakemake(tmp_path, *targets, "-n", "-p")
    commands = [line for line in result.stdout.splitlines() if "layerwise_nmt extract" in line]
    downloads = {line.split("layerwise_nmt extract ")[1].split()[0] for line in commands}
    assert len(commands) == 2 and len(downloads) == 1 and downloads.pop().startswith("results/downloads/")
    assert all('--make-input \'["fetch", "results/downloads/' in line for line in commands)
    assert job_counts(snakemake(tmp_path, *targets, "-n", "--quiet", "rules").stdout)["extract"] == 2


@pytest.mark.system
def test_where_a_raw_file_came_from_is_not_what_snakemake_compares(tmp_path, mirror):
    """A raw file extracted from the data mirror stays done without it (its archive was never downloaded) and with
    it again; a new checksum in the config redoes it, from its URL when there is no mirror."""
    target, ci = "results/raw/multi30k/train.de", str(ROOT / "config/ci.yaml")
    snakemake(tmp_path, target, "--configfile", ci, mirror=mirror)
    for where in (None, mirror):
        result = snakemake(tmp_path, target, "-n", "--configfile", ci, mirror=where)
        assert "Nothing to be done" in result.stdout, result.stdout[-2000:]
    release = tmp_path / "new-release.yaml"
    release.write_text(f"datasets:\n  multi30k:\n    archives:\n      train.de.gz: {{sha256: '{'0' * 64}'}}\n")
    planned = snakemake(tmp_path, target, "-n", "-p", "--configfile", ci, str(release)).stdout
    command = next(line for line in planned.splitlines() if "layerwise_nmt extract" in line)
    assert '"fetch", "results/downloads/' in command and f'"--sha256", "{"0" * 64}"' in command


def cwmt_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def test_cwmt_members_are_line_ended_and_read_pairwise(tmp_path):
    archive = cwmt_zip(
        tmp_path / "datum2017.zip",
        {
            "datum2017/Book1_cn.txt": "甲\n乙".encode(),
            "datum2017/Book1_en.txt": b"a\nb\n",  # no final newline
            "datum2017/Book2_cn.txt": "丙\n".encode(),
            "datum2017/Book2_en.txt": b"c",
            "datum2017/readme.txt": b"not a side",
        },
    )
    zh, en = tmp_path / "datum2017.zh", tmp_path / "datum2017.en"
    extract.extract_member(archive, "datum2017/*_c[hn].txt", zh, None, "here", pair_member="datum2017/*_en.txt")
    extract.extract_member(archive, "datum2017/*_en.txt", en, None, "here", pair_member="datum2017/*_c[hn].txt")
    assert zh.read_text() == "甲\n乙\n丙\n" and en.read_text() == "a\nb\nc\n"  # not "乙丙": lines stay apart


def test_cwmt_pairs_with_different_line_counts_are_named(tmp_path):
    archive = cwmt_zip(
        tmp_path / "casict2011.zip",
        {
            "casict2011/casict-A_ch.txt": "一\n二\n".encode(),
            "casict2011/casict-A_en.txt": b"one\ntwo\n",
            "casict2011/casict-B_ch.txt": "三\n".encode(),
            "casict2011/casict-B_en.txt": b"three\nfour\n",
        },
    )
    with pytest.raises(
        UserError,
        match=r"casict2011/casict-B_ch.txt has 1 lines but casict2011/casict-B_en.txt "
        r"has 2",
    ):
        extract.extract_member(
            archive, "casict2011/*_c[hn].txt", tmp_path / "out", None, "here", pair_member="casict2011/*_en.txt"
        )
    assert not (tmp_path / "out").exists()
    # a member named without wildcards is checked against its pair too, in the same one line
    with pytest.raises(UserError, match=r"casict2011/casict-B_ch.txt has 1 lines but casict2011/casict-B_en.txt has 2"):
        extract.extract_member(
            archive,
            "casict2011/casict-B_ch.txt",
            tmp_path / "out",
            None,
            "here",
            pair_member="casict2011/casict-B_en.txt",
        )
    assert not (tmp_path / "out").exists()


def test_cwmt_files_of_the_config_are_paired():
    config = grid.load(ROOT / "config.yaml")
    source = grid.file_source(config, "wmt17-zh-en", "datum2017.zh")
    assert (source.member, source.pair_member) == ("datum2017/*_c[hn].txt", "datum2017/*_en.txt")


def test_status_names_the_archives_with_no_working_automatic_source(tmp_path, monkeypatch):
    monkeypatch.delenv("LWNMT_DATA_MIRROR", raising=False)
    config = grid.load(ROOT / "config.yaml")
    for entry in config["datasets"]["wmt17-zh-en"]["archives"].values():
        entry.pop("mirrors", None)  # the CWMT zips' mirror, which makes them a download (tests/test_status.py)
    zhen = grid.task_status(config, "wmt17_zhen")
    assert zhen.runnable and zhen.state == "manual"  # was "ok": its CWMT archives have no working source
    assert "casia2015.zip, casict2011.zip" in zhen.reason and "CWMT FTP host unreachable" in zhen.reason
    assert "put them at results/downloads/" in zhen.reason and "/casia2015.zip, results/downloads/" in zhen.reason
    roen = grid.task_status(config, "iwslt14_roen")
    assert roen.state == "manual" and "2014-01-test.tgz" in roen.reason and "wit3.fbk.eu/2014-01-b" in roen.reason
    assert grid.task_status(config, "wmt14_ende").state == "download"
    mirrored = tmp_path / "iwslt14-ro-en"
    mirrored.mkdir()
    (mirrored / "2014-01-test.tgz").write_bytes(b"")  # the user put it in the mirror
    config["data_mirror"] = str(tmp_path)
    roen = grid.task_status(config, "iwslt14_roen")
    assert roen.state == "download" and "2014-01.tgz" in roen.reason and "2014-01-test" not in roen.reason


def test_a_checksum_error_says_which_file_to_replace_and_from_where(tmp_path):
    config = grid.load(ROOT / "config.yaml")
    config["data_mirror"] = str(tmp_path)
    copy = tmp_path / "wmt16-en-ro" / "newstest2016-enro.ro"
    copy.parent.mkdir()
    copy.write_text("a corrupt mirror copy\n")
    source = grid.file_source(config, "wmt16-en-ro", "newstest2016.ro")
    assert source.path == str(copy) and source.where == "https://data.statmt.org/wmt16/translation-task/test.tgz"
    with pytest.raises(UserError) as err:
        checksums.Checksum(*source.checksum, "PROVENANCE.md").verify(copy, copy.name, source.where)
    assert (
        f"(from PROVENANCE.md); the file is corrupt or a different version: delete {copy} and replace it with a "
        f"copy from https://data.statmt.org/wmt16/translation-task/test.tgz" in str(err.value)
    )


def test_status_lists_the_files_no_checksum_pins(capsys):
    from layerwise_nmt import cli

    cli.main(["status", "--config", str(ROOT / "config.yaml")])
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("unpinned: "))
    listed = {line.split()[1]: line for line in lines[start + 1 :] if line.startswith("  unpinned ")}
    assert set(listed) == {
        "2014-01.tgz",
        "2014-01-test.tgz",
        "newstest2012.en",
        "newstest2012.de",
        "SETIMES2.en-ro.txt.zip",
        "corpus.bt.en-ro.en.gz",
        "corpus.bt.en-ro.ro.gz",
    }
    assert "(iwslt14-ro-en, iwslt14-es-en): none published" in listed["2014-01.tgz"]
    assert "not newstest2012" in listed["newstest2012.en"]  # why no reference pins it


def test_an_extract_whose_source_is_missing_makes_it_first(tmp_path, monkeypatch):
    """The chain an extract job runs when neither the data mirror nor the download cache holds its file: download
    the campaign archive into the cache, extract the pair's archive from it, extract the file from that."""
    import json
    import tarfile

    from conftest import make_tgz

    inner = make_tgz(tmp_path / "ro-en.tgz", {"ro-en/train.ro": b"a\nb\n"})
    outer = tmp_path / "2014-01.tgz"
    with tarfile.open(outer, "w:gz") as tar:
        tar.add(inner, "2014-01/ro-en.tgz")
    monkeypatch.chdir(tmp_path)
    fetch_first = ["fetch", "results/downloads/k/2014-01.tgz", "--url", outer.as_uri()]
    outer_first = [
        "extract",
        "results/downloads/k/2014-01.tgz",
        "results/raw/d/ro-en.tgz",
        "--archive",
        "--member",
        "2014-01/ro-en.tgz",
        "--where",
        "here",
        "--make-input",
        json.dumps(fetch_first),
    ]
    command = [
        "extract",
        "results/raw/d/ro-en.tgz",
        "results/raw/d/train.ro",
        "--archive",
        "--member",
        "ro-en/train.ro",
        "--where",
        "here",
        "--make-input",
        json.dumps(outer_first),
    ]
    run = subprocess.run([sys.executable, "-m", "layerwise_nmt", *command], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "results/raw/d/train.ro").read_bytes() == b"a\nb\n"
    assert (tmp_path / "results/downloads/k/2014-01.tgz").read_bytes() == outer.read_bytes()
    outer.unlink()  # its URL gone: a second run finds the download and the pair's archive in place
    (tmp_path / "results/raw/d/train.ro").unlink()
    again = subprocess.run([sys.executable, "-m", "layerwise_nmt", *command], capture_output=True, text=True)
    assert again.returncode == 0 and (tmp_path / "results/raw/d/train.ro").read_bytes() == b"a\nb\n", again.stderr
