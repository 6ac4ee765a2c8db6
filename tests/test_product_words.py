"""The before-stop check: the repository speaks only of itself. No tracked text file describes where or how the
project is built, or points at a folder a clone does not have. It looks, in every git-tracked text file except
`.ci/run` (CI's own wiring, which may name CI's surroundings), tests/fixtures/ (recorded data) and binary files, for:

- `../shared`, or a path built as `"shared" / "data-mirror"`: a folder beside the checkout that no clone has
  (the data mirror is `data_mirror:` or `$LWNMT_DATA_MIRROR`, wherever it lives);
- `workplace`;
- `session`/`sessions` in lowercase, outside pytest's `scope="session"` (`requests.Session` is capitalised);
- `visit`/`visits`, `lease`/`leases`/`leased`, `lent`, `lend`/`lends`: a machine someone lends;
- `device machine(s)`, `device tool(s)`: the GPU tooling speaks of a GPU node;
- `KINDS.md`, `DEVELOPERS.md`, `design.md`, `experiment_specs.md`, `paper_tables.csv`: notes no clone has;
- `this project's machine`, `this project's 2-core machine`, `this project's CI CPU` and the like.

A hit fails the test naming file:line and the word.
"""

import re
import subprocess

import pytest

from conftest import ROOT

PATTERNS = {
    "a folder beside the checkout": re.compile(r"\.\./shared|[\"']shared[\"']\s*/\s*[\"']data-mirror"),
    "workplace": re.compile(r"\bworkplace", re.IGNORECASE),
    "session": re.compile(r"(?<!scope=\")(?<!scope=')\bsessions?\b"),
    "a lent machine": re.compile(r"\b(?:visits?|leases?|leased|lent|lends?)\b", re.IGNORECASE),
    "device machine": re.compile(r"\bdevice (?:machine|tool)s?\b", re.IGNORECASE),
    "notes no clone has": re.compile(r"\b(?:KINDS\.md|DEVELOPERS\.md|design\.md|experiment_specs\.md|"
                                     r"paper_tables\.csv)"),
    "the project's own machine": re.compile(r"this project's (?:[\w-]+ )?(?:machine|CPU|box)", re.IGNORECASE),
}
EXEMPT = {".ci/run", "tests/test_product_words.py"}  # CI's wiring; this file lists the words


def tracked_text_files():
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    for name in filter(None, listed.decode().split("\0")):
        path = ROOT / name
        if name in EXEMPT or name.startswith("tests/fixtures/") or not path.is_file():
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


def test_no_tracked_file_speaks_of_where_or_how_it_is_built():
    found = [f"{name}:{number}: {word} ({matched!r})" for name, text in tracked_text_files()
             for number, word, matched in hits(text)]
    assert not found, "the product speaks only of itself:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "MIRROR = ROOT / '..' / 'shared' / 'data-mirror'", 'x = ROOT / "shared" / "data-mirror"',
    "see ../shared/papers/x.md", "This workplace lends a GPU machine", "a visit of 15 minutes",
    "no session with a GPU has run it", "the device machines have nothing", "from the device tool's list",
    "notes in DEVELOPERS.md", "measured on this project's 2-core machine", "on this project's CI CPU",
])
def test_the_patterns_catch_the_words_they_list(line):
    assert list(hits(line))


@pytest.mark.parametrize("line", [
    '@pytest.fixture(scope="session")', "s = requests.Session()", "shared layers", "the shared stack",
    "outside this project's MT scope", "a borrowed GPU node", "the device's name", "torch.device('cuda')",
    "data_mirror: /data/mirror", "silent", "talent",
])
def test_the_patterns_leave_the_products_own_words_alone(line):
    assert not list(hits(line))
