"""`lwnmt translate` as a user meets it: the dictionaries checked against the model, one output line per input line
(empty and overlong sources included), stdout, fairseq-generate's n-best lines, one-line errors."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import toy_spec
from layerwise_nmt.training import checkpoint
from layerwise_nmt import UserError, cli
from layerwise_nmt import grid as config_module
from layerwise_nmt.data.vocab import Dictionary
from layerwise_nmt.training.loop import train


def lwnmt(*args, stdin: bytes | None = None, env: dict | None = None):
    result = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, input=stdin, env=env
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def one_line_error(code: int, stderr: str) -> str:
    assert code == 1 and "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory) -> dict:
    """A toy model, the fairseq-style data directory beside it (its dictionaries) and the same model saved as
    older checkpoints were, without the dictionaries' fingerprints."""
    root = tmp_path_factory.mktemp("translate")
    model = root / "model.pt"
    train(toy_spec(max_update=2), str(toy_data), "de", "en", str(root / "run"), str(model))
    for lang in ("de", "en"):
        shutil.copy(toy_data.parent / "vocab" / "dict.joint.txt", root / f"dict.{lang}.txt")
    state = checkpoint.load(model)
    old = root / "old.pt"
    torch.save({k: v for k, v in state.items() if k != "dictionaries"}, old)
    return {"model": model, "old": old, "data": root, "vocab": Dictionary.load(root / "dict.de.txt")}


def decode_args(trained: dict, model: Path | None = None, data: Path | None = None) -> list:
    return ["--model", model or trained["model"], "--data", data or trained["data"], "--src", "de", "--tgt", "en"]


def dictionaries(tmp_path: Path, symbols: list[str]) -> Path:
    for lang in ("de", "en"):
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"{s} 1\n" for s in symbols), encoding="utf-8")
    return tmp_path


def test_a_dictionary_of_another_size_is_refused(trained, tmp_path):
    words = trained["vocab"].symbols[4:]
    source = tmp_path / "in.bpe"
    source.write_text("w1 w2\n")
    code, _, err = lwnmt("translate", source, *decode_args(trained, data=dictionaries(tmp_path, words[:-8])))
    line = one_line_error(code, err)
    n = len(trained["vocab"])
    assert f"dict.de.txt: {n - 8} symbols, but {trained['model']} has a {n}-symbol source vocabulary" in line


def test_a_same_size_dictionary_with_other_symbols_is_refused_by_its_fingerprint(trained, tmp_path):
    words = trained["vocab"].symbols[4:]
    swapped = dictionaries(tmp_path, [words[1], words[0], *words[2:]])
    source = tmp_path / "in.bpe"
    source.write_text("w1 w2\n")
    code, _, err = lwnmt("translate", source, *decode_args(trained, data=swapped))
    line = one_line_error(code, err)
    assert "dict.de.txt: fingerprint" in line and "same size, other symbols" in line
    # a checkpoint from before the fingerprints: the size check only
    code, out, err = lwnmt("translate", source, *decode_args(trained, model=trained["old"], data=swapped))
    assert code == 0 and len(out.splitlines()) == 1, err


def test_empty_and_overlong_sources_keep_their_lines_empty(trained, tmp_path, caplog):
    source = tmp_path / "in.bpe"
    long = " ".join(["w3"] * 1100)  # > max_positions 1,024
    source.write_text(f"w1 w2 w3\n\n{long}\nw4 w5\n", encoding="utf-8")
    code, out, err = lwnmt("translate", source, *decode_args(trained), "--out-prefix", tmp_path / "hyp")
    assert code == 0, err
    assert f"{source}:3: 1101 tokens (with </s>), longer than the model's max_positions 1024" in err
    lines = (tmp_path / "hyp.txt").read_text().split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == lines[2] == "" and lines[0] and lines[3]
    assert json.loads((tmp_path / "hyp.json").read_text())["untranslated"] == 2


def test_a_spec_decodes_as_the_flags_it_stands_for_and_is_not_mixed_with_them(trained):
    from layerwise_nmt.job_specs import TranslateSpec

    spec = TranslateSpec(decode={"beam": 3, "lenpen": 0.6}, data=str(trained["data"]), src="de", tgt="en")
    source = b"w1 w2 w3\nw4\n"
    code, by_spec, err = lwnmt("translate", "-", "--model", trained["model"], "--spec", spec.to_json(), stdin=source)
    assert code == 0, err
    flags = ["--options", '{"beam": 3, "lenpen": 0.6}']
    code, by_flags, err = lwnmt("translate", "-", *decode_args(trained), *flags, stdin=source)
    assert code == 0 and by_spec == by_flags and len(by_spec.splitlines()) == 2, err
    code, _, err = lwnmt("translate", "-", *decode_args(trained), "--spec", spec.to_json(), stdin=source)
    assert one_line_error(code, err).endswith(
        "--spec: it gives the decoding settings, data, languages, tuned length penalty and model code; "
        "expected none of --data, --src, --tgt beside it"
    )


def test_stdout_and_fairseq_nbest_lines(trained, tmp_path):
    code, out, err = lwnmt("translate", "-", *decode_args(trained), stdin=b"w1 w2 w3\nw4\n")
    assert code == 0 and len(out.splitlines()) == 2, err
    code, out, err = lwnmt("translate", *decode_args(trained), "--nbest", "3", "--beam", "4", stdin=b"w1 w2 w3\n")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "S-0\tw1 w2 w3" and [line[:2] for line in lines[1:]] == ["H-", "D-", "P-"] * 3
    _, score, text = lines[1].split("\t")
    positional = [float(p) for p in lines[3].split("\t")[1].split()]
    assert len(positional) == len(text.split()) + 1  # with </s>
    assert math.isclose(float(score), sum(positional) / len(positional), abs_tol=1e-3)  # lenpen 1
    assert float(lines[1].split("\t")[1]) >= float(lines[4].split("\t")[1]) >= float(lines[7].split("\t")[1])
    assert lines[1].split("\t")[2] == out.splitlines()[2].split("\t")[2]  # no detokenizer: D = H
    code, _, err = lwnmt("translate", *decode_args(trained), "--nbest", "6", "--beam", "4", stdin=b"w1\n")
    assert "--nbest 6 with beam 4" in one_line_error(code, err)


def test_raw_text_keeps_an_empty_line_empty_and_writes_what_help_promises(trained, tmp_path, monkeypatch, capsys):
    setup = {
        "model": str(trained["model"]),
        "data": str(trained["data"]),
        "src": "de",
        "tgt": "en",
        "tokenize": {"tokenizer": "moses"},
        "codes": None,
        "decode": {"beam": 2},
    }
    monkeypatch.setattr(cli.common, "load_config", lambda a: {"experiments": {"toy": {}}})
    monkeypatch.setattr(config_module, "trained_model", lambda config, name, seed: setup)
    source = tmp_path / "raw.txt"
    source.write_text("w1 w2 w3\n\nw4 w5\n", encoding="utf-8")
    cli.main(["translate", str(source), "--experiment", "toy"])
    printed = capsys.readouterr().out.split("\n")[:-1]
    assert len(printed) == 3 and printed[1] == "" and printed[0] and printed[2]
    cli.main(["translate", str(source), "--experiment", "toy", "--out-prefix", str(tmp_path / "hyp")])
    promised = set(re.findall(r"PREFIX\.(\w+)", " ".join(lwnmt("translate", "--help")[1].split())))
    assert promised == {"bpe", "txt", "detok", "nbest", "json"}
    written = {p.suffix[1:] for p in tmp_path.glob("hyp.*")}
    assert written == promised - {"nbest"}  # .nbest only with --nbest
    assert (tmp_path / "hyp.detok").read_text().split("\n")[:-1] == printed


@pytest.mark.parametrize("content", [b"", "cut"])
def test_a_corrupt_or_truncated_model_is_one_line_naming_it(trained, tmp_path, content):
    bad = tmp_path / "model.pt"
    data = trained["model"].read_bytes()
    bad.write_bytes(data[: len(data) // 2] if content == "cut" else content)
    code, _, err = lwnmt("translate", *decode_args(trained, model=bad), stdin=b"w1\n")
    assert f"{bad}: not a readable checkpoint, truncated or corrupt?" in one_line_error(code, err)


def test_weights_that_do_not_fit_the_models_code_are_one_line_naming_the_file(trained, tmp_path):
    """Same settings, other code (a plugin edited after training): load_state_dict's many-line error becomes one."""
    import torch

    state = torch.load(trained["model"], weights_only=False)
    state["model"].pop(next(iter(state["model"])))
    edited = tmp_path / "model.pt"
    torch.save(state, edited)
    code, _, err = lwnmt("translate", *decode_args(trained, model=edited), stdin=b"w1\n")
    assert f"{edited}: its tensors do not fit model " in one_line_error(code, err)


def test_a_model_setting_this_version_does_not_know_is_one_line_naming_the_file(trained, tmp_path):
    import torch

    state = torch.load(trained["model"], weights_only=False)
    state["model_config"]["from_a_newer_version"] = 1
    newer = tmp_path / "model.pt"
    torch.save(state, newer)
    code, _, err = lwnmt("translate", *decode_args(trained, model=newer), stdin=b"w1\n")
    assert f"{newer}: unknown model setting(s) from_a_newer_version" in one_line_error(code, err)


def test_invalid_utf8_on_stdin_is_one_line(trained):
    code, _, err = lwnmt("translate", *decode_args(trained), stdin=b"w1\nw2 \xff w3\n")
    assert "stdin:2: invalid UTF-8 at byte 3" in one_line_error(code, err)


def test_verbose_after_the_subcommand_and_version():
    from layerwise_nmt import __version__

    assert cli.build_parser().parse_args(["translate", "-v"]).verbose
    assert cli.build_parser().parse_args(["-v", "translate"]).verbose
    assert not cli.build_parser().parse_args(["translate"]).verbose
    code, out, _ = lwnmt("--version")
    assert code == 0 and out.strip() == f"lwnmt {__version__}"


def test_the_program_ends_without_teardown_but_with_every_line_written(trained, tmp_path):
    """`python -m layerwise_nmt` skips Python's teardown after a successful command (cli.run): what it printed to
    a pipe (block-buffered) and its log must still arrive whole, and an error still exits 1."""
    words = trained["vocab"].symbols[4:12]
    source = tmp_path / "in.bpe"
    source.write_text("".join(f"{words[i % 8]} {words[(3 * i) % 8]}\n" for i in range(400)))
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a user's shell has it
    code, out, err = lwnmt("translate", source, *decode_args(trained), "--nbest", "2", env=buffered)
    assert code == 0, err
    assert sum(line.startswith("S-") for line in out.splitlines()) == 400 and out.endswith("\n")
    assert "decoded 400/400 sentences" in err
    code, _, err = lwnmt("translate", tmp_path / "missing.bpe", *decode_args(trained))
    assert code == 1 and "missing.bpe" in err


def test_a_trained_model_knows_its_direction(trained, tmp_path):
    """model.pt records the language pair it was trained on (and averaging keeps it): a joint dictionary would let
    `--src en --tgt de` translate de→en in silence."""
    from layerwise_nmt.training.average import average

    assert checkpoint.load(trained["model"])["languages"] == {"src": "de", "tgt": "en"}
    run = trained["model"].parent / "run"
    averaged = tmp_path / "averaged.pt"
    average(sorted(run.glob("checkpoint_last.pt")), averaged)
    assert checkpoint.load(averaged)["languages"] == {"src": "de", "tgt": "en"}
    code, out, err = lwnmt(
        "translate",
        "-",
        "--model",
        trained["model"],
        "--data",
        trained["data"],
        "--src",
        "en",
        "--tgt",
        "de",
        stdin=b"w1 w2\n",
    )
    assert out == "" and f"--src en --tgt de: {trained['model']} translates de→en" in one_line_error(code, err)


# What a wrong --model says: the path and what was expected, in one line


@pytest.fixture
def model_dir(trained, tmp_path) -> Path:
    from layerwise_nmt.inference.export import write

    dicts = [trained["data"] / f"dict.{lang}.txt" for lang in ("de", "en")]
    return write(
        trained["model"], tmp_path / "model-dir", "de", "en", *dicts, None, {"tokenizer": "moses"}, {"beam": 2}, {}
    )


def test_a_model_directory_that_is_not_there_is_named(tmp_path):
    missing = tmp_path / "nonexistent" / "dir"
    code, out, err = lwnmt("translate", "--model", missing, stdin=b"w1\n")
    line = one_line_error(code, err)
    assert out == "" and f"--model {missing}: no such model directory" in line and "lwnmt export" in line
    assert "missing --data" not in line


def test_a_model_directory_without_one_of_its_files_names_it(model_dir):
    code, out, err = lwnmt("translate", "--model", model_dir, stdin=b"w1\n")
    assert code == 0 and len(out.splitlines()) == 1, err
    (model_dir / "dict.en.txt").unlink()
    line = one_line_error(*lwnmt("translate", "--model", model_dir, stdin=b"w1\n")[::2])
    assert f"{model_dir / 'dict.en.txt'}: missing from the model directory" in line
    (model_dir / "lwnmt.json").unlink()
    line = one_line_error(*lwnmt("translate", "--model", model_dir, stdin=b"w1\n")[::2])
    assert f"--model {model_dir}: a directory without lwnmt.json" in line


def test_a_manifest_without_a_key_names_the_key(model_dir):
    manifest = json.loads((model_dir / "lwnmt.json").read_text())
    del manifest["files"]
    (model_dir / "lwnmt.json").write_text(json.dumps(manifest))
    line = one_line_error(*lwnmt("translate", "--model", model_dir, stdin=b"w1\n")[::2])
    assert f"{model_dir / 'lwnmt.json'}: no 'files' key" in line


def test_a_text_file_as_the_model_directorys_model_is_one_line(model_dir):
    from layerwise_nmt.inference.export import sha256

    (model_dir / "model.pt").write_text("error: disk full\n")
    manifest = json.loads((model_dir / "lwnmt.json").read_text())
    manifest["sha256"]["model.pt"] = sha256(model_dir / "model.pt")
    (model_dir / "lwnmt.json").write_text(json.dumps(manifest))
    line = one_line_error(*lwnmt("translate", "--model", model_dir, stdin=b"w1\n")[::2])
    assert f"{model_dir / 'model.pt'}: not a readable checkpoint" in line and "not a PyTorch file" in line


def test_a_text_file_as_the_model_with_data_is_one_line(trained, tmp_path):
    model = tmp_path / "model.pt"
    model.write_text("this is not a model\n")
    line = one_line_error(*lwnmt("translate", *decode_args(trained, model=model), stdin=b"w1\n")[::2])
    assert f"{model}: not a readable checkpoint" in line and "it begins 'this is not a mo" in line


def imported_modules(*code: str) -> set[str]:
    """The top-level packages a fresh interpreter imports to run `code` (python -X importtime)."""
    result = subprocess.run([sys.executable, "-X", "importtime", *code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_help_and_data_commands_import_no_torch(tmp_path):
    source = tmp_path / "a.txt"
    source.write_text("a\n")
    for command in (["--help"], ["translate", "--help"], ["concat", str(source), "--out", str(tmp_path / "b.txt")]):
        modules = imported_modules("-m", "layerwise_nmt", *command)
        assert "layerwise_nmt" in modules and "torch" not in modules, command


def test_the_decoding_settings_need_neither_torch_nor_numpy():
    """A workflow driver without torch checks the config's decoding settings with BeamConfig."""
    code = (
        "import sys; sys.modules['torch'] = sys.modules['numpy'] = None\n"
        "from layerwise_nmt.inference.config import BeamConfig\n"
        "assert BeamConfig.from_dict({'beam': 4, 'tune_lenpen': [0.6, 1]}).tune_lenpen == (0.6, 1.0)"
    )
    assert "torch" not in imported_modules("-c", code)
    from layerwise_nmt.inference import config as beam_config, decode
    from layerwise_nmt.training import precision

    assert decode.BeamConfig is beam_config.BeamConfig and beam_config.AMP_CHOICES == precision.AMP_CHOICES


def test_one_setup_resolves_each_kind_of_request(trained, model_dir, tmp_path, monkeypatch):
    """translation.prepare: a model directory brings its own files and settings (the options given override
    them), a BPE'd input is decoded as it is, and a directory that is not there is named before any input is read."""
    import io

    from layerwise_nmt.inference import translation

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"W1 w2\n")))
    job = translation.prepare(translation.Request(model=str(model_dir)), {"lenpen": 0.6}, tmp_path)
    assert (job.model, job.data, job.src, job.tgt, job.detok, job.label) == (
        str(model_dir / "model.pt"),
        str(model_dir),
        "de",
        "en",
        "en",
        "stdin",
    )
    assert job.options == {"beam": 2, "lenpen": 0.6} and Path(job.source).read_text() == "W1 w2\n"
    source = tmp_path / "in.bpe"
    job = translation.prepare(
        translation.Request(str(source), str(trained["model"]), str(trained["data"]), "de", "en"), {}, tmp_path
    )
    assert (job.source, job.detok, job.experiment) == (str(source), None, None)
    with pytest.raises(translation.UserError, match="no such model directory"):
        translation.prepare(translation.Request(model=str(tmp_path / "gone")), {}, tmp_path)
    assert translation.REQUEST_ARGUMENTS == tuple(
        f for f in translation.Request.__dataclass_fields__ if f not in ("config", "config_files")
    )


# Input the model cannot read: said per line, on stderr, never in the translations


def warnings_of(err: str) -> list[str]:
    return [
        line.split(": ", 1)[1] for line in err.splitlines() if " WARNING layerwise_nmt.inference.translation: " in line
    ]


def test_a_line_mostly_unknown_to_the_model_or_losing_characters_is_named(trained, tmp_path):
    """Emoji vanished in silence (<unk>), and Chinese given to the De→En model came back as a fluent sentence of
    something else: each such line gets one warning naming it and what the model could not read."""
    from layerwise_nmt.inference.export import write

    dicts = [trained["data"] / f"dict.{lang}.txt" for lang in ("de", "en")]
    model_dir = write(
        trained["model"],
        tmp_path / "model-dir",
        "de",
        "en",
        *dicts,
        None,
        {"tokenizer": "moses", "remove_non_printing": True},
        {"beam": 2},
        {},
    )
    source = tmp_path / "raw.de"
    source.write_text("w1 w2 w3\nw1 😀 w2 & w3\n我 喜欢 猫 w1\nw1\u200b w2\x07 w3\n\u200b\nw4 w5\n", encoding="utf-8")
    code, out, err = lwnmt("translate", source, "--model", model_dir)
    assert code == 0 and len(out.split("\n")[:-1]) == 6, err
    warned = warnings_of(err)
    assert len(warned) == 4, err  # one per line that loses something, none for the others
    emoji, chinese, removed, blank = warned
    assert emoji.startswith(f"{source}:2: ") and "😀 (U+1F600 GRINNING FACE)" in emoji
    assert "& (U+0026 AMPERSAND)" in emoji and "&amp;" not in emoji  # what the user wrote, not Moses' escape
    # the tokens named, not the paths (a pytest worker's folder is called popen-gw1)
    named = emoji.removeprefix(f"{source}:2: ").split(" (/")[0]
    assert "unknown to the model's dictionary" in named and "w1" not in named
    # Moses splits every Han character (a Chinese model's tokenizer is jieba)
    assert chinese.startswith(f"{source}:3: 4 of 5 source tokens (80%) are unknown to the model's dictionary")
    assert chinese.endswith("so its translation cannot be of this line: 我, 喜, 欢, 猫")
    assert removed == (
        f"{source}:4: U+200B ZERO WIDTH SPACE, U+0007 (a control character) removed by normalisation or tokenization"
    )
    assert blank == f"{source}:5: U+200B ZERO WIDTH SPACE removed by normalisation or tokenization"


def test_a_bped_input_mostly_unknown_is_named(trained):
    code, out, err = lwnmt("translate", "-", *decode_args(trained), stdin=b"w1 w2\nx9@@ y8 w1\n")
    assert code == 0 and len(out.splitlines()) == 2, err
    assert warnings_of(err) == [
        "stdin:2: 2 of 3 source tokens (67%) are unknown to the model's dictionary "
        f"({trained['data'] / 'dict.de.txt'}), so its translation cannot be of this line: "
        "x9@@, y8"
    ]


def test_characters_replaced_or_recased_are_not_counted_as_removed():
    from layerwise_nmt.data.tokenize import TokenizeOptions
    from layerwise_nmt.inference.translation import removed_characters

    options = TokenizeOptions("ro", lowercase=True, normalize_punctuation=True, romanian=True)
    raw = "Şi «Ţara» ÎN „Europa“ & [x] |\x1b a"
    tokenized = options.build()(raw)
    assert "ţ" not in tokenized and "«" not in tokenized and "&amp;" in tokenized  # replaced, lowercased, escaped
    assert removed_characters(raw, tokenized, escaped=True) == ["\x1b"]
    assert removed_characters("a b", "a b", escaped=True) == []


def test_a_line_longer_than_training_or_markup_escaped_into_pieces_is_named(trained, tmp_path):
    """A 400-word line came back as 27 words without a word said, and `<p>` and `&amp;` became BPE fragments that
    the warning named as `&@@`: the line's number, its length beside the longest the model trained on, and each tag
    or entity whole, with the tokens it became."""
    from layerwise_nmt.inference.export import write

    assert checkpoint.load(trained["model"])["trained_lengths"] == {"src": 9, "tgt": 9}  # 2-8 words and </s>
    codes = tmp_path / "bpecodes"
    codes.write_text("#version: 0.2\n" + "".join(f"w {i}</w>\n" for i in range(1, 10)))
    dicts = [trained["data"] / f"dict.{lang}.txt" for lang in ("de", "en")]
    model_dir = write(
        trained["model"], tmp_path / "model-dir", "de", "en", *dicts, codes, {"tokenizer": "moses"}, {"beam": 2}, {}
    )
    assert checkpoint.load(model_dir / "model.pt")["trained_lengths"] == {"src": 9, "tgt": 9}
    source = tmp_path / "raw.de"
    long = " ".join(["w1 w2 w3"] * 10)
    source.write_text(f"w1 w2 w3\n{long}\n<p> w1 w2 &amp; w3 </p>\n", encoding="utf-8")
    code, out, err = lwnmt("translate", source, "--model", model_dir)
    assert code == 0 and len(out.split("\n")[:-1]) == 3, err
    warned = [line.split(": ", 1)[1] for line in err.splitlines() if " WARNING layerwise_nmt.inference." in line]
    [longer] = [w for w in warned if w.startswith(f"{source}:2: ")]
    assert "31 source tokens (with </s>), longer than any the model was trained on (at most 9)" in longer
    [markup] = [w for w in warned if w.startswith(f"{source}:3: ") and "markup" in w]
    assert (
        "markup translated as text, in tokens the model never saw as such: <p> (as &@@ l@@ t@@ ; p &@@ g@@ t@@ ;)"
        in markup
        and "&amp; (as &@@ a@@ m@@ p@@ ; a@@ m@@ p ;)" in markup
        and "</p> (as " in markup
    )
    # the fragments are named by their tag, not one by one, nor counted as the line's unknown tokens
    assert "dropped from its translation" not in markup and "are unknown" not in markup
    assert not [w for w in warned if w.startswith(f"{source}:1: ")]


def test_an_output_far_shorter_than_its_source_is_named():
    from layerwise_nmt.inference.decode import length_warnings

    sources = ["a b c d e f g h i j k l", "a b c d e f g h i j k l", "a b", "a " * 30]
    outputs = ["x y z", "x y z w v u t s r q", "", "x " * 30]
    warned = length_warnings(sources, outputs, "in.de", {"src": 20, "tgt": 20}, 1024)
    assert warned == [
        "in.de:1: its translation has 3 tokens for the source's 12 (25%): far shorter, so part of the line is likely "
        "untranslated",
        "in.de:4: 31 source tokens (with </s>), longer than any the model was trained on (at most 20) (split it into "
        "sentences)",
    ]
    assert length_warnings(sources[3:], outputs[3:], "in.de", None, 1024) == []  # an older model: nothing to compare


@pytest.mark.parametrize("content", ['{"bleu": 30.1}', "lenpen: 1.2", '{"lenpen": "high"}'])
def test_a_lenpen_file_that_is_not_pick_lenpens_is_one_line_naming_it(tmp_path, content):
    from layerwise_nmt.inference.translation import decoding_options

    wrong = tmp_path / "score.json"
    wrong.write_text(content)
    with pytest.raises(UserError, match=f"^--lenpen-from {wrong}: .*expected the file lwnmt pick-lenpen writes$"):
        decoding_options("{}", {}, str(wrong))
    wrong.write_text('{"lenpen": 1.2, "bleu": {"1.2": 30.1}}')
    assert decoding_options("{}", {"beam": 4}, str(wrong)) == {"beam": 4, "lenpen": 1.2}
