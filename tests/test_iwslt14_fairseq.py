"""Acceptance: our IWSLT14 test set equals fairseq prepare-iwslt14.sh's, byte for byte, before and after BPE.

Runs the workflow's own rules (extract from the mirror with checksums → tokenize) on the raw XML, then our BPE step
with fairseq's `code` file. The train split needs the full archive, which is not mirrored here.
"""

import json
import subprocess
import sys

import pytest

from conftest import IWSLT_FAIRSEQ, ROOT, snakemake
from layerwise_nmt import grid
from layerwise_nmt.job_specs import ReferenceCheckSpec

pytestmark = pytest.mark.system  # the IWSLT14 recipe through Snakemake against fairseq's files

PARTS = [
    "IWSLT14.TED.dev2010",
    "IWSLT14.TEDX.dev2012",
    "IWSLT14.TED.tst2010",
    "IWSLT14.TED.tst2011",
    "IWSLT14.TED.tst2012",
]


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory, mirror):
    work = tmp_path_factory.mktemp("iwslt")
    targets = [f"results/iwslt14_deen/data/tok/{p}.de-en.{lang}" for p in PARTS for lang in ("de", "en")]
    snakemake(work, *targets, mirror=mirror)
    return work / "results/iwslt14_deen/data/tok"


@pytest.mark.parametrize("lang", ["de", "en"])
def test_each_xml_set_equals_fairseq_tmp(tokenized, lang):
    for part in PARTS:
        ours = (tokenized / f"{part}.de-en.{lang}").read_bytes()
        assert ours == (IWSLT_FAIRSEQ / "tmp" / f"{part}.de-en.{lang}").read_bytes(), part


@pytest.mark.parametrize("lang", ["de", "en"])
def test_test_set_before_and_after_bpe_equals_fairseq(tokenized, tmp_path, lang):
    test = b"".join((tokenized / f"{part}.de-en.{lang}").read_bytes() for part in PARTS)
    expected = (IWSLT_FAIRSEQ / "tmp" / f"test.{lang}").read_bytes()
    assert test.count(b"\n") == 6750
    assert test == expected

    (tmp_path / "test.tok").write_bytes(test)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "apply-bpe",
            str(tmp_path / "test.tok"),
            str(tmp_path / "test.bpe"),
            "--codes",
            str(IWSLT_FAIRSEQ / "code"),
            "--workers",
            "2",
        ],
        check=True,
    )
    assert (tmp_path / "test.bpe").read_bytes() == (IWSLT_FAIRSEQ / f"test.{lang}").read_bytes()

    # the git blob ids in config.yaml (what `lwnmt check-reference` compares for users with the full archive)
    reference = grid.load(ROOT / "config.yaml")["tasks"]["iwslt14_deen"]["reference"]
    data = tmp_path / "data"
    (data / "bpe").mkdir(parents=True)
    (data / "bpe" / f"test.de-en.{lang}").write_bytes((tmp_path / "test.bpe").read_bytes())
    expected = {f"bpe/test.de-en.{lang}": reference[f"bpe/test.de-en.{lang}"]}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "check-reference",
            str(data),
            "--spec",
            ReferenceCheckSpec(expected).to_json(),
            "--out",
            str(tmp_path / "check.json"),
        ],
        check=True,
    )
    assert json.loads((tmp_path / "check.json").read_text())["identical"] == 1


@pytest.mark.parametrize("lang", ["de", "en"])
def test_valid_bpe_equals_fairseq(mirror, tmp_path, lang):
    """fairseq's valid set is held-out training text; BPE with its code must reproduce valid.{lang} exactly."""
    out = tmp_path / "valid.bpe"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "apply-bpe",
            str(IWSLT_FAIRSEQ / "tmp" / f"valid.{lang}"),
            str(out),
            "--codes",
            str(IWSLT_FAIRSEQ / "code"),
            "--workers",
            "2",
        ],
        check=True,
    )
    assert out.read_bytes() == (IWSLT_FAIRSEQ / f"valid.{lang}").read_bytes()


def test_lwc_test_set_is_the_papers_5585_sentences(tmp_path, mirror):
    """LWC §4.1: "the concatenation of dev2010, tst2010, tst2011 and tst2012 as the test set" (no TEDX.dev2012)."""
    task = grid.load(ROOT / "config.yaml")["tasks"]["iwslt14_deen_bpe32k"]
    parts = [template.split(".de-en.")[0] for template in task["splits"]["test"]["parts"]]
    assert parts == [p for p in PARTS if p != "IWSLT14.TEDX.dev2012"]
    targets = [
        f"results/iwslt14_deen_bpe32k/data/{kind}"
        for kind in [f"ref/test.de-en.{lang}" for lang in ("de", "en")] + [f"tok/{p}.de-en.en" for p in parts]
    ]
    snakemake(tmp_path, *targets, mirror=mirror)
    data = tmp_path / "results/iwslt14_deen_bpe32k/data"
    for lang in ("de", "en"):
        assert (data / f"ref/test.de-en.{lang}").read_bytes().count(b"\n") == 5585
    tokenized = b"".join((data / f"tok/{p}.de-en.en").read_bytes() for p in parts)
    assert tokenized == b"".join((IWSLT_FAIRSEQ / "tmp" / f"{p}.de-en.en").read_bytes() for p in parts)
