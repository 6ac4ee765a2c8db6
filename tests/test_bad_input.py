"""Bad input gets a one-line error naming the file/line and what was expected, and leaves nothing half-written."""

import gzip
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import make_tgz
from layerwise_nmt import UserError
from layerwise_nmt.data import checksums, fetch, readers
from layerwise_nmt.data.io import read_lines
from layerwise_nmt.data.prepare import assemble


def lwnmt(*args):
    return subprocess.run([sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, text=True)


def one_line_error(result):
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("lwnmt ") and "error:" in lines[-1]
    return lines[-1]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_mismatched_line_counts(tmp_path):
    a, b = write(tmp_path / "a.de", "eins\nzwei\n"), write(tmp_path / "a.en", "one\n")
    with pytest.raises(UserError, match=r"a.de has 2 segments but .*a.en has 1"):
        readers.check_parallel(str(a), str(b), "plain")


def test_xml_ids_that_do_not_pair_up(tmp_path):
    a = write(tmp_path / "a.xml", '<seg id="1"> A </seg>\n<seg id="2"> B </seg>\n')
    b = write(tmp_path / "b.xml", '<seg id="1"> A </seg>\n<seg id="3"> B </seg>\n')
    with pytest.raises(UserError, match=r"ids do not pair up at segment 2 \(id 2 vs 3\)"):
        readers.check_parallel(str(a), str(b), "xml")


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"gut\nschl\xe9cht\n")
    with pytest.raises(UserError, match=r"bad.de:2: invalid UTF-8"):
        list(read_lines(path))
    result = lwnmt("tokenize", path, tmp_path / "out", "--lang", "de")
    assert "bad.de:2: invalid UTF-8" in one_line_error(result)
    assert not (tmp_path / "out").exists()


def _spec(tmp_path, train_src, train_tgt, test_src, test_tgt):
    files = {
        name: write(tmp_path / name, text)
        for name, text in [("tr.de", train_src), ("tr.en", train_tgt), ("te.de", test_src), ("te.en", test_tgt)]
    }
    part = lambda s, t: [[str(files[s]), str(files[t]), str(files[s]), str(files[t]), "plain"]]  # noqa: E731
    return {
        "train": {"parts": part("tr.de", "tr.en"), "clean": None},
        "valid": {"hold_out_every": 2},
        "test": {"parts": part("te.de", "te.en")},
    }


def _outputs(tmp_path):
    return {s: (str(tmp_path / f"{s}.de"), str(tmp_path / f"{s}.en")) for s in ("train", "valid", "test")}


def test_empty_training_lines_are_counted_drops(tmp_path):
    spec = _spec(tmp_path, "a\n\nb c\nd\ne\n", "A\nB\n\nD\nE\n", "x\n", "X\n")
    stats = assemble(spec, _outputs(tmp_path), str(tmp_path / "stats.json"))
    assert stats["train"]["empty"] == 2 and stats["train"]["kept"] == 3
    assert json.loads((tmp_path / "stats.json").read_text())["train"]["empty"] == 2
    assert (tmp_path / "valid.de").read_text() == "d\n"  # every 2nd of the 3 kept pairs
    assert (tmp_path / "train.en").read_text() == "A\nE\n"


def test_empty_test_line_is_an_error_naming_the_line(tmp_path):
    spec = _spec(tmp_path, "a\n", "A\n", "x\n\n", "X\nY\n")
    with pytest.raises(UserError, match=r"test line 2 \(of .*te.de\): empty segment"):
        assemble(spec, _outputs(tmp_path), str(tmp_path / "stats.json"))
    assert not (tmp_path / "stats.json").exists()


def test_truncated_archive(tmp_path):
    archive = make_tgz(tmp_path / "x.tgz", {"x/a.txt": b"hello\n" * 20000})
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    result = lwnmt("extract", archive, tmp_path / "a.txt", "--archive", "--member", "x/a.txt")
    assert "x.tgz: truncated or corrupt archive" in one_line_error(result)
    assert list(tmp_path.iterdir()) == [archive]  # no partial output, no temp file


def test_checksum_mismatch_of_extracted_member(tmp_path):
    archive = make_tgz(tmp_path / "x.tgz", {"x/a.txt": b"hello\n"})
    wrong = "0" * 64
    result = lwnmt(
        "extract",
        archive,
        tmp_path / "a.txt",
        "--archive",
        "--member",
        "x/a.txt",
        "--sha256",
        wrong,
        "--where",
        "https://example.org/x.tgz",
    )
    line = one_line_error(result)
    assert f"expected {wrong}" in line and "https://example.org/x.tgz" in line
    assert not (tmp_path / "a.txt").exists()


def test_extract_gz_and_git_blob_checksum(tmp_path):
    payload = b"ein Satz\n"
    gz = tmp_path / "a.de.gz"
    gz.write_bytes(gzip.compress(payload))
    blob = hashlib.sha1(b"blob %d\0" % len(payload) + payload).hexdigest()
    assert lwnmt("extract", gz, tmp_path / "a.de", "--archive", "--git-blob", blob).returncode == 0
    assert (tmp_path / "a.de").read_bytes() == payload


def test_missing_mirror_file(tmp_path):
    result = lwnmt("extract", tmp_path / "nope.xml", tmp_path / "out.xml", "--where", "the mirror")
    assert "nope.xml: missing" in one_line_error(result)


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with HTTP Range support (what resumable downloads rely on)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].rstrip("-"))
            self.send_response(206)
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = lambda *a, **kw: RangeHandler(*a, directory=str(root), **kw)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_download_verifies_and_resumes(server, tmp_path):
    root, url = server
    payload = bytes(range(256)) * 4000
    (root / "corpus.tgz").write_bytes(payload)
    sha = hashlib.sha256(payload).hexdigest()
    out = tmp_path / "dl" / "corpus.tgz"
    out.parent.mkdir()
    (out.parent / "corpus.tgz.part").write_bytes(payload[:1000])  # an interrupted earlier download …
    (out.parent / "corpus.tgz.part.url").write_text(f"{url}/corpus.tgz")  # … of the same URL
    fetch.download(f"{url}/corpus.tgz", out, checksums.Checksum("sha256", sha))
    assert out.read_bytes() == payload
    assert sorted(p.name for p in out.parent.iterdir()) == ["corpus.tgz"]


def test_a_partial_file_from_another_url_is_not_resumed(server, tmp_path):
    root, url = server
    payload = bytes(range(256)) * 4000
    (root / "corpus.tgz").write_bytes(payload)
    out = tmp_path / "dl" / "corpus.tgz"
    out.parent.mkdir()
    (out.parent / "corpus.tgz.part").write_bytes(b"x" * 1000)  # left by a mirror that failed half-way
    (out.parent / "corpus.tgz.part.url").write_text("https://mirror.example/corpus.tgz")
    fetch.download(f"{url}/corpus.tgz", out, checksums.Checksum("sha256", hashlib.sha256(payload).hexdigest()))
    assert out.read_bytes() == payload


def test_download_checksum_mismatch_leaves_nothing(server, tmp_path):
    root, url = server
    (root / "corpus.tgz").write_bytes(b"not what we expected")
    result = lwnmt(
        "fetch",
        tmp_path / "corpus.tgz",
        "--url",
        f"{url}/corpus.tgz",
        "--sha256",
        "1" * 64,
        "--checksum-source",
        "the publisher's list",
    )
    error = one_line_error(result)
    assert "sha256 is" in error and f"expected {'1' * 64} (from the publisher's list)" in error
    assert list(tmp_path.iterdir()) == [root]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["status", "--config", "nope.yaml"], "config file nope.yaml: No such file or directory; expected a YAML file"),
        (["status", "--config", "config/demo.yaml"], "an overlay such as config/demo.yaml goes after the full config"),
        (["params", "--config", "config.yaml", "no.such.experiment"], "unknown experiment 'no.such.experiment'"),
        (
            [
                "translate",
                "/dev/null",
                "--model",
                "m.pt",
                "--data",
                "/nope",
                "--src",
                "de",
                "--tgt",
                "en",
                "--out-prefix",
                "x",
            ],
            "--data /nope: expected a binarized data directory",
        ),
        (["average", "/nope", "--out", "x.pt", "--num", "2"], "/nope: No such file or directory"),
        (["translate", "in.bpe", "--model", "m.pt"], "missing --data, --src, --tgt"),
        (["translate", "-", "--experiment", "no.such"], "--experiment 'no.such': not an experiment of the config"),
        (
            ["translate", "-", "--experiment", "demo.transformr", "--configfile", "config/demo.yaml"],
            "--experiment 'demo.transformr': not an experiment of the config; did you mean 'demo.transformer'",
        ),
        (
            [
                "translate",
                "-",
                "--experiment",
                "demo.transformer",
                "--seed",
                "99",
                "--config",
                "config.yaml",
                "--config",
                "config/demo.yaml",
            ],
            "not trained yet; run `snakemake results/multi30k_deen/demo.transformer/seed99/model.pt "
            "--configfile config/demo.yaml` first",
        ),
    ],
)
def test_command_line_mistakes_get_one_line(args, expected):
    from conftest import ROOT

    result = subprocess.run([sys.executable, "-m", "layerwise_nmt", *args], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert expected in one_line_error(result)


def test_lwnmt_status_outside_the_checkout_says_where_the_config_is(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "status"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.stderr.strip() == (
        "lwnmt status: error: config file config.yaml: No such file or directory; "
        "expected a YAML file (run from the checkout, or pass --config "
        "path/to/config.yaml)"
    )


@pytest.mark.system  # runs Snakemake
def test_an_unknown_table_is_named_with_the_ones_that_exist(tmp_path):
    from conftest import snakemake

    result = snakemake(tmp_path, "-n", "results/tables/lwc/T9.md", check=False)
    assert result.returncode != 0
    assert (
        "results/tables/lwc/T9: paper lwc has no table 'T9'; expected one of S5_4, T1, T2, T3, T4"
        in result.stdout + result.stderr
    )


def test_a_workflow_jobs_one_line_error_reaches_the_console_not_only_its_log(tmp_path):
    """A rule runs `lwnmt … 2> {log}`: the console showed only Snakemake's CalledProcessError, the line was in the
    log. In a workflow job (LWNMT_ERRORS_ON_STDOUT, set by common.smk) with stderr in a file the line goes to stdout
    as well (which Snakemake shows); by hand it is printed once, on stderr only."""
    src, tgt = tmp_path / "a.de", tmp_path / "a.en"
    src.write_text("eins\nzwei\ndrei\n")
    tgt.write_text("one\ntwo\n")
    spec = {"splits": {"train": {"parts": [[str(src), str(tgt), str(src), str(tgt), "plain"]]}}}
    command = (
        f"{sys.executable} -m layerwise_nmt assemble --spec '{json.dumps(spec)}' --src de --tgt en "
        f"--out-dir {tmp_path} --stats {tmp_path / 'stats.json'} 2> {tmp_path / 'job.log'}"
    )
    job = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env={**os.environ, "LWNMT_ERRORS_ON_STDOUT": "1"}
    )
    line = f"lwnmt assemble: error: {src} has 3 segments but {tgt} has 2"
    assert job.returncode == 1 and job.stdout.startswith(line) and job.stdout.count("\n") == 1
    assert line in (tmp_path / "job.log").read_text()
    by_hand = lwnmt(
        "assemble",
        "--spec",
        json.dumps(spec),
        "--src",
        "de",
        "--tgt",
        "en",
        "--out-dir",
        tmp_path,
        "--stats",
        tmp_path / "stats.json",
    )
    assert one_line_error(by_hand).startswith(line) and by_hand.stdout == ""
