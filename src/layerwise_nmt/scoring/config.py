"""The scoring settings (a config's `score:` section, `lwnmt score --options`), importable without sacrebleu, torch or
numpy: a workflow driver that has none of them checks a config's settings with this class. Scoring is in score.py."""

from __future__ import annotations

from dataclasses import dataclass

from .. import UserError
from ..settings import Settings, setting

# sacrebleu.BLEU.TOKENIZERS of the pinned sacrebleu (tests/test_score.py checks they agree)
SACREBLEU_TOKENIZERS = (
    "none",
    "zh",
    "13a",
    "intl",
    "char",
    "ja-mecab",
    "ko-mecab",
    "spm",
    "flores101",
    "flores200",
    "spBLEU-1K",
)


TOKENIZED = "none"  # `tokenize:` that scores the tokenized text as it is (multi-bleu.perl), the default


def tokenized(score: dict) -> bool:
    """Whether a config's `score:` settings score tokenized text (its `tokenize` left out or "none")."""
    return score.get("tokenize", TOKENIZED) == TOKENIZED


@dataclass
class ScoreConfig(Settings):
    key_noun = "scoring setting"

    tokenize: str = TOKENIZED  # none = multi-bleu.perl on tokenized text; 13a = sacreBLEU on detokenized text
    lowercase: bool = False
    compound_split: bool = False
    buckets: tuple[int, ...] = setting((), ge=1)  # source-length bucket edges in words, e.g. (10, 20, 30, 40, 50)
    # [0, e1), [e1, e2), …, ≥ e_last by default; right_closed: (0, e1], (e1, e2], …, > e_last (Dou et al.'s Fig. 4
    # labels: a 15-word sentence is in (0, 15], not in the next bucket)
    buckets_right_closed: bool = False

    @classmethod
    def prepare(cls, values: dict) -> dict:
        if "buckets" in values:
            values["buckets"] = tuple(values["buckets"])
        return values

    def check(self) -> None:
        if self.tokenize not in SACREBLEU_TOKENIZERS:
            raise UserError(f"tokenize={self.tokenize!r}; sacrebleu knows {', '.join(SACREBLEU_TOKENIZERS)}")
        if list(self.buckets) != sorted(set(self.buckets)):  # overlapping buckets would count a sentence twice
            raise UserError(f"buckets={list(self.buckets)}; expected edges in increasing order, e.g. [10, 20, 30]")
