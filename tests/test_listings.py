"""config.yaml's member paths checked against the releases' real listings (layerwise_nmt/rehearsal/
release_listings.yaml, names only, each with its public source), independently of the config: a wrong path fails
here and in the rehearsal, whose stand-in archives are packed with the listed names."""

import copy
import re
from pathlib import Path

import pytest

from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.rehearsal.standins import listing_key, load_listings, real_members, spread

ROOT = Path(__file__).resolve().parents[1]


def archive_files(config):
    """(dataset, file name) of every file read out of an archive by a member path."""
    for dataset, spec in config["datasets"].items():
        if "user_path" in spec:
            continue
        for name, entry in spec["files"].items():
            if entry.get("archive") and entry.get("path"):
                yield dataset, name


def test_every_config_path_is_in_its_archives_real_listing():
    config, listings = grid.load(ROOT / "config.yaml"), load_listings()
    checked = 0
    for dataset, name in archive_files(config):
        real_members(listings, config["datasets"][dataset], dataset, name)  # raises on a path the release lacks
        checked += 1
    assert checked >= 90


def test_cwmt_wildcards_match_several_real_files_per_side_and_pair_up():
    config, listings = grid.load(ROOT / "config.yaml"), load_listings()
    spec = config["datasets"]["wmt17-zh-en"]
    _, zh = real_members(listings, spec, "wmt17-zh-en", "datum2017.zh")
    _, en = real_members(listings, spec, "wmt17-zh-en", "datum2017.en")
    assert len(zh) == len(en) == 20 and zh[0] == "datum2017/Book10_cn.txt" and en[0] == "datum2017/Book10_en.txt"
    assert real_members(listings, spec, "wmt17-zh-en", "casict2011.zh")[1] == [
        "casict2011/casict-A_ch.txt",
        "casict2011/casict-B_ch.txt",
    ]


@pytest.mark.parametrize(
    "dataset, name, wrong",
    [
        ("wmt14-en-de", "europarl-v7.de-en.en", "europarl-v7.de-en.en"),  # the release has it under training/
        ("wmt17-zh-en", "neu2017.zh", "neu2017/*_zh.txt"),  # NEU's Chinese side is NEU_cn.txt
        ("iwslt14-ro-en", "IWSLT14.TED.tst2014.ro-en.ro.xml", "ro-en/IWSLT14.TED.tst2013.ro-en.ro.xml"),
    ],
)
def test_a_planted_wrong_path_fails(dataset, name, wrong):
    config = copy.deepcopy(grid.load(ROOT / "config.yaml"))
    config["datasets"][dataset]["files"][name]["path"] = wrong
    with pytest.raises(
        UserError, match=re.escape(f"datasets/{dataset}/files/{name}: path '{wrong}' is not in the real listing of ")
    ):
        real_members(load_listings(), config["datasets"][dataset], dataset, name)


def test_every_listing_has_a_source_and_belongs_to_an_archive_of_the_config():
    config, listings = grid.load(ROOT / "config.yaml"), load_listings()
    used = {
        listing_key(config["datasets"][d], config["datasets"][d]["files"][n]["archive"])
        for d, n in archive_files(config)
    }
    assert set(listings) == used
    assert all(entry["source"].strip() and entry["members"] for entry in listings.values())


def test_spread_keeps_the_lines_in_extraction_order_and_drops_one_final_newline():
    out = spread(b"a\nb\nc\n", ["x/Book1_cn.txt", "x/Book2_cn.txt"])
    assert out == {"x/Book1_cn.txt": b"a\nb\n", "x/Book2_cn.txt": b"c"}


def test_the_rehearsal_stand_ins_fail_on_a_planted_wrong_path(tmp_path, mirror):
    from layerwise_nmt.rehearsal.standins import build

    config = copy.deepcopy(grid.load(ROOT / "config.yaml"))
    config["tasks"] = {"wmt16_enro": config["tasks"]["wmt16_enro"]}
    files = config["datasets"]["wmt16-en-ro"]["files"]
    build(config, mirror, tmp_path / "good")  # the config's own paths: packed under the release's names
    files["europarl-v8.ro-en.ro"]["path"] = "training/europarl-v8.ro-en.ro"  # the WMT18 archive's layout, not WMT16's
    with pytest.raises(UserError, match="path 'training/europarl-v8.ro-en.ro' is not in the real listing"):
        build(config, mirror, tmp_path / "bad")
