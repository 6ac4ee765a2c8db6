"""Scoring with sacrebleu (never a hand-written BLEU), in the variants the four papers use.

- tokenized BLEU as multi-bleu.perl computes it: sacrebleu with tokenize="none" on Moses-tokenized text;
- case-insensitive (`lowercase`), as LWC (De-En) and MLRF report;
- detokenized sacreBLEU (13a) with its signature, as LWC reports WMT16 En-Ro;
- compound splitting for WMT En-De (tensor2tensor's get_ende_bleu.sh: a-b → a ##AT##-##AT## b);
- chrF (sacrebleu's chrF2, character 6-grams, β = 2) beside every BLEU, on the same text (before compound
  splitting, which only BLEU's tokens need);
- BLEU per source-length bucket (GCA Fig. 3, Dou Fig. 4); paired bootstrap resampling (sacrebleu's PairedTest);
  mean ± sd over seeds with Welch's t-test (GCA's p < 0.01).
"""

from __future__ import annotations

import logging
import re
import statistics

from sacrebleu.metrics import BLEU, CHRF

from .. import UserError
from ..data.io import read_lines
from .config import TOKENIZED, ScoreConfig

COMPOUND = re.compile(r"(\S)-(\S)")
MIN_PERIOD_LINES = 10  # lines ending in a period needed before judging whether a file is tokenized

log = logging.getLogger(__name__)


def compound_split(line: str) -> str:
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def metric(cfg: ScoreConfig) -> BLEU:
    # sacrebleu's own tokenized-input warning is three lines and one way only: `warn_if_mistokenized` replaces it
    return BLEU(tokenize=cfg.tokenize, lowercase=cfg.lowercase, force=True)


def looks_tokenized(lines: list[str]) -> bool | None:
    """sacrebleu's test (metrics/base.py: a line ending in " ." is tokenized text), read both ways: True when most
    lines that end in a period end in a detached one, False when most end in one attached to the word, None when
    fewer than MIN_PERIOD_LINES lines end in a period (too few to tell)."""
    detached = sum(line.endswith(" .") for line in lines)
    attached = sum(line.endswith(".") and not line.endswith(" .") for line in lines)
    if detached + attached < MIN_PERIOD_LINES:
        return None
    return detached > attached


def warn_if_mistokenized(path: str, lines: list[str], cfg: ScoreConfig) -> None:
    """One line when a file looks detokenized for tokenized BLEU (tokenize: none), or tokenized for a metric that
    tokenizes itself (13a, intl, ...): either scores several points off without failing."""
    tokenized, wanted = looks_tokenized(lines), cfg.tokenize == TOKENIZED
    if tokenized is None or tokenized == wanted:
        return
    seen, fix = (
        ("detokenized", "score the tokenized output (.txt) or set tokenize: 13a")
        if wanted
        else ("tokenized", "score the detokenized output (.detok) or set tokenize: none")
    )
    log.warning(
        f"{path} looks {seen} (sacrebleu's test: lines ending in ' .' vs '.'), but tokenize="
        f"{cfg.tokenize} expects {'tokenized' if wanted else 'detokenized'} text: {fix}"
    )


def prepare(lines: list[str], cfg: ScoreConfig) -> list[str]:
    return [compound_split(line) for line in lines] if cfg.compound_split else lines


def check_references(hyps: list[str], refs: list[list[str]]) -> None:
    for i, ref in enumerate(refs):
        if len(ref) != len(hyps):
            raise UserError(f"{len(hyps)} hypotheses but reference {i + 1} has {len(ref)} lines")


def bleu(hyps: list[str], refs: list[list[str]], cfg: ScoreConfig) -> dict:
    """Corpus BLEU of hypotheses against one or more reference streams."""
    check_references(hyps, refs)
    m = metric(cfg)
    result = m.corpus_score(prepare(hyps, cfg), [prepare(r, cfg) for r in refs])
    return {
        "bleu": result.score,
        "precisions": result.precisions,
        "bp": result.bp,
        "sys_len": result.sys_len,
        "ref_len": result.ref_len,
        "signature": str(m.get_signature()) + ("|compound-split" if cfg.compound_split else ""),
    }


def bucket_bleu(hyps: list[str], refs: list[list[str]], sources: list[str], cfg: ScoreConfig) -> list[dict]:
    """BLEU per source-length bucket in source words: [0, e1), [e1, e2), …, [e_last, ∞), or with
    buckets_right_closed (0, e1], (e1, e2], …, (e_last, ∞)."""
    edges = list(cfg.buckets)
    bounds = list(zip([0] + edges, edges + [None], strict=True))
    shift = 1 if cfg.buckets_right_closed else 0  # (a, b] = [a + 1, b + 1) for whole word counts
    out = []
    for low, high in bounds:
        idx = [
            i
            for i, s in enumerate(sources)
            if len(s.split()) >= low + shift and (high is None or len(s.split()) < high + shift)
        ]
        if cfg.buckets_right_closed:
            label = f"({low}, {high}]" if high is not None else f"> {low}"
        else:
            label = f"[{low}, {high})" if high is not None else f">= {low}"
        if not idx:
            out.append({"bucket": label, "low": low, "high": high, "sentences": 0, "bleu": None})
            continue
        score = bleu([hyps[i] for i in idx], [[r[i] for i in idx] for r in refs], cfg)["bleu"]
        out.append({"bucket": label, "low": low, "high": high, "sentences": len(idx), "bleu": score})
    return out


def measured(cfg: ScoreConfig, measure: str):
    """(sacrebleu metric, the text it reads) of a score.json measure: BLEU on compound-split text where the score
    splits compounds, chrF on the text as it is (as `score_file` computes them)."""
    if measure == "chrf":
        return CHRF(lowercase=cfg.lowercase), (lambda lines: lines)
    return metric(cfg), (lambda lines: prepare(lines, cfg))


def check_paired(baseline: list[str], system: list[str], refs: list[list[str]]) -> None:
    """A paired test compares line i of each: the two systems and every reference hold as many lines."""
    if len(system) != len(baseline):
        raise UserError(
            f"a paired test of {len(system)} lines against the baseline's {len(baseline)}; expected the same test "
            f"set, decoded whole, for both"
        )
    check_references(system, refs)


def paired_bootstrap(
    baseline: list[str],
    system: list[str],
    refs: list[list[str]],
    cfg: ScoreConfig,
    samples: int = 1000,
    measure: str = "bleu",
) -> dict:
    """sacrebleu's paired bootstrap resampling (Koehn 2004): p-value of `system` vs `baseline` in BLEU (or chrF)."""
    from sacrebleu.significance import PairedTest

    check_paired(baseline, system, refs)
    scorer, text = measured(cfg, measure)
    test = PairedTest(
        [("baseline", text(baseline)), ("system", text(system))],
        {measure: scorer},
        [text(r) for r in refs],
        test_type="bs",
        n_samples=samples,
    )
    _, results = test()
    system_result = next(column for name, column in results.items() if name != "System")[1]  # BLEU or chrF2
    assert not isinstance(system_result, str)  # the system's row (the baseline's holds the name)
    return {"p_value": system_result.p_value, "mean": system_result.mean, "ci": system_result.ci, "samples": samples}


def sign_test(
    baseline: list[str], system: list[str], refs: list[list[str]], cfg: ScoreConfig, measure: str = "bleu"
) -> dict:
    """Collins et al. 2005's sign test, as Dou et al. use it: per sentence, does the system's sentence BLEU (or
    chrF) beat the baseline's? Ties are dropped; the two-sided binomial p-value of the wins among the rest."""
    from scipy.stats import binomtest

    check_paired(baseline, system, refs)
    m, text = measured(cfg, measure)
    if measure == "bleu":
        m = BLEU(tokenize=cfg.tokenize, lowercase=cfg.lowercase, force=True, effective_order=True)
    wins = losses = 0
    for i, (b, s) in enumerate(zip(text(baseline), text(system), strict=True)):
        ref = [text([r[i]])[0] for r in refs]
        delta = m.sentence_score(s, ref).score - m.sentence_score(b, ref).score
        wins, losses = wins + (delta > 0), losses + (delta < 0)
    p = binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
    return {"wins": wins, "losses": losses, "ties": len(system) - wins - losses, "p_value": float(p)}


def seeds_summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "mean": statistics.fmean(values) if values else None,
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0 if values else None,
    }


def t_test(baseline: list[float], system: list[float]) -> float | None:
    """Two-sided Welch's t-test p-value over per-seed scores (None with fewer than two seeds on a side)."""
    if len(baseline) < 2 or len(system) < 2:
        return None
    from scipy.stats import ttest_ind

    return float(ttest_ind(system, baseline, equal_var=False).pvalue)


def t_test_paired(baseline: list[float], system: list[float]) -> float | None:
    """Two-sided paired t-test p-value over per-seed scores, seed k against seed k (None with fewer than two pairs,
    or when every pair differs by the same amount: no variance to test)."""
    if len(baseline) < 2 or len(baseline) != len(system):
        return None
    import warnings

    from scipy.stats import ttest_rel

    with warnings.catch_warnings():  # equal differences: scipy warns, then returns nan, which is our None
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(ttest_rel(system, baseline).pvalue)
    return None if p != p else p


def reference_streams(path: str, n: int, stacked: bool = False, hyp_path: str = "the hypotheses") -> list[list[str]]:
    """The references in one file: its N lines (one reference), or with `stacked` K × N lines holding K references
    one after the other (the workflow's multi-reference NIST sets). Stacking is never guessed from the line count:
    a hypothesis file of half a reference's length would otherwise score as if against two references."""
    lines = list(read_lines(path))
    if stacked and n and len(lines) % n == 0 and lines:
        return [lines[k : k + n] for k in range(0, len(lines), n)]
    if not stacked and len(lines) == n:
        return [lines]
    expected = (
        "a multiple of that (--stacked-refs: references one after the other)"
        if stacked
        else "the same count (several references: one --ref file each)"
    )
    raise UserError(f"{hyp_path} has {n:,} lines but reference {path} has {len(lines):,}; expected {expected}")


BPE_JOINER = re.compile(r"\S+@@(?= |$)")  # subword-nmt's continuation marker: "Wort@@ teile"


def refuse_bpe(path: str, lines: list[str]) -> None:
    """A UserError naming the file and line when text is still BPE-segmented: `translate` writes .bpe beside .txt
    and .detok, and scoring the .bpe (or a BPE'd reference) gives a plausible BLEU that compares subwords."""
    for number, line in enumerate(lines, start=1):
        if joined := BPE_JOINER.search(line):
            raise UserError(
                f"{path}:{number}: BPE-segmented text ('@@ ' joins subwords: "
                f"{joined.group(0)!r}); score the output with BPE removed "
                f"(.txt, or .detok for detokenized BLEU), or pass --allow-bpe to score subwords"
            )


def refuse_byte_order_mark(path: str, lines: list[str]) -> None:
    """A UserError when a file begins with a UTF-8 byte-order mark (Windows editors write one): sacrebleu would
    score it as part of the first word, a lower BLEU than the text's with nothing said."""
    if lines and lines[0].startswith("\ufeff"):
        raise UserError(
            f"{path}:1: begins with a UTF-8 byte-order mark (U+FEFF); expected plain UTF-8 text "
            f"(remove it: sed -i '1s/^\\xEF\\xBB\\xBF//' {path})"
        )


def score_files(
    hyp_path: str,
    ref_paths: list[str],
    cfg: ScoreConfig,
    src_path: str | None = None,
    stacked_refs: bool = False,
    allow_bpe: bool = False,
) -> dict:
    hyps = list(read_lines(hyp_path))
    streams = [(p, stream) for p in ref_paths for stream in reference_streams(p, len(hyps), stacked_refs, hyp_path)]
    refs = [stream for _, stream in streams]
    if not hyps:  # sacrebleu fails on an empty corpus with an IndexError
        raise UserError(
            f"{hyp_path}: no lines to score (and {ref_paths[0]} has none either); expected one "
            f"translation per reference line"
        )
    for path, lines in [(hyp_path, hyps), *streams]:
        refuse_byte_order_mark(path, lines)
        if not allow_bpe:
            refuse_bpe(path, lines)
    for path, lines in [(hyp_path, hyps), (ref_paths[0], refs[0])]:
        warn_if_mistokenized(path, lines, cfg)
    result = {
        "hyp": hyp_path,
        "refs": ref_paths,
        "stacked_refs": stacked_refs,
        "references": len(refs),
        **bleu(hyps, refs, cfg),
    }
    chrf = CHRF(lowercase=cfg.lowercase)
    result["chrf"], result["chrf_signature"] = chrf.corpus_score(hyps, refs).score, str(chrf.get_signature())
    if cfg.buckets:
        if src_path is None:
            raise UserError("length buckets need the source file")
        sources = list(read_lines(src_path))
        if len(sources) != len(hyps):
            raise UserError(
                f"{src_path} has {len(sources):,} lines but {hyp_path} has {len(hyps):,}; expected the source of "
                f"each translation, for the length buckets"
            )
        result["buckets"] = bucket_bleu(hyps, refs, sources, cfg)
    return result
