"""The before-stop check: the repository speaks only of itself. No tracked text file describes where or how the
project is built, or points at a folder a clone does not have. It looks, in every git-tracked text file except
`.ci/run` (CI's own wiring, which may name CI's surroundings), tests/fixtures/ (recorded data) and binary files, for
the words of each category in PATTERNS below: a folder beside the checkout that no clone has (the data mirror is
`data_mirror:` or `$LWNMT_DATA_MIRROR`, wherever it lives), the place and the sittings the project is built in, a
machine on loan, the GPU tooling named after someone's device rather than a GPU node, notes no clone has, and
"this project's machine". The words are written backwards (`_w`) so that this file does not read as using them.

A hit fails the test naming file:line and the word.
"""

import re
import subprocess

import pytest

from conftest import ROOT


def _w(backwards: str) -> str:
    return backwards[::-1]


SHARED, MIRROR = _w("derahs"), _w("rorrim-atad")
PATTERNS = {
    "a folder beside the checkout": re.compile(r"\.\./%s|[\"']%s[\"']\s*/\s*[\"']%s" % (SHARED, SHARED, MIRROR)),
    "the place it is built in": re.compile(r"\b" + _w("ecalpkrow"), re.IGNORECASE),
    "a sitting": re.compile(r"(?<!scope=\")(?<!scope=')\b%ss?\b" % _w("noisses")),
    "a machine on loan": re.compile(
        r"\b(?:%s)\b" % "|".join(map(_w, ["?stisiv", "?sesael", "desael", "tnel", "?sdnel"])), re.IGNORECASE
    ),
    "someone's device": re.compile(r"\bdevice (?:%s|%s)s?\b" % (_w("enihcam"), _w("loot")), re.IGNORECASE),
    "notes no clone has": re.compile(
        r"\b(?:%s)"
        % "|".join(
            re.escape(_w(n))
            for n in ["dm.SDNIK", "dm.SREPOLEVED", "dm.ngised", "dm.sceps_tnemirepxe", "vsc.selbat_repap"]
        )
    ),
    "the project's own machine": re.compile(r"this project's (?:[\w-]+ )?(?:machine|CPU|box)", re.IGNORECASE),
}
EXEMPT = {".ci/run", "tests/test_product_words.py"}  # CI's wiring; this file lists the words


def is_model_output(name: str) -> bool:
    """A study's translations: a model's words, which may be any word (a held-out caption's "leases", say)."""
    base = name.rsplit("/", 1)[-1]
    return name.startswith("docs/study/") and (
        base == "test.txt" or re.fullmatch(r"heldout\.[\w.-]+\.txt", base) is not None
    )


def tracked_text_files():
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    for name in filter(None, listed.decode().split("\0")):
        path = ROOT / name
        if name in EXEMPT or name.startswith("tests/fixtures/") or is_model_output(name) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield name, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def hits(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        for word, pattern in PATTERNS.items():
            match = pattern.search(line)
            if match:
                yield number, word, match.group(0)


@pytest.mark.parametrize(
    "name, translated",
    [
        ("docs/study/cpu6/study_cpu6.transformer_2x/seed1/heldout.test_2018_flickr.txt", True),
        ("docs/study/cpu/study_cpu.transformer/seed2/test.txt", True),
        ("docs/study/cpu6/README.md", False),
        ("docs/study/cpu6/study_cpu6.transformer/seed1/training.txt", False),
        ("docs/heldout.test.txt", False),
    ],
)
def test_only_a_studys_translations_are_read_as_a_models_words(name, translated):
    assert is_model_output(name) is translated


def test_no_tracked_file_speaks_of_where_or_how_it_is_built():
    found = [
        f"{name}:{number}: {word} ({matched!r})"
        for name, text in tracked_text_files()
        for number, word, matched in hits(text)
    ]
    assert not found, "the product speaks only of itself:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        _w(line)
        for line in [
            "'rorrim-atad' / 'derahs' / '..' / TOOR = RORRIM",
            '"rorrim-atad" / "derahs" / TOOR = x',
            "dm.x/srepap/derahs/.. ees",
            "enihcam UPG a sdnel ecalpkrow sihT",
            "setunim 51 fo tisiv a",
            "ti nur sah UPG a htiw noisses on",
            "gnihton evah senihcam ecived eht",
            "tsil s'loot ecived eht morf",
            "dm.SREPOLEVED ni seton",
            "enihcam eroc-2 s'tcejorp siht no derusaem",
            "UPC IC s'tcejorp siht no",
        ]
    ],
)
def test_the_patterns_catch_the_words_they_list(line):
    assert list(hits(line))


@pytest.mark.parametrize(
    "line",
    [
        _w('")noisses"=epocs(erutxif.tsetyp@'),
        _w("()noisseS.stseuqer = s"),
        "shared layers",
        "the shared stack",
        "outside this project's MT scope",
        "a borrowed GPU node",
        "the device's name",
        "torch.device('cuda')",
        "data_mirror: /data/mirror",
        "silent",
        "talent",
    ],
)
def test_the_patterns_leave_the_products_own_words_alone(line):
    assert not list(hits(line))
