"""Scoring variants: all through sacrebleu; checks of the conventions the papers rely on."""

import math

import pytest
import sacrebleu

from layerwise_nmt import UserError
from layerwise_nmt.scoring.score import (
    ScoreConfig,
    bleu,
    bucket_bleu,
    compound_split,
    paired_bootstrap,
    sign_test,
    seeds_summary,
    t_test,
)

HYP = ["the cat sat on the mat .", "a well-known fact", "Hello World"]
REF = ["the cat sat on a mat .", "a well-known fact", "hello world"]


def test_tokenized_bleu_is_sacrebleu_with_tokenize_none():
    ours = bleu(HYP, [REF], ScoreConfig())["bleu"]
    assert math.isclose(ours, sacrebleu.corpus_bleu(HYP, [REF], tokenize="none", force=True).score)
    lowered = bleu(HYP, [REF], ScoreConfig(lowercase=True))
    assert lowered["bleu"] > ours and "case:lc" in lowered["signature"]


def test_compound_split_follows_t2t_convention():
    assert compound_split("a well-known long-term fact") == "a well ##AT##-##AT## known long ##AT##-##AT## term fact"
    assert compound_split("a-b-c") == "a ##AT##-##AT## b-c"  # non-overlapping, as Perl's s///g
    assert "compound-split" in bleu(HYP, [REF], ScoreConfig(compound_split=True))["signature"]


def test_buckets_partition_the_sentences():
    sources = ["one two", "one two three four five", "x " * 12]
    buckets = bucket_bleu(HYP, [REF], sources, ScoreConfig(buckets=(3, 10)))
    assert [b["sentences"] for b in buckets] == [1, 1, 1]
    assert [b["bucket"] for b in buckets] == ["[0, 3)", "[3, 10)", ">= 10"]


def test_right_closed_buckets_are_dou_figure_4s():
    """(0,15], (15,30], (30,45], >45: a sentence of exactly 15 words is in the first bucket, 16 in the second."""
    lengths = [1, 15, 16, 30, 31, 45, 46]
    sources = [" ".join(["w"] * n) for n in lengths]
    hyps = refs = [f"sentence {i}" for i in range(len(lengths))]
    dou = bucket_bleu(hyps, [refs], sources, ScoreConfig(buckets=(15, 30, 45), buckets_right_closed=True))
    assert [b["bucket"] for b in dou] == ["(0, 15]", "(15, 30]", "(30, 45]", "> 45"]
    assert [b["sentences"] for b in dou] == [2, 2, 2, 1]
    default = bucket_bleu(hyps, [refs], sources, ScoreConfig(buckets=(15, 30, 45)))
    assert [b["sentences"] for b in default] == [1, 2, 2, 2]  # [0,15) [15,30) [30,45) >=45


def test_mismatched_reference_length_is_an_error():
    with pytest.raises(UserError, match="3 hypotheses but reference 1 has 2 lines"):
        bleu(HYP, [REF[:2]], ScoreConfig())


def test_significance_helpers():
    refs = [[f"sentence number {i} is here ." for i in range(60)]]
    good = [f"sentence number {i} is here ." for i in range(60)]
    bad = [f"sentence {i} here" for i in range(60)]
    result = paired_bootstrap(bad, good, refs, ScoreConfig(), samples=200)
    assert result["p_value"] < 0.05
    assert seeds_summary([35.0, 36.0, 37.0]) == {"n": 3, "mean": 36.0, "sd": 1.0}
    assert t_test([30.0, 30.1, 29.9], [35.0, 35.2, 34.8]) < 0.01
    assert t_test([30.0], [35.0, 35.2]) is None


def test_score_files_give_sacrebleus_chrf_beside_bleu(tmp_path):
    from layerwise_nmt.scoring.score import score_files

    (tmp_path / "hyp").write_text("\n".join(HYP) + "\n")
    (tmp_path / "ref").write_text("\n".join(REF) + "\n")
    result = score_files(str(tmp_path / "hyp"), [str(tmp_path / "ref")], ScoreConfig(lowercase=True))
    expected = sacrebleu.corpus_chrf([h.lower() for h in HYP], [[r.lower() for r in REF]]).score
    assert math.isclose(result["chrf"], expected)
    assert result["chrf_signature"].startswith("nrefs:1|case:lc|eff:yes|nc:6|nw:0")


def test_half_length_hypothesis_is_refused_not_read_as_two_references(tmp_path, capsys):
    """Issue 30 item 2: 500 hypotheses against a 1,000-line reference used to score as nrefs:2."""
    from layerwise_nmt.cli import main

    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("".join(f"sentence {i} .\n" for i in range(500)))
    ref.write_text("".join(f"sentence {i % 500} .\n" for i in range(1000)))
    with pytest.raises(SystemExit):
        main(["score", str(hyp), "--ref", str(ref), "--out", str(tmp_path / "score.json")])
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{hyp} has 500 lines but reference {ref} has 1,000" in err
    assert not (tmp_path / "score.json").exists()
    # several references are asked for: one file each, or one file with --stacked-refs
    main(["score", str(hyp), "--ref", str(ref), "--stacked-refs", "--out", str(tmp_path / "score.json")])
    assert "nrefs:2" in capsys.readouterr().out


def test_a_score_spec_gives_the_settings_and_labels_the_score(tmp_path, capsys):
    import json

    from layerwise_nmt.cli import main
    from layerwise_nmt.job_specs import ScoreSpec

    (tmp_path / "hyp").write_text("\n".join(HYP) + "\n")
    (tmp_path / "ref").write_text("\n".join(REF) + "\n")
    spec = ScoreSpec("demo.transformer", "multi30k_deen", 2, "test", {"lowercase": True}).to_json()
    main(["score", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), "--spec", spec, "--out", str(tmp_path / "s")])
    score = json.loads((tmp_path / "s").read_text())
    assert score["options"]["lowercase"] is True and "case:lc" in score["signature"]
    assert {k: score[k] for k in ("experiment", "task", "seed", "split")} == {
        "experiment": "demo.transformer",
        "task": "multi30k_deen",
        "seed": 2,
        "split": "test",
    }
    with pytest.raises(SystemExit):
        main(
            [
                "score",
                str(tmp_path / "hyp"),
                "--ref",
                str(tmp_path / "ref"),
                "--spec",
                spec,
                "--options",
                "{}",
                "--out",
                str(tmp_path / "s2"),
            ]
        )
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--spec: it gives the scoring settings; expected no --options beside it")
    )


DETOK = [f"A man rides horse number {i}." for i in range(20)]
TOK = [f"A man rides horse number {i} ." for i in range(20)]


@pytest.mark.parametrize(
    "tokenize, hyps, warned",
    [
        ("none", DETOK, "looks detokenized"),
        ("13a", TOK, "looks tokenized"),
        ("none", TOK, None),
        ("13a", DETOK, None),
        ("none", DETOK[:5], None),
    ],
)  # too few lines ending in a period to tell
def test_score_warns_in_one_line_when_the_text_does_not_suit_the_metric(tmp_path, caplog, tokenize, hyps, warned):
    from layerwise_nmt.scoring.score import score_files

    (tmp_path / "hyp").write_text("\n".join(hyps) + "\n")
    (tmp_path / "ref").write_text("\n".join(hyps) + "\n")
    score_files(str(tmp_path / "hyp"), [str(tmp_path / "ref")], ScoreConfig(tokenize=tokenize))
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if warned is None:
        assert messages == []
    else:  # ours, once per file and one line each; sacrebleu's three-line warning is not printed
        assert len(messages) == 2 and all(warned in m and "\n" not in m for m in messages)
        assert str(tmp_path / "hyp") in messages[0]


def test_the_scoring_settings_know_sacrebleus_tokenizers():
    """ScoreConfig checks `tokenize` without importing sacrebleu (a workflow driver may not have it)."""
    import sacrebleu

    from layerwise_nmt.scoring.config import SACREBLEU_TOKENIZERS

    assert SACREBLEU_TOKENIZERS == tuple(sacrebleu.BLEU.TOKENIZERS)


@pytest.mark.parametrize("test", [paired_bootstrap, sign_test])
def test_a_significance_test_refuses_systems_of_different_lengths(test):
    """A baseline decoded from another test set (or cut short) is not compared line by line with what is there."""
    with pytest.raises(UserError, match="2 lines against the baseline's 3"):
        test(HYP, HYP[:2], [REF], ScoreConfig())
    with pytest.raises(UserError, match="reference 1 has 2 lines"):
        test(HYP, HYP, [REF[:2]], ScoreConfig())


def test_length_buckets_need_one_source_line_per_translation_and_increasing_edges(tmp_path):
    """A source of another length put sentences in the wrong buckets (or an IndexError); edges out of order
    counted a sentence in two buckets."""
    from layerwise_nmt.scoring.score import score_files

    hyp, ref, src = tmp_path / "hyp.txt", tmp_path / "ref.txt", tmp_path / "src.txt"
    hyp.write_text("\n".join(HYP) + "\n")
    ref.write_text("\n".join(REF) + "\n")
    src.write_text("ein satz\n")
    with pytest.raises(UserError, match=f"{src} has 1 lines but {hyp} has 3"):
        score_files(str(hyp), [str(ref)], ScoreConfig(buckets=(3,)), str(src))
    with pytest.raises(UserError, match=r"buckets=\[5, 3\]; expected edges in increasing order"):
        ScoreConfig.from_dict({"buckets": [5, 3]})
