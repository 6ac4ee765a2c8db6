import pytest

from layerwise_nmt.data.parallel import map_lines
from layerwise_nmt.data.tokenize import TokenizeOptions, perl_lc


def tok(line, lang="en", **kw):
    return TokenizeOptions(lang, **kw).build()(line)


@pytest.mark.parametrize(
    "line,expected",
    [
        ("But those are all the roads in the U.S.", "But those are all the roads in the U.S ."),  # last word: split
        ("The number is 70.", "The number is 70 ."),
        ("Dr. Smith came home.", "Dr. Smith came home ."),  # nonbreaking prefix mid-line: kept
        ("Wait for it...", "Wait for it ..."),  # multi-dots are not a sentence-final period
        ('He said "no" & left.', "He said &quot; no &quot; &amp; left ."),  # escaping on
        ("a well-known fact", "a well-known fact"),  # no aggressive dash splits
    ],
)
def test_matches_tokenizer_perl(line, expected):
    assert tok(line) == expected


def test_aggressive_dash_and_no_escape_options():
    assert tok('a well-known "fact"', aggressive_dash_splits=True, escape=False) == 'a well @-@ known " fact "'


def test_apostrophe_normalization_only_when_asked():
    assert tok("It’s", normalize_apostrophe=True) == "It &apos;s"
    assert "’" in tok("It’s")


def test_lowercase_is_perl_lc_without_final_sigma():
    assert perl_lc("ΟΔΟΣ Über") == "οδοσ über"  # Python's str.lower() would give a final ς
    assert tok("Über Alles.", lang="de", lowercase=True) == "über alles ."


def test_blank_lines_pass_through():
    assert tok("   ") == ""


@pytest.mark.system
def test_two_workers_give_identical_output():
    lines = [f"Line {i}: the U.S. and Dr. No, {i}." for i in range(5000)]
    options = TokenizeOptions("en", lowercase=True)
    assert map_lines(options.build, lines, workers=2) == map_lines(options.build, lines)
