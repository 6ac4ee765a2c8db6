"""The decoding settings (a config's `decode:` section, `lwnmt translate --options`) and the choice of a tuned length
penalty, importable without torch or numpy: a workflow driver that has neither checks a config's settings with this
class. Beam search itself is in decode.py."""

from __future__ import annotations

from dataclasses import dataclass

from .. import UserError
from ..settings import AMP_CHOICES, Settings, setting


@dataclass
class BeamConfig(Settings):
    key_noun = "decoding setting"

    beam: int = setting(5, ge=1)
    lenpen: float = 1.0
    length_penalty: str = "fairseq"  # fairseq | gnmt
    max_len_a: float = setting(1.2, ge=0)  # max output length = a·src_len + b (fairseq's --max-len-a/-b)
    max_len_b: int = setting(10, ge=0)
    # fairseq --min-len: </s> is barred before this many tokens (1: no empty translation)
    min_len: int = setting(1, ge=0)
    batch_size: int = setting(64, ge=1)  # sentences per batch (fairseq --batch-size)
    amp: str = "auto"  # auto | none | bf16 | bf16-weights | fp16, as in training (precision.py)
    # α values to try on the validation set; the best one (BLEU) replaces `lenpen` for every other decoding of the
    # run (the workflow's pick_lenpen step). Empty: decode with `lenpen` as given.
    tune_lenpen: tuple[float, ...] = setting((), ge=0)

    @classmethod
    def prepare(cls, values: dict) -> dict:
        if "tune_lenpen" in values:  # a list of numbers ≥ 0 by now (Settings.check_types)
            values["tune_lenpen"] = tuple(float(a) for a in values["tune_lenpen"])
        return values

    def check(self) -> None:
        if self.length_penalty not in ("fairseq", "gnmt"):
            raise UserError(f"length_penalty={self.length_penalty!r}; expected fairseq or gnmt")
        if self.amp not in AMP_CHOICES:
            raise UserError(f"amp={self.amp!r}; expected {', '.join(AMP_CHOICES)}")
        if len(set(self.tune_lenpen)) != len(self.tune_lenpen):
            raise UserError(f"tune_lenpen={list(self.tune_lenpen)}; expected distinct α values")

    def penalty(self, length: int) -> float:
        if self.length_penalty == "gnmt":
            return ((5.0 + length) / 6.0) ** self.lenpen
        return float(length) ** self.lenpen


def pick_lenpen(bleu_by_lenpen: dict[float, float]) -> float:
    """The α with the highest validation BLEU; a tie goes to the α listed first (the grid's order)."""
    if not bleu_by_lenpen:
        raise UserError("no validation scores to tune the length penalty on")
    return max(bleu_by_lenpen, key=lambda a: (bleu_by_lenpen[a], -list(bleu_by_lenpen).index(a)))
