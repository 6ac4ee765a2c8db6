"""Moses tokenization (sacremoses) made identical to `tokenizer.perl`, Perl-identical lowercasing, and the
normalisations the WMT recipes run before tokenizing (one option each, named in a task's `tokenize:` entry):

  normalize_punctuation   Moses normalize-punctuation.perl (sacremoses' MosesPunctNormalizer)
  remove_non_printing     Moses remove-non-printing-char.perl: every \\p{C} character becomes a space
  romanian                Sennrich et al.'s WMT16 normalise-romanian.py + remove-diacritics.py (see ROMANIAN)
  tokenizer               moses | jieba (Chinese word segmentation, then Moses for the Latin parts) | none (the
                          corpus is distributed tokenized: Luong et al.'s WMT14 En-De)

sacremoses 0.2.0 differs from the Perl tokenizer in one place that matters for IWSLT14: the Perl script
(mosesdecoder since 2017, the version fairseq's prepare scripts clone) always splits the period off the *last*
word of a line ("… the u.s." → "… the u.s ."), because a line-final word is unlikely to be a nonbreaking prefix.
sacremoses applies the prefix rules to the last word too and keeps "u.s.". `MosesTokenizer` below restores the Perl
rule; on the IWSLT14 test set this closes all 31 differing lines (tests/test_iwslt14_fairseq.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import regex
import sacremoses

from .. import UserError
from ..settings import Settings

NON_PRINTING = regex.compile(r"\p{C}")
HAN = regex.compile(r"\p{Han}")
# Sennrich et al. 2016 (WMT16 En-Ro): cedilla ş/ţ → comma-below ș/ț, then every Romanian diacritic removed.
ROMANIAN = str.maketrans(
    {
        "\u015e": "S",
        "\u015f": "s",
        "\u0162": "T",
        "\u0163": "t",  # cedilla forms (normalised to comma-below first)
        "\u0218": "S",
        "\u0219": "s",
        "\u021a": "T",
        "\u021b": "t",  # ș ț (comma below)
        "\u0102": "A",
        "\u0103": "a",
        "\u00c2": "A",
        "\u00e2": "a",
        "\u00ce": "I",
        "\u00ee": "i",  # ă â î
    }
)
CEDILLA_TO_COMMA = str.maketrans({"\u015e": "\u0218", "\u015f": "\u0219", "\u0162": "\u021a", "\u0163": "\u021b"})
ENDS_WITH_PERIOD = re.compile(r"^(\S+)\.$")
NUMERIC_START = re.compile(r"^[0-9]+")


class MosesTokenizer(sacremoses.MosesTokenizer):
    """sacremoses' tokenizer with tokenizer.perl's nonbreaking-prefix step (last word split unconditionally)."""

    def handles_nonbreaking_prefixes(self, text: str) -> str:
        tokens = text.split()
        last = len(tokens) - 1
        for i, token in enumerate(tokens):
            match = ENDS_WITH_PERIOD.search(token)
            if match is None:
                continue
            prefix = match.group(1)
            if i == last:
                keep = False  # the Perl rule sacremoses lacks
            elif ("." in prefix and self.isanyalpha(prefix)) or (
                prefix in self.NONBREAKING_PREFIXES and prefix not in self.NUMERIC_ONLY_PREFIXES
            ):
                keep = True
            elif tokens[i + 1] and self.islower(tokens[i + 1][0]):
                keep = True
            else:
                keep = prefix in self.NUMERIC_ONLY_PREFIXES and NUMERIC_START.search(tokens[i + 1]) is not None
            if not keep:
                tokens[i] = prefix + " ."
        return " ".join(tokens)


def normalise_romanian(text: str) -> str:
    """normalise-romanian.py: the cedilla letters ş ţ Ş Ţ (U+015E/F, U+0162/3) become comma-below ș ț Ș Ț."""
    return text.translate(CEDILLA_TO_COMMA)


def remove_romanian_diacritics(text: str) -> str:
    """normalise-romanian.py then remove-diacritics.py: ș ț ă â î (any form) become s t a a i, case kept."""
    return text.translate(ROMANIAN)


def remove_non_printing(text: str) -> str:
    return NON_PRINTING.sub(" ", text)


def perl_lc(text: str) -> str:
    """Moses `lowercase.perl` (Perl's `lc`): like str.lower() but without Python's final-sigma rule."""
    return text.replace("Σ", "σ").lower()


TOKENIZERS = ("moses", "jieba", "none")


@dataclass(frozen=True)
class TokenizeOptions(Settings):
    """How one language side is normalized and tokenized; defaults are prepare-iwslt14.sh's. Built from a JSON
    object given by hand (`lwnmt tokenize --options`) with `from_dict`, which checks each value's type: a string
    "false" would otherwise lowercase."""

    kind = "tokenize option"

    lang: str
    tokenizer: str = "moses"  # moses | jieba | none
    escape: bool = True  # tokenizer.perl escapes &<>'"[]| unless -no-escape
    aggressive_dash_splits: bool = False  # tokenizer.perl -a (off in fairseq's IWSLT recipe)
    lowercase: bool = False
    normalize_apostrophe: bool = False  # prepare-iwslt14.sh: sed "s/’/'/g" on dev/test XML only
    normalize_punctuation: bool = False
    remove_non_printing: bool = False
    romanian: bool = False

    def check(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"tokenizer={self.tokenizer!r}; expected {', '.join(TOKENIZERS)}")

    def normalizer(self):
        """Everything before tokenization; also what detokenized BLEU compares against (refs normalised alike)."""
        steps = []
        if self.normalize_apostrophe:
            steps.append(lambda line: line.replace("’", "'"))
        if self.normalize_punctuation:
            steps.append(sacremoses.MosesPunctNormalizer(lang=self.lang).normalize)
        if self.remove_non_printing:
            steps.append(remove_non_printing)
        if self.romanian:
            steps.append(remove_romanian_diacritics)

        def normalize(line: str) -> str:
            for step in steps:
                line = step(line)
            return line

        return normalize

    def build(self, normalize_only: bool = False):
        """The per-line function for one worker (builds the tokenizer once)."""
        normalize = self.normalizer()
        if normalize_only:
            tokenize = lambda line: line  # noqa: E731
        elif self.tokenizer == "none":  # already tokenized: only the whitespace is normalised
            tokenize = lambda line: " ".join(line.split())  # noqa: E731
        elif self.tokenizer == "jieba":
            tokenize = self._jieba()
        elif self.tokenizer == "moses":
            tokenize = functools.partial(
                MosesTokenizer(lang=self.lang).tokenize,
                escape=self.escape,
                aggressive_dash_splits=self.aggressive_dash_splits,
                return_str=True,
            )
        else:
            raise UserError(f"tokenizer={self.tokenizer!r}; expected {', '.join(TOKENIZERS)}")

        def process(line: str) -> str:
            line = normalize(line)
            out = tokenize(line) if line.strip() else ""  # tokenizer.perl passes blank lines through
            return perl_lc(out) if self.lowercase else out

        return process

    def _jieba(self):
        """jieba's default (HMM) segmentation; words without Chinese characters are then Moses-tokenized, so that
        Latin text, numbers and punctuation inside Chinese sentences are split as on the English side (Moses
        itself would split every Han character)."""
        import logging

        import jieba

        jieba.setLogLevel(logging.WARNING)
        moses = MosesTokenizer(lang="en")

        def segment(line: str) -> str:
            out: list[str] = []
            latin: list[str] = []  # runs of non-Chinese pieces are re-joined as written and Moses-tokenized
            for piece in [*jieba.cut(line), "。"]:
                if HAN.search(piece) or piece == "。":
                    run = "".join(latin).strip()
                    if run:
                        out.append(moses.tokenize(run, escape=self.escape, return_str=True))
                    out.append(piece)
                    latin = []
                else:
                    latin.append(piece)
            return " ".join(out[:-1])

        return segment
