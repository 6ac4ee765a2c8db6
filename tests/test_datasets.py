"""The WMT/IWSLT/NIST dataset layer on the real test sets of the data mirror: SGML readers, the Romanian
normalisation, compound splitting, Chinese segmentation, multi-reference NIST sets, and the fetch mechanics the big
corpora need (md5, wildcard members, archives inside archives, disk-space checks, unpinned checksums)."""

import gzip
import hashlib
import io
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import MIRROR, ROOT
from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.data import checksums, extract, readers
from layerwise_nmt.data import io as data_io
from layerwise_nmt.data.io import read_lines
from layerwise_nmt.data.prepare import tokenize_file
from layerwise_nmt.data.tokenize import TokenizeOptions, normalise_romanian, remove_romanian_diacritics
from layerwise_nmt.scoring.score import ScoreConfig, compound_split, score_files


def test_sgml_reader_equals_the_plain_release_up_to_doubled_spaces(mirror):
    """newstest2014 (full): the official SGML against the plain text extracted from it (OPUS-MT-testsets). The
    plain copy collapsed 4 doubled spaces in the English source; otherwise every segment is identical."""
    base = mirror / "wmt14-en-de"
    for sgm, plain, whitespace_only in [
        ("test-full/newstest2014-deen-src.en.sgm", "plain/newstest2014.en", 4),
        ("test-full/newstest2014-deen-ref.de.sgm", "plain/newstest2014.de", 0),
        ("test-full/newstest2014-deen-src.de.sgm", "plain/newstest2014.de", 0),
    ]:
        segments, ids = readers.read_xml(str(base / sgm))
        lines = list(read_lines(base / plain))
        assert len(segments) == len(lines) == 3003 and len(ids) == 3003
        differ = [(a, b) for a, b in zip(segments, lines, strict=True) if a != b]
        assert len(differ) == whitespace_only
        assert all(a.split() == b.split() and "  " in a for a, b in differ)
    # format "wmt" reads either form: a mirror may hold the plain text where the release has SGML
    assert list(readers.read_wmt(str(base / "plain/newstest2014.en"))[0]) == lines_of(base / "plain/newstest2014.en")
    assert (
        readers.read_wmt(str(base / "test-full/newstest2014-deen-src.de.sgm"))[0][:3]
        == lines_of(base / "plain/newstest2014.de")[:3]
    )


def lines_of(path):
    return list(read_lines(path))


def test_sgml_sides_pair_up_and_mismatches_are_named(mirror, tmp_path):
    base = mirror / "wmt14-en-de/test-full"
    assert (
        readers.check_parallel(
            str(base / "newstest2014-deen-src.en.sgm"), str(base / "newstest2014-deen-ref.de.sgm"), "xml"
        )
        == 3003
    )
    shifted = tmp_path / "ref.sgm"
    text = (base / "newstest2014-deen-ref.de.sgm").read_text(encoding="utf-8")
    shifted.write_text(text.replace('<seg id="2">', '<seg id="99">', 1), encoding="utf-8")
    with pytest.raises(UserError, match=r"do not pair up at segment 2 \(id 2 vs 99\)"):
        readers.check_parallel(str(base / "newstest2014-deen-src.en.sgm"), str(shifted), "xml")


def test_romanian_normalisation_on_newstest2016(mirror):
    """Sennrich et al.'s normalise-romanian + remove-diacritics: cedilla and comma-below forms both map to the
    bare letter, case kept; idempotent; on the real newsdev/newstest2016 text no Romanian diacritic survives and
    nothing else changes."""
    assert normalise_romanian("ŞşŢţ") == "ȘșȚț"
    assert remove_romanian_diacritics("ŞşŢţ ȘșȚț ĂăÂâÎî") == "SsTt SsTt AaAaIi"
    diacritics = set("ŞşŢţȘșȚțĂăÂâÎî")
    for name in ("newsdev2016-enro.ro", "newstest2016-enro.ro"):
        text = (mirror / "wmt16-en-ro" / name).read_text(encoding="utf-8")
        once = remove_romanian_diacritics(text)
        assert remove_romanian_diacritics(once) == once
        assert not diacritics & set(once)
        changed = sum(a != b for a, b in zip(text, once, strict=True))
        assert changed == sum(ch in diacritics for ch in text) > 5000
    normalize = TokenizeOptions("ro", romanian=True, normalize_punctuation=True).normalizer()
    assert normalize("Ţara „noastră”") == 'Tara "noastra"'


def test_compound_splitting_matches_luong_et_al_hyphen_convention(mirror):
    """Luong et al.'s newstest2013.de writes a-b as `a ##AT##-##AT## b`: Moses-tokenizing the official plain text
    and applying t2t's compound splitting reproduces their lines (2,990 of 3,000 in all; 332 of the 335 with a
    split hyphen)."""
    theirs = gzip.open(mirror / "wmt14-en-de/newstest2013.de.gz", "rt", encoding="utf-8").read().splitlines()
    tokenize = TokenizeOptions("de").build()
    ours = [compound_split(tokenize(line)) for line in lines_of(mirror / "wmt14-en-de/plain/newstest2013.de")]
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= 2990
    hyphenated = [i for i, line in enumerate(theirs) if "##AT##-##AT##" in line]
    assert len(hyphenated) == 335 and sum(ours[i] == theirs[i] for i in hyphenated) >= 332
    assert compound_split("Higgs-Boson , 2-3") == "Higgs ##AT##-##AT## Boson , 2 ##AT##-##AT## 3"


def test_fairseq_wmt_test_recipe_on_newstest2014(mirror, tmp_path):
    """The wmt14_ende test split as configured: SGML, apostrophe mapping, tokenizer -a, no punctuation
    normalisation (fairseq's prepare-wmt14en2de.sh test branch)."""
    from snakemake.utils import validate

    config = grid.load(ROOT / "config.yaml")
    validate(config, str(grid.SCHEMA))  # as the Snakefile does: schema defaults must not undo the overrides
    task = config["tasks"]["wmt14_ende"]
    options = grid.tokenize_options(task, "en", task["splits"]["test"])
    assert options["aggressive_dash_splits"] and not options["normalize_punctuation"]
    out = tmp_path / "test.en"
    sgm = mirror / "wmt14-en-de/test-full/newstest2014-deen-src.en.sgm"
    assert tokenize_file(str(sgm), str(out), "xml", TokenizeOptions("en", **options), workers=2) == 3003
    lines = lines_of(out)
    assert lines[0] == "Gutach : Increased safety for pedestrians"
    assert any(" @-@ " in line for line in lines) and not any("’" in line for line in lines)
    train = grid.tokenize_options(task, "en", task["splits"]["train"])
    assert train["normalize_punctuation"] and train["remove_non_printing"]
    ro = grid.tokenize_options(config["tasks"]["wmt16_enro"], "ro", {})
    assert ro["romanian"] and ro["normalize_punctuation"] and ro["aggressive_dash_splits"]
    assert "romanian" not in grid.tokenize_options(config["tasks"]["wmt16_enro"], "en", {})


def test_jieba_segments_chinese_and_moses_tokenizes_the_rest():
    segment = TokenizeOptions("zh", tokenizer="jieba").build()
    assert (
        segment("我们在2017年去了New York，看了“自由女神像”。")
        == "我们 在 2017 年 去 了 New York ， 看 了 “ 自由 女神像 ” 。"
    )
    assert segment("U.S.-based公司") == "U.S.-based 公司"
    assert (
        TokenizeOptions("de", tokenizer="none").build()("schon  tokenisiert ##AT##-##AT## ja ")
        == "schon tokenisiert ##AT##-##AT## ja"
    )


NIST_REF = """<refset setid="mt04" srclang="zh" trglang="en">
<DOC docid="d1" sysid="ref1">
<seg id=1>the cat sat</seg>
<seg id=2>on the mat</seg>
</DOC>
<DOC docid="d1" sysid="ref2">
<seg id=1>a cat was sitting</seg>
<seg id=2>on a mat</seg>
</DOC>
</refset>
"""


def test_nist_multi_reference_sets_read_normalise_and_score(tmp_path):
    ref = tmp_path / "ref.sgm"
    ref.write_text(NIST_REF, encoding="utf-8")
    assert readers.read_references(str(ref)) == [["the cat sat", "on the mat"], ["a cat was sitting", "on a mat"]]
    assert readers.read_nist(str(ref))[0] == ["the cat sat", "on the mat"]  # tokenized text: first reference
    norm = tmp_path / "norm.en"
    tokenize_file(str(ref), str(norm), "nist", TokenizeOptions("en"), normalize_only=True)
    assert lines_of(norm) == ["the cat sat", "on the mat", "a cat was sitting", "on a mat"]
    hyp = tmp_path / "hyp.en"
    hyp.write_text("a cat was sitting\non a mat\n")
    result = score_files(str(hyp), [str(norm)], ScoreConfig(tokenize="13a"), stacked_refs=True)
    assert result["references"] == 2 and result["bleu"] == pytest.approx(100.0)
    hyp.write_text("only\nthree\nlines\n")
    with pytest.raises(UserError, match="has 3 lines but reference .* has 4; expected a multiple"):
        score_files(str(hyp), [str(norm)], ScoreConfig(), stacked_refs=True)
    broken = tmp_path / "broken.sgm"
    broken.write_text(NIST_REF.replace("<seg id=2>on a mat</seg>\n", ""), encoding="utf-8")
    with pytest.raises(UserError, match="different segment counts"):
        readers.read_references(str(broken))


def test_md5_wildcard_members_and_archive_in_archive(tmp_path):
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as tar:
        for name, text in [("pair/train.xx", b"one\ntwo\n")]:
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    outer = tmp_path / "outer.zip"
    with zipfile.ZipFile(outer, "w") as zf:
        zf.writestr("campaign/texts/pair.tgz", inner.getvalue())
        zf.writestr("cwmt/Book2_cn.txt", "B\n")
        zf.writestr("cwmt/Book1_cn.txt", "A\n")
        zf.writestr("cwmt/Book1_en.txt", "a\n")
    md5 = hashlib.md5(outer.read_bytes()).hexdigest()
    checksums.Checksum("md5", md5).verify(outer, "outer.zip", "here")
    with pytest.raises(UserError, match="md5 is"):
        checksums.Checksum("md5", "0" * 32).verify(outer, "outer.zip", "here")
    extract.extract_member(outer, "cwmt/*_c[hn].txt", tmp_path / "cwmt.zh", None, "here")
    assert (tmp_path / "cwmt.zh").read_text() == "A\nB\n"  # sorted: Book1 before Book2
    assert (tmp_path / "cwmt.zh.sha256").read_text().split()[0] == hashlib.sha256(b"A\nB\n").hexdigest()
    extract.extract_member(outer, "campaign/texts/pair.tgz", tmp_path / "pair.tgz", None, "here")
    extract.extract_member(tmp_path / "pair.tgz", "pair/train.xx", tmp_path / "train.xx", None, "here")
    assert (tmp_path / "train.xx").read_text() == "one\ntwo\n"
    with pytest.raises(UserError, match="no member matches"):
        extract.extract_member(outer, "cwmt/*.xml", tmp_path / "none", None, "here")


def test_archive_inside_archive_and_mirror_copies_resolve(tmp_path):
    config = grid.load(ROOT / "config.yaml")
    inner = grid.file_source(config, "iwslt14-ro-en", "train.tags.ro-en.ro")
    assert inner.path == "results/raw/iwslt14-ro-en/ro-en.tgz" and inner.member == "ro-en/train.tags.ro-en.ro"
    outer = grid.file_source(config, "iwslt14-ro-en", "ro-en.tgz")
    archive = config["datasets"]["iwslt14-ro-en"]["archives"]["2014-01.tgz"]
    assert outer.path == grid.download_path(archive, "2014-01.tgz")
    if MIRROR is not None and MIRROR.is_dir():
        config["data_mirror"] = str(MIRROR)
        plain = grid.file_source(config, "wmt16-en-ro", "newstest2016.ro")  # SGML officially, plain in the mirror
        assert plain.path.endswith("wmt16-en-ro/newstest2016-enro.ro") and plain.checksum[0] == "sha256"
        luong = grid.file_source(config, "wmt14-en-de-luong", "newstest2013.de")  # a gzipped mirror copy
        assert luong.is_archive and luong.path.endswith("newstest2013.de.gz")
        assert luong.checksum == ("md5", "5d48c9300649bfad1300e53ad1334aec")  # Sockeye's md5 of the Stanford file
        assert "Sockeye" in luong.checksum_source


def test_every_download_has_a_checksum_or_says_where_none_was_published():
    config = grid.load(ROOT / "config.yaml")
    for name, dataset in config["datasets"].items():
        for archive, entry in dataset.get("archives", {}).items():
            assert grid.checksum_of(entry) or entry.get("checksum_source") or entry.get("manual"), (name, archive)


def test_disk_space_is_checked_before_writing(tmp_path, monkeypatch):
    class Usage:
        free = 1_000

    monkeypatch.setattr(data_io.shutil, "disk_usage", lambda path: Usage)
    with pytest.raises(UserError, match=r"needs 2.0 KB but .* has 1.0 KB free"):
        data_io.require_space(tmp_path, 2_000, "extracting big.txt")
    archive = tmp_path / "big.gz"
    archive.write_bytes(gzip.compress(b"x" * 100_000))
    with pytest.raises(UserError, match="decompressing"):
        extract.extract_member(archive, None, tmp_path / "big", None, "here")
    assert not (tmp_path / "big").exists()


def test_manual_downloads_say_what_to_do(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "fetch",
            str(tmp_path / "2014-01-test.tgz"),
            "--manual",
            "accept the terms, download it",
            "--expected-at",
            "/mirror/x/2014-01-test.tgz",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and not (tmp_path / "2014-01-test.tgz").exists()
    assert (
        "2014-01-test.tgz: no source gave the file (no URL configured); accept the terms, download it and put "
        "it at /mirror/x/2014-01-test.tgz"
    ) in result.stderr


def test_assemble_streams_cleaning_and_the_every_kth_hold_out(tmp_path):
    """prepare-iwslt14.sh's `awk 'NR%k==0'` on the cleaned training text (1-based), streamed to both files."""
    from layerwise_nmt.data.prepare import assemble

    raw, tok = {}, {}
    for lang in ("de", "en"):
        raw[lang], tok[lang] = tmp_path / f"raw.{lang}", tmp_path / f"tok.{lang}"
        lines = [f"{lang} {i}" for i in range(1, 9)] + [""]  # 8 pairs and one empty pair (dropped by cleaning)
        raw[lang].write_text("\n".join(lines) + "\n")
        tok[lang].write_text("\n".join(lines) + "\n")
    part = [str(raw["de"]), str(raw["en"]), str(tok["de"]), str(tok["en"]), "plain"]
    splits = {
        "train": {"parts": [part], "clean": {"ratio": 9.0, "min_len": 1, "max_len": 80}},
        "valid": {"hold_out_every": 3},
        "test": {"parts": [part], "max_lines": 2},
    }
    outputs = {s: (str(tmp_path / f"{s}.de"), str(tmp_path / f"{s}.en")) for s in splits}
    stats = assemble(splits, outputs, str(tmp_path / "stats.json"))
    assert (tmp_path / "valid.de").read_text().split("\n")[:-1] == ["de 3", "de 6"]
    assert (tmp_path / "train.en").read_text().split("\n")[:-1] == [f"en {i}" for i in (1, 2, 4, 5, 7, 8)]
    assert stats["train"]["empty"] == 1 and stats["train"]["after_hold_out"] == 6 and stats["valid"]["kept"] == 2
    assert (tmp_path / "test.de").read_text() == "de 1\nde 2\n"


def test_the_cli_accepts_every_corpus_format_the_readers_know(tmp_path):
    """The workflow passes each split's `format` to `lwnmt tokenize` (NIST's `nist` included)."""
    from layerwise_nmt.cli.data import FORMATS

    assert sorted(FORMATS) == sorted(readers.READERS)
    ref = tmp_path / "ref.sgm"
    ref.write_text(NIST_REF, encoding="utf-8")
    out = tmp_path / "ref.en"
    result = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "tokenize", str(ref), str(out), "--lang", "en", "--format", "nist"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_text() == "the cat sat\non the mat\n"
