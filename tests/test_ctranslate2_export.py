"""`lwnmt export --format ctranslate2`: a plain Transformer, ours or imported from fairseq, post-norm and pre-norm,
with shared and with separate embeddings, scores and decodes in CTranslate2 as with our own decoder (and, for the
fairseq models of tests/fixtures/fairseq, as fairseq-generate did); the papers' models are refused in one line, and
so is a missing ctranslate2 package, with the command that installs it."""

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import TINY
from layerwise_nmt import UserError
from layerwise_nmt.inference import export
from layerwise_nmt.training import checkpoint
from layerwise_nmt.inference.ctranslate2_export import INSTALL_HINT, convert
from layerwise_nmt.data.io import read_lines
from layerwise_nmt.data.vocab import Dictionary
from layerwise_nmt.inference.decode import BeamConfig, beam_search
from layerwise_nmt.inference.fairseq_import import import_fairseq
from layerwise_nmt.models import build

FIXTURE = Path(__file__).parent / "fixtures" / "fairseq"
LIMIT = 60  # our max_len_b (with max_len_a 0); every hypothesis compared must end before it
# Ours (fairseq's recipe: shared, post-norm) and the other corner (separate vocabularies and embeddings, pre-norm,
# an output bias, unscaled embeddings); fairseq's two fixture models give the other two corners with fairseq's
# position table and offset.
OURS = {
    "ours_shared_post": ({"tie": "all", "norm": "post"}, False),
    "ours_separate_pre": ({"tie": "none", "norm": "pre", "output_bias": True, "scale_embedding": False}, True),
}
CASES = [*OURS, "fairseq_shared_post", "fairseq_separate_pre"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Matrices this small gain nothing from a second thread, and lose a hundredfold when the other core is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def vocabulary(prefix: str, words: int) -> Dictionary:
    return Dictionary.build(Counter({f"{prefix}{i}": 100 - i for i in range(words)}))


def trained(settings: dict, src: Dictionary, tgt: Dictionary, steps: int = 100):
    """A tiny Transformer trained briefly to reverse a sentence (mapping each word into the target vocabulary), so
    that it ends its hypotheses and never ranks <pad> high, as a trained model does."""
    torch.manual_seed(0)
    model = build("transformer", {**TINY["transformer"], "src_vocab": len(src), "tgt_vocab": len(tgt), **settings})
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        train_step(model, optimizer, src, tgt)
    return model.eval()


def train_step(model, optimizer, src: Dictionary, tgt: Dictionary) -> None:
    source = torch.randint(4, len(src), (16, int(torch.randint(2, 9, ()))))
    target = (4 + (source - 4) % (len(tgt) - 4)).flip(1)
    eos = torch.full((16, 1), src.eos)
    logits = model(torch.cat([source, eos], 1), torch.cat([eos, target], 1))
    loss = F.cross_entropy(logits.transpose(1, 2), torch.cat([target, eos], 1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def model_dir(model, src: Dictionary, tgt: Dictionary, where: Path, name: str = "transformer") -> Path:
    """`model` (of family `name`) as our model directory, as `lwnmt export` writes it."""
    where.mkdir(parents=True)
    src.save(where / "dict.src.txt")
    tgt.save(where / "dict.tgt.txt")
    checkpoint.save(
        where / "model.pt",
        {
            "model": model.state_dict(),
            "model_name": name,
            "model_config": model.config.to_dict(),
            "dictionaries": checkpoint.dictionaries(src, tgt),
        },
    )
    return export.write(
        where / "model.pt",
        where / "dir",
        "de",
        "en",
        where / "dict.src.txt",
        where / "dict.tgt.txt",
        None,
        {},
        {"beam": 5},
        {},
    )


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """name → (our model, source and target dictionaries, the CTranslate2 directory, a few sources as token lists)."""
    pytest.importorskip("ctranslate2", reason="the optional dependency (make test installs it)")
    from layerwise_nmt.inference.decode import load_model

    root, made = tmp_path_factory.mktemp("ct2"), {}
    for name, (settings, separate) in OURS.items():
        src = vocabulary("w", 44)
        tgt = vocabulary("v", 26) if separate else src
        model = trained(settings, src, tgt)
        sources = [[src.symbols[i] for i in torch.randint(4, len(src), (n,)).tolist()] for n in (2, 3, 5, 7, 8, 4)]
        made[name] = (model, src, tgt, convert(model_dir(model, src, tgt, root / name), root / f"{name}-ct2"), sources)
    lines = list(read_lines(FIXTURE / "test.de"))
    for name in ("shared_post", "separate_pre"):
        model_pt = import_fairseq(
            str(FIXTURE / name / "checkpoint.pt"), str(FIXTURE / name), "de", "en", str(root / name)
        )
        src, tgt = (Dictionary.load(root / name / f"dict.{lang}.txt") for lang in ("de", "en"))
        exported = export.write(model_pt, root / f"{name}-dir", "de", "en", src.path, tgt.path, None, {}, {}, {})
        made[f"fairseq_{name}"] = (
            load_model(model_pt),
            src,
            tgt,
            convert(exported, root / f"{name}-ct2"),
            [line.split() for line in lines[:8]],
        )
    return made


def translator(directory: Path):
    import ctranslate2

    return ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)


@pytest.mark.parametrize("name", CASES)
def test_per_token_log_probabilities_agree_with_ours(converted, name):
    model, src, tgt, directory, sources = converted[name]
    # forced targets: each source's words mapped into the target vocabulary, and the reverse of that
    targets = [[tgt.symbols[4 + src.index.get(w, 4) % (len(tgt) - 4)] for w in s] for s in sources]
    targets += [list(reversed(t)) for t in targets]
    results = translator(directory).score_batch(sources * 2, targets)
    gap = 0.0
    for source, target, result in zip(sources * 2, targets, results, strict=True):
        src_ids = torch.tensor([src.encode(" ".join(source))])
        ids = tgt.encode(" ".join(target))  # with </s>, which CTranslate2 scores too
        with torch.no_grad():
            ours = F.log_softmax(model(src_ids, torch.tensor([[tgt.eos] + ids[:-1]])), -1)[0]
        ours = ours.gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert len(result.log_probs) == len(ids)
        gap = max(gap, float((ours - torch.tensor(result.log_probs)).abs().max()))
    assert gap < 1e-4, f"{name}: log-probabilities differ by up to {gap:.2e}"


@pytest.mark.parametrize("name", CASES)
def test_greedy_and_beam_search_find_our_hypotheses(converted, name):
    model, src, tgt, directory, sources = converted[name]
    ct2 = translator(directory)
    batch = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(src.encode(" ".join(s))) for s in sources], batch_first=True, padding_value=src.pad
    )
    for beam in (1, 5):
        for lenpen in (1.0, 0.6):
            # min_len 0: scores too, exactly; min_len 1 bars </s> at the first step, which CTranslate2 does before its
            # softmax (renormalising that step) and we after it, as fairseq does: the same hypotheses, scores apart
            # by log(1 - p(</s>)) at that step
            for min_len in (0, 1):
                cfg = BeamConfig(beam=beam, lenpen=lenpen, max_len_a=0, max_len_b=LIMIT, min_len=min_len)
                ours = [hyps[0] for hyps in beam_search(model, batch, cfg, eos=tgt.eos, pad=tgt.pad)]
                theirs = ct2.translate_batch(
                    sources,
                    beam_size=beam,
                    length_penalty=lenpen,
                    max_decoding_length=LIMIT + 1,
                    min_decoding_length=min_len,
                    return_scores=True,
                )
                # at the limit we end with </s> and CTranslate2 without: only hypotheses that ended before compare
                # (one greedy decoding of the fairseq models' sources loops)
                ended = [(h, r) for h, r in zip(ours, theirs, strict=True) if len(h.tokens) <= LIMIT]
                assert len(ended) >= len(sources) - 1
                assert [tgt.decode(h.tokens).split() for h, _ in ended] == [r.hypotheses[0] for _, r in ended], (
                    f"{name}: beam {beam}, lenpen {lenpen}, min_len {min_len}"
                )
                if min_len == 0:
                    gap = max(abs(h.score - r.scores[0]) for h, r in ended)
                    assert gap < 1e-4, f"{name}: scores differ by up to {gap:.2e}"


@pytest.mark.parametrize("name", ["shared_post", "separate_pre"])
def test_imported_fairseq_models_translate_as_fairseq_generate_did(converted, name):
    """The 300 fixture sentences, beam 5: fairseq-generate's own hypotheses, except where fairseq's ran into its
    length limit (200 tokens), where fairseq appends </s> and CTranslate2 stops without one."""
    expected = json.loads((FIXTURE / name / "beam5.json").read_text())
    options = expected["options"]
    sources = [line.split() for line in read_lines(FIXTURE / "test.de")]
    results = translator(converted[f"fairseq_{name}"][3]).translate_batch(
        sources,
        beam_size=options["beam"],
        length_penalty=options["lenpen"],
        return_scores=True,
        max_decoding_length=options["max_len_b"] + 1,
        max_batch_size=options["batch_size"],
    )
    pairs = [
        (" ".join(r.hypotheses[0]), r.scores[0] / math.log(2), h["text"], h["score_log2"])
        for r, h in zip(results, expected["hypotheses"], strict=True)
        if len(h["text"].split()) < options["max_len_b"]
    ]
    assert len(pairs) >= len(sources) - 1
    assert [p[0] for p in pairs] == [p[2] for p in pairs]
    # fairseq bars </s> at step 0 after its softmax, CTranslate2 before it: log(1 - p(</s>)) apart at that step
    assert max(abs(p[1] - p[3]) for p in pairs) < 1e-3


def test_papers_models_and_conv_backbones_are_refused_in_one_line(tmp_path):
    vocab = vocabulary("w", 44)
    for family, settings, said in (
        ("cross_view", {"strategy": "gca"}, "model 'cross_view'"),
        ("transformer", {"backbone": "dynamic_conv"}, "backbone 'dynamic_conv'"),
    ):
        torch.manual_seed(0)
        model = build(family, {**TINY[family], "src_vocab": len(vocab), "tgt_vocab": len(vocab), **settings})
        directory = model_dir(model, vocab, vocab, tmp_path / family, name=family)
        with pytest.raises(UserError) as err:
            convert(directory, tmp_path / f"{family}-ct2")
        line = str(err.value)
        assert "\n" not in line and said in line and "CTranslate2 has no counterpart for this model family" in line
        assert "`lwnmt export` without --format writes a directory that `lwnmt translate --model` serves" in line
        assert not (tmp_path / f"{family}-ct2").exists()


def test_without_ctranslate2_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    vocab = vocabulary("w", 44)
    torch.manual_seed(0)
    model = build("transformer", {**TINY["transformer"], "src_vocab": len(vocab), "tgt_vocab": len(vocab)})
    directory = model_dir(model, vocab, vocab, tmp_path / "model")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    with pytest.raises(
        UserError,
        match=r"needs the ctranslate2 package, which is not installed: pip install "
        r"'layerwise-nmt\[ctranslate2\]'$",
    ):
        convert(directory, tmp_path / "ct2")
    assert INSTALL_HINT == "pip install 'layerwise-nmt[ctranslate2]'" and not (tmp_path / "ct2").exists()


def test_cli_exports_a_model_file_and_a_model_directory(converted, tmp_path, capsys):
    from layerwise_nmt.cli import main

    imported = Path(converted["fairseq_shared_post"][3]).parent / "shared_post"
    (tmp_path / "codes").write_text("#version: 0.2\nq z\n")
    out = tmp_path / "int8"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "export",
            str(imported / "model.pt"),
            "--data",
            str(imported),
            "--src",
            "de",
            "--tgt",
            "en",
            "--codes",
            str(tmp_path / "codes"),
            "--tokenize",
            '{"lowercase": true}',
            "--decode",
            '{"beam": 4, "lenpen": 0.6}',
            "--format",
            "ctranslate2",
            "--quantization",
            "int8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "serve it with ctranslate2.Translator" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "bpecodes",
        "config.json",
        "lwnmt.json",
        "model.bin",
        "shared_vocabulary.json",
    ]
    about = json.loads((out / "lwnmt.json").read_text())
    assert (about["format"], about["src"], about["tgt"], about["model"]) == (
        "lwnmt-ctranslate2-dir/1",
        "de",
        "en",
        "transformer",
    )
    assert about["tokenize"] == {"lowercase": True} and about["bpe"]["kind"] == "subword-nmt"
    assert about["ctranslate2"]["quantization"] == "int8"
    assert about["ctranslate2"]["translate_options"] == {
        "beam_size": 4,
        "min_decoding_length": 1,
        "length_penalty": 0.6,
    }
    assert set(about["sha256"]) == {"bpecodes", "config.json", "model.bin", "shared_vocabulary.json"}
    config = json.loads((out / "config.json").read_text())
    assert (config["decoder_start_token"], config["add_source_eos"]) == ("</s>", True)
    sources = converted["fairseq_shared_post"][4]
    assert all(
        r.hypotheses[0] for r in translator(out).translate_batch(sources, **about["ctranslate2"]["translate_options"])
    )

    # an existing model directory converts as it is; `lwnmt translate --model` refuses the result by its format
    main(
        [
            "export",
            str(imported / "model.pt"),
            "--data",
            str(imported),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out",
            str(tmp_path / "dir"),
        ]
    )
    main(["export", str(tmp_path / "dir"), "--format", "ctranslate2", "--out", str(tmp_path / "float32")])
    assert json.loads((tmp_path / "float32/lwnmt.json").read_text())["ctranslate2"]["quantization"] == "none"
    with pytest.raises(UserError, match=r"format 'lwnmt-ctranslate2-dir/1'; this lwnmt reads lwnmt-model-dir/1"):
        export.read(tmp_path / "float32")
    with pytest.raises(SystemExit) as exited:
        main(["export", str(tmp_path / "dir"), "--quantization", "int8", "--out", str(tmp_path / "x")])
    assert exited.value.code == 1
    assert "--quantization int8: only with --format ctranslate2" in capsys.readouterr().err
