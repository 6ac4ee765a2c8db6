"""Our decoder on fairseq's models: `lwnmt import-fairseq` + `lwnmt translate` reproduce fairseq-generate.

The fixture (tests/fixtures/fairseq/, made by `python benchmarks/fairseq_parity.py fixture`) holds two small
fairseq 0.12.2 Transformers trained on Multi30k (one shared dictionary and embedding, post-norm; two dictionaries,
pre-norm), the first 300 BPE'd test sources, and fairseq-generate's hypotheses and scores under two settings.
"""

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from layerwise_nmt import UserError
from layerwise_nmt.cli import main
from layerwise_nmt.data.batching import pad as pad_batch
from layerwise_nmt.data.io import read_lines
from layerwise_nmt.data.vocab import load_pair
from layerwise_nmt.inference.decode import BeamConfig, beam_search, load_model
from layerwise_nmt.inference.fairseq_import import import_fairseq

FIXTURE = Path(__file__).parent / "fixtures" / "fairseq"
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
CASES = [(model, setting) for model in MANIFEST["models"] for setting in MANIFEST["generate"]]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    return {
        name: import_fairseq(str(FIXTURE / name / "checkpoint.pt"), str(FIXTURE / name), "de", "en", str(out / name))
        for name in MANIFEST["models"]
    }


def decode_all(model_path: Path, options: dict) -> list:
    model = load_model(model_path)
    src_vocab, tgt_vocab = load_pair(model_path.parent, "de", "en")
    cfg = BeamConfig.from_dict(options)
    lines = list(read_lines(FIXTURE / "test.de"))
    best = []
    for start in range(0, len(lines), cfg.batch_size):
        batch = [np.asarray(src_vocab.encode(line)) for line in lines[start : start + cfg.batch_size]]
        results = beam_search(model, pad_batch(batch, src_vocab.pad), cfg, eos=tgt_vocab.eos, pad=tgt_vocab.pad)
        best += [(tgt_vocab.decode(r[0].tokens), r[0].score / math.log(2)) for r in results]
    return best


@pytest.mark.system
@pytest.mark.parametrize("name,setting", CASES)
def test_imported_fairseq_models_decode_exactly_as_fairseq_generate(imported, name, setting):
    expected = json.loads((FIXTURE / name / f"{setting}.json").read_text())
    ours = decode_all(imported[name], expected["options"])
    theirs = [(h["text"], h["score_log2"]) for h in expected["hypotheses"]]
    assert len(ours) == len(theirs) == MANIFEST["sentences"]
    differing = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a[0] != b[0]]
    assert not differing, (
        f"{len(differing)} of {len(ours)} hypotheses differ, e.g. #{differing[0]}: "
        f"{ours[differing[0]]} vs fairseq's {theirs[differing[0]]}"
    )
    gap = max(abs(a[1] - b[1]) for a, b in zip(ours, theirs, strict=True))
    assert gap < 1e-4, f"scores differ by up to {gap:.2e} (log2)"


def test_translate_cli_reads_the_import_like_a_fairseq_data_directory(tmp_path):
    name, setting = "shared_post", "beam5"
    main(
        [
            "import-fairseq",
            str(FIXTURE / name / "checkpoint.pt"),
            "--data",
            str(FIXTURE / name),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out",
            str(tmp_path / "model"),
        ]
    )
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["dict.de.txt", "dict.en.txt", "model.pt"]
    options = json.loads((FIXTURE / name / f"{setting}.json").read_text())["options"]
    main(
        [
            "translate",
            str(FIXTURE / "test.de"),
            "--model",
            str(tmp_path / "model/model.pt"),
            "--data",
            str(tmp_path / "model"),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out-prefix",
            str(tmp_path / "hyp"),
            "--beam",
            str(options["beam"]),
            "--lenpen",
            str(options["lenpen"]),
            "--max-len-a",
            "0",
            "--max-len-b",
            "200",
            "--amp",
            "none",
        ]
    )  # fairseq-generate computed in fp32
    expected = [h["text"] for h in json.loads((FIXTURE / name / f"{setting}.json").read_text())["hypotheses"]]
    assert list(read_lines(tmp_path / "hyp.bpe")) == expected
    decoding = json.loads((tmp_path / "hyp.json").read_text())
    assert decoding["options"]["max_len_a"] == 0 and decoding["precision"]["amp"] == "none"


def fairseq_state(name: str = "shared_post") -> dict:
    return torch.load(FIXTURE / name / "checkpoint.pt", map_location="cpu", weights_only=False)


def test_import_refuses_what_our_transformer_cannot_express(tmp_path):
    state = fairseq_state()
    state["cfg"]["model"].encoder_learned_pos = True
    torch.save(state, tmp_path / "learned.pt")
    with pytest.raises(UserError, match=r"learned\.pt: encoder_learned_pos=True has no counterpart"):
        import_fairseq(str(tmp_path / "learned.pt"), str(FIXTURE / "shared_post"), "de", "en", str(tmp_path / "o"))
    state = fairseq_state()
    state["cfg"]["model"].arch = "lightconv_iwslt_de_en"
    torch.save(state, tmp_path / "conv.pt")
    with pytest.raises(UserError, match=r"arch 'lightconv_iwslt_de_en'; expected one of transformer"):
        import_fairseq(str(tmp_path / "conv.pt"), str(FIXTURE / "shared_post"), "de", "en", str(tmp_path / "o"))


def test_import_checks_the_dictionaries_against_the_checkpoint(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(FIXTURE / "separate_pre", data)
    lines = (data / "dict.en.txt").read_text().splitlines()
    (data / "dict.en.txt").write_text("\n".join(lines[:-8]) + "\n")
    with pytest.raises(
        UserError,
        match=rf"dict\.en\.txt: {len(lines) - 4} symbols, but the checkpoint's decoder "
        rf"embedding has {len(lines) + 4} rows",
    ):
        import_fairseq(str(data / "checkpoint.pt"), str(data), "de", "en", str(tmp_path / "o"))
    with pytest.raises(UserError, match=r"dict\.fr\.txt: missing; --data must be the fairseq data directory"):
        import_fairseq(str(data / "checkpoint.pt"), str(data), "de", "fr", str(tmp_path / "o"))


def test_gca_continues_from_an_imported_fairseq_baseline(imported):
    """warm_start: {path: …} — GCA's continued learning (§3.3) from a baseline trained with fairseq."""
    from layerwise_nmt.data.vocab import Dictionary
    from layerwise_nmt.models import build
    from layerwise_nmt.training.checkpoint import warm_start

    base = load_model(imported["shared_post"])
    vocab = Dictionary.load(FIXTURE / "shared_post" / "dict.de.txt")
    arch = {k: v for k, v in base.config.to_dict().items() if k not in ("kernel_sizes",)}
    gca = build("cross_view", {**arch, "strategy": "gca", "soft_integration": True})
    new = warm_start(gca, str(imported["shared_post"]), {"de": vocab, "en": vocab})
    assert new and all(k.startswith("views.") for k in new)
    state = gca.state_dict()
    assert all(torch.equal(state[k], v) for k, v in base.state_dict().items())

    plain = build("cross_view", {**arch, "strategy": "gca", "sinusoid": "vaswani"})
    with pytest.raises(
        UserError,
        match=r"model\.pt: trained with sinusoid='fairseq', but this experiment's arch "
        r"has sinusoid='vaswani'; set arch: \{sinusoid: fairseq\}",
    ):
        warm_start(plain, str(imported["shared_post"]), {"de": vocab, "en": vocab})
    other = Dictionary(vocab.symbols[5:] + ["extra"], vocab.counts[4:])
    with pytest.raises(UserError, match=r"dict\.de\.txt: not the task's de vocabulary \(symbol 4: "):
        warm_start(gca, str(imported["shared_post"]), {"de": other, "en": vocab})


def test_config_takes_a_model_path_as_warm_start(tmp_path):
    import yaml

    from layerwise_nmt import grid

    config = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())
    name = next(n for n, e in config["experiments"].items() if isinstance(e.get("warm_start"), str))
    config["experiments"][name]["warm_start"] = {"path": str(tmp_path / "fairseq/model.pt")}
    grid.validate(config)
    status = grid.experiment_status(config, name)
    assert not status.runnable and status.reason == f"warm start from {tmp_path / 'fairseq/model.pt'}: no such file"
    config["experiments"][name]["warm_start"] = {"pth": "x"}
    with pytest.raises(UserError, match=rf"experiments/{re.escape(name)}/warm_start"):
        grid.validate(config)
