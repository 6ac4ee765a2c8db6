"""What a new user meets: errors never land in the output, the wrong file is never scored in silence,
a misspelled model or key is named at DAG time with a did-you-mean and the file that holds it, Ctrl-C checkpoints,
and a text file given as model.pt is one line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT, default_sigint, snakemake, toy_spec, training_in_the_background
from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.grid.stage_checks import check_experiments


def lwnmt(*args, cwd=ROOT, **kw):
    return subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, text=True, cwd=cwd, **kw
    )


def one_line(result) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("lwnmt ") and "error:" in lines[-1]
    return lines[-1]


def overlay(tmp_path: Path, data: dict, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


# 1. stdout carries translations only


def test_an_error_never_lands_in_the_translation_when_stderr_is_a_file(tmp_path):
    hyp, log = tmp_path / "hyp.txt", tmp_path / "err.log"
    command = f"{sys.executable} -m layerwise_nmt translate in.bpe --model m.pt > {hyp} 2> {log}"
    job = subprocess.run(["bash", "-c", command], cwd=tmp_path)
    assert job.returncode == 1
    assert hyp.read_text() == ""  # was: "lwnmt translate: error: missing --data, ..." as a hypothesis
    assert "lwnmt translate: error: missing --data, --src, --tgt" in log.read_text()


# 2. scoring the wrong file


def test_score_refuses_bpe_segmented_text_naming_the_file_and_accepts_it_with_a_flag(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("ein kleines haus .\nzwei hunde laufen .\n")
    bpe = tmp_path / "test.bpe"
    bpe.write_text("ein klein@@ es haus .\nzwei hunde lau@@ fen .\n")
    result = lwnmt("score", bpe, "--ref", ref, "--out", tmp_path / "s.json")
    assert f"{bpe}:1: BPE-segmented text ('@@ ' joins subwords: 'klein@@')" in one_line(result)
    assert "--allow-bpe" in result.stderr and not (tmp_path / "s.json").exists()
    result = lwnmt("score", ref, "--ref", bpe, "--out", tmp_path / "s.json")  # a BPE'd reference: named too
    assert f"{bpe}:1: BPE-segmented text" in one_line(result)
    result = lwnmt("score", bpe, "--ref", ref, "--allow-bpe", "--out", tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    assert 0 < json.loads((tmp_path / "s.json").read_text())["bleu"] < 100


def test_score_of_an_empty_hypothesis_and_reference_is_one_line(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("")
    ref.write_text("")
    assert f"{hyp}: no lines to score" in one_line(lwnmt("score", hyp, "--ref", ref, "--out", tmp_path / "s.json"))


# 4. an unknown model name, and 7. typos and overlays


@pytest.mark.system  # runs Snakemake
def test_a_misspelled_model_is_a_config_error_with_did_you_mean_naming_the_overlay(tmp_path):
    typo = overlay(tmp_path, {"experiments": {"demo.lwc": {"model": "transfomer"}}})
    expected = f"{typo}: config key experiments/demo.lwc/model: unknown model 'transfomer'; did you mean 'transformer'?"
    result = lwnmt("status", "--config", "config.yaml", "--config", "config/demo.yaml", "--config", typo)
    assert one_line(result) == f"lwnmt status: error: {expected}"  # was: "not implemented yet", exit 0
    dry = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config/demo.yaml"), str(typo), check=False)
    assert dry.returncode == 1 and expected in dry.stdout + dry.stderr  # was: exit 0, 14 jobs dropped


@pytest.mark.parametrize(
    "data, key, hint",
    [
        ({"experiment": {}}, "experiment", "did you mean 'experiments'?"),
        (
            {"experiments": {"demo.lwc": {"trian": {"max_update": 3}}}},
            "experiments/demo.lwc/trian",
            "did you mean 'train'?",
        ),
        ({"experiments": {"demo.lwc": {"zzzz": 1}}}, "experiments/demo.lwc/zzzz", "expected one of description, "),
    ],
)
def test_unknown_keys_get_a_did_you_mean_and_the_file_that_holds_them(tmp_path, data, key, hint):
    typo = overlay(tmp_path, data)
    with pytest.raises(UserError) as err:
        grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml", typo)
    assert str(err.value).startswith(f"{typo}: config key {key}: unknown key {key.split('/')[-1]!r}; {hint}")


def test_a_bad_setting_in_the_overlay_names_the_overlay_not_config_yaml(tmp_path):
    typo = overlay(tmp_path, {"experiments": {"demo.lwc": {"train": {"max_tokenz": 10}}}})
    files = ["config.yaml", "config/demo.yaml", str(typo)]
    result = lwnmt("status", *[x for f in files for x in ("--config", f)])
    assert one_line(result).startswith(f"lwnmt status: error: {typo}: config key experiments/demo.lwc/train")
    assert result.stderr.strip().endswith("max_tokenz; did you mean max_tokens?")
    check_experiments(grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml"))  # the shipped files pass


# 5. Ctrl-C


def test_ctrl_c_checkpoints_like_sigterm_and_exits_with_one_line(toy_data, tmp_path):
    proc, _, save_dir = training_in_the_background(
        toy_spec(max_update=100000, save_interval_updates=1000), toy_data, tmp_path
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75 and "Traceback" not in err, err[-3000:]
    saved = torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["progress"]
    assert saved["update"] > torch.load(save_dir / "checkpoint1.pt", weights_only=False)["progress"]["update"]
    assert sum("saved checkpoint_last.pt" in line for line in err.splitlines()) == 1


def signal_dispositions(pid: int) -> str:
    """The blocked, ignored and caught signal masks of a process (for a failure's message)."""
    try:
        return " ".join(
            line
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith(("SigBlk", "SigIgn", "SigCgt", "ShdPnd", "SigPnd"))
        )
    except OSError:
        return ""


def wait_until_reading_stdin(proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until `proc` blocks reading its standard input (its imports done), from /proc/PID/syscall: the system call
    it waits in and that call's first argument, the file descriptor. A fixed sleep is not enough: on a loaded
    machine the imports outlast it, and a Ctrl-C during `import torch` can be lost."""
    read = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)  # read(2)'s number
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            fields = Path(f"/proc/{proc.pid}/syscall").read_text().split()
        except OSError:
            fields = None
        if read is None or fields is None:  # no way to see it here: the imports' usual time, generously
            time.sleep(10)
            return
        if fields[:2] == [str(read), "0x0"]:
            return
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1]


def test_ctrl_c_outside_training_is_one_line_not_a_traceback(tmp_path):
    """`lwnmt translate` waiting for its input on stdin, interrupted."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "translate",
            "--model",
            "m.pt",
            "--data",
            str(tmp_path),
            "--src",
            "de",
            "--tgt",
            "en",
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    wait_until_reading_stdin(proc)
    dispositions = signal_dispositions(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err, f"{err}\n{dispositions}"
    assert err.strip().splitlines()[-1] == "lwnmt translate: interrupted (Ctrl-C)"


# 7. a text file given as model.pt


@pytest.mark.parametrize("text", ["this is not a model\n", "error: disk full\n", "hello\n"])
def test_a_text_file_given_as_the_model_is_one_line(tmp_path, text):
    model = tmp_path / "model.pt"
    model.write_text(text)
    with pytest.raises(
        UserError,
        match=rf"{model}: not a readable checkpoint.*not a PyTorch file: it begins "
        rf"'{text[:5]}",
    ):
        from layerwise_nmt.training.checkpoint import load

        load(model)


# 8. a config error is one line, naming the file (and line, column), whichever way it arrives


def snakemake_error(result) -> str:
    """A failed `snakemake -n`'s one line on stderr (beside Snakemake's note of the profile it read): no traceback,
    no WorkflowError header, no Snakefile frame."""
    everything = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in everything and "Exception" not in everything, everything
    assert "common.smk" not in everything and "WorkflowError" not in everything, everything
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("Using workflow specific")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0].removeprefix("error: ")


@pytest.mark.system  # runs Snakemake
def test_a_yaml_syntax_error_in_an_overlay_names_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets:\n  tasks: [multi30k_deen]\n  tables: [demo/T1\nexperiments: {}\n")
    line = snakemake_error(
        snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config/demo.yaml"), str(bad), check=False)
    )
    assert line.startswith(f"config file {bad}, line 4, column 12: not valid YAML: expected ',' or ']'"), line
    assert line.endswith("(while parsing a flow sequence at line 3, column 11)")  # where the list began
    assert one_line(lwnmt("status", "--config", "config.yaml", "--config", bad)) == f"lwnmt status: error: {line}"


@pytest.mark.system  # runs Snakemake
@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"experiments": {"demo.lwcc": {"train": {"lr": 0.001}}}},
            "config key experiments/demo.lwcc: no experiment 'demo.lwcc' to change; did you mean 'demo.lwc'?",
        ),
        (
            {"papers": {"demo": {"figures": {"buckts": {"caption": "mine"}}}}},
            "config key papers/demo/figures/buckts: no figure demo/buckts to change; did you mean 'buckets'?",
        ),
        (
            {"targets": {"tables": ["demo/T2"]}},
            "config key targets/tables: unknown table 'demo/T2'; did you mean 'demo/T1'",
        ),
    ],
)
def test_a_misspelt_name_in_an_overlay_is_one_line_with_the_closest_names(tmp_path, data, expected):
    typo = overlay(tmp_path, data)  # was: "is not valid under any of the given schemas", or a traceback
    status = lwnmt("status", "--config", "config.yaml", "--config", "config/demo.yaml", "--config", typo)
    line = one_line(status).removeprefix("lwnmt status: error: ")
    assert line.startswith(f"{typo}: {expected}"), line
    if "experiments" in data:  # the Snakefile's check is the same one: one dry run shows it stops with that line
        dry = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config/demo.yaml"), str(typo), check=False)
        assert snakemake_error(dry) == line


@pytest.mark.system  # runs Snakemake
def test_a_target_naming_no_experiment_is_one_line_with_the_closest_names(tmp_path):
    target = "results/multi30k_deen/demo.lwcc/seed1/test.score.json"
    result = snakemake(tmp_path, target, "-n", "--configfile", str(ROOT / "config/demo.yaml"), check=False)
    assert snakemake_error(result) == (
        "results/multi30k_deen/demo.lwcc/…: no experiment 'demo.lwcc' in the config; did you mean 'demo.lwc'?"
    )  # was: ~12 lines of InputFunctionException


def test_a_config_error_in_a_training_job_is_not_retried(tmp_path):
    """The train rule retries a failed attempt (preemption resumes); a config error met by an attempt would be met by
    each retry, printing its line and paying torch's start three times. Its retry within the same workflow run exits
    at once with the same status; a later run (after a fix) trains again."""
    args = (
        "train",
        "--spec",
        json.dumps({"model": "transformer"}),
        "--data",
        tmp_path / "bin",
        "--src",
        "de",
        "--tgt",
        "en",
        "--save-dir",
        tmp_path / "run",
    )
    first = lwnmt(*args, env={**os.environ, "LWNMT_WORKFLOW_RUN": "run-1"})
    line = (
        "lwnmt train: error: no training budget: set at least one of max_update, max_epoch, max_minutes (`lwnmt "
        "train --max-update N` or `--max-epoch N`, with `--patience N` for early stopping, as config.yaml's "
        "defaults do: max_epoch 100, patience 10)"
    )
    assert first.returncode == 78 and first.stderr.strip().splitlines()[-1] == line, first.stderr
    retry = lwnmt(*args, env={**os.environ, "LWNMT_WORKFLOW_RUN": "run-1"})
    assert retry.returncode == 78 and retry.stderr.strip() == f"{line} (not retried: the attempt before met it)"
    later = lwnmt(*args, env={**os.environ, "LWNMT_WORKFLOW_RUN": "run-2"})
    assert later.returncode == 78 and later.stderr.strip().splitlines()[-1] == line
    by_hand = lwnmt(*args)  # outside the workflow nothing is remembered: every run tries
    assert by_hand.returncode == 78 and by_hand.stderr.strip().splitlines()[-1] == line


def test_a_listing_piped_into_head_ends_quietly():
    """`lwnmt plan | head -1` ended in a BrokenPipeError traceback (here the reader is gone before the first line)."""
    with subprocess.Popen(
        [sys.executable, "-m", "layerwise_nmt", "plan", "--config", "config.yaml"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as run:
        run.stdout.close()
        errors = run.stderr.read()
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors


def test_checksum_values_of_the_wrong_form_are_refused_before_any_file_is_touched(tmp_path):
    """A malformed --sha256 was reported as a corrupt file, and fetch deleted the good download."""
    given = tmp_path / "given.txt"
    given.write_text("a line\n")
    for flag, value in (("--sha256", "xyz"), ("--md5", "zzz"), ("--git-blob", "12")):
        line = one_line(lwnmt("fetch", "--url", given.as_uri(), flag, value, tmp_path / "out.txt"))
        assert f"{flag} {value!r}" in line and "hex digits" in line and "corrupt" not in line
        assert not (tmp_path / "out.txt").exists() and given.read_text() == "a line\n"


def test_a_config_file_not_in_utf8_is_one_line_naming_its_line(tmp_path):
    latin1 = tmp_path / "mine.yaml"
    latin1.write_bytes("experiments:\n  # Übersetzung\n".encode("latin-1"))
    line = one_line(lwnmt("status", "--config", "config.yaml", "--config", latin1))
    assert f"config file {latin1}:2: byte 0xdc is not UTF-8" in line


def test_plan_and_fetch_refuse_impossible_values_in_one_line(tmp_path):
    assert "--tflops 0.0: expected" in one_line(lwnmt("plan", "--config", "config.yaml", "--tflops", "0"))
    line = one_line(lwnmt("fetch", "--url", "notaurl", tmp_path / "f.txt"))
    assert "'notaurl': not a URL" in line and not (tmp_path / "f.txt.part").exists()


def test_a_json_option_that_is_not_a_json_object_is_one_line_naming_the_option(tmp_path):
    """--options '{tokenize: none}' (YAML, not JSON) was a JSONDecodeError traceback; '[1]' a TypeError."""
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\n")
    bad = one_line(lwnmt("score", hyp, "--ref", hyp, "--options", "{tokenize: none}", "--out", tmp_path / "s.json"))
    assert "--options '{tokenize: none}': not valid JSON" in bad and not (tmp_path / "s.json").exists()
    listed = one_line(lwnmt("table", "--spec", "[]", "--out-prefix", tmp_path / "t"))
    assert "--spec '[]': a JSON list; expected an object" in listed


# 4. every command's bad input is one line (or argparse's usage error), with nothing written or lost


def test_tokenize_options_are_typed_and_a_tokenizer_typo_is_named(tmp_path):
    """'{"lowercase": "false"}' lowercased (a non-empty string is true); a misspelt tokenizer was a traceback."""
    raw, out = tmp_path / "raw.de", tmp_path / "tok.de"
    raw.write_text("Hallo Welt\n")
    typed = one_line(lwnmt("tokenize", raw, out, "--lang", "de", "--options", '{"lowercase": "false"}'))
    assert "lowercase='false'; expected true or false" in typed
    assert "tokenizer='mose'; expected moses" in one_line(
        lwnmt("tokenize", raw, out, "--lang", "de", "--options", '{"tokenizer": "mose"}')
    )
    assert "did you mean lowercase?" in one_line(
        lwnmt("tokenize", raw, out, "--lang", "de", "--options", '{"lowercas": true}')
    )
    assert not out.exists()


def test_score_refuses_a_hypothesis_that_begins_with_a_byte_order_mark(tmp_path):
    """sacrebleu scores U+FEFF as part of the first word: BLEU 69 instead of 100 for a perfect translation."""
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_bytes(b"\xef\xbb\xbfa small test sentence\n")
    ref.write_text("a small test sentence\n")
    line = one_line(lwnmt("score", hyp, "--ref", ref, "--out", tmp_path / "s.json"))
    assert f"{hyp}:1: begins with a UTF-8 byte-order mark" in line and not (tmp_path / "s.json").exists()
    for path in (hyp, ref):  # the references alike
        path.write_bytes(path.read_bytes().removeprefix(b"\xef\xbb\xbf"))
    ref.write_bytes(b"\xef\xbb\xbf" + ref.read_bytes())
    assert f"{ref}:1: begins with a UTF-8 byte-order mark" in one_line(
        lwnmt("score", hyp, "--ref", ref, "--out", tmp_path / "s.json")
    )


def test_an_output_path_that_cannot_be_a_file_is_refused_before_any_work(tmp_path):
    """--out naming a folder was an error about a `.tmp-*` file, after the BLEU had been printed; a file among the
    folders above it was mkdir's bare "File exists"."""
    text = tmp_path / "text.txt"
    text.write_text("a b c d e\n")
    (tmp_path / "folder").mkdir()
    result = lwnmt("score", text, "--ref", text, "--out", tmp_path / "folder")
    assert f"{tmp_path / 'folder'}: is a directory; expected the path of a file" in one_line(result)
    assert "BLEU" not in result.stdout and list((tmp_path / "folder").iterdir()) == []
    line = one_line(lwnmt("concat", text, "--out", text / "joined.txt"))
    assert f"{text} is a file, not a folder" in line and text.read_text() == "a b c d e\n"


def test_a_failed_extraction_pins_nothing(tmp_path):
    """The first-use record (<out>.sha256) was written before the file landed: a failed first copy pinned a file
    that never arrived, and the right file was refused ever after."""
    wrong, right, out = tmp_path / "wrong.txt", tmp_path / "right.txt", tmp_path / "corpus.txt"
    wrong.write_text("a wrong file\n")
    right.write_text("the right file\n")
    out.mkdir()  # the copy fails where the file would land
    assert "is a directory" in one_line(lwnmt("extract", wrong, out))
    assert not Path(f"{out}.sha256").exists()
    out.rmdir()
    assert lwnmt("extract", right, out).returncode == 0 and out.read_text() == "the right file\n"


def test_pick_lenpen_names_a_score_file_without_bleu(tmp_path):
    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text('{"bleu": 30.5}')
    bad.write_text('{"chrf": 50}')
    line = one_line(lwnmt("pick-lenpen", good, bad, "--lenpen", "1", "1.2", "--out", tmp_path / "p.json"))
    assert f"{bad}: no BLEU in it" in line and not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "args, option, minimum",
    [
        (("tokenize", "in", "out", "--lang", "de", "-j", "-2"), "--workers/-j", 1),
        (("apply-bpe", "in", "out", "-j", "0"), "--workers/-j", 1),
        (("learn-bpe", "in", "--out", "c", "-s", "0"), "--merges/-s", 1),
        (("vocab", "in", "--out", "d", "--nwords", "-3"), "--nwords", -1),
        (("vocab", "in", "--out", "d", "--padding-factor", "-8"), "--padding-factor", 1),
        (("concat", "in", "--out", "o", "--max-lines", "-1"), "--max-lines", 1),
        (("translate", "--nbest", "-1"), "--nbest", 0),
        (("params", "--vocab", "0"), "--vocab", 1),
    ],
)
def test_an_impossible_count_is_a_usage_error_naming_the_option(args, option, minimum):
    """Negative sizes were accepted (a vocabulary padded to -8, --max-lines -1 a traceback, -s 0 an empty file)."""
    result = lwnmt(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"argument {option}: {args[-1]}: expected an integer ≥ {minimum}" in result.stderr.splitlines()[-1]


def test_bpe_input_errors_name_the_file_and_line(tmp_path):
    """Empty training text was a ValueError traceback, Latin-1 text a UnicodeDecodeError naming no file, and a
    codes file of another kind subword-nmt's message without the file's name (a binary one a traceback)."""
    empty, latin1, text, codes = (tmp_path / name for name in ("empty.txt", "latin1.txt", "text.txt", "codes"))
    empty.write_text("")
    latin1.write_bytes("Übersetzung\n".encode("latin-1"))
    text.write_text("hallo welt\n")
    assert f"{empty}: no words to learn BPE from" in one_line(lwnmt("learn-bpe", empty, "--out", codes, "-s", "5"))
    line = one_line(lwnmt("learn-bpe", text, latin1, "--out", codes, "-s", "5"))
    assert f"{latin1}:1: invalid UTF-8" in line and not codes.exists()
    codes.write_text("#version: 0.2\nh a\none two three\n")
    line = one_line(lwnmt("apply-bpe", text, tmp_path / "out.txt", "-c", codes))
    assert f"{codes}:3: 'one two three' is not a merge" in line and not (tmp_path / "out.txt").exists()


def test_an_empty_vocabulary_is_refused_where_it_is_made_and_where_it_is_used(tmp_path):
    empty, text = tmp_path / "empty.txt", tmp_path / "text.txt"
    empty.write_text("")
    text.write_text("hallo welt\n")
    assert f"{empty}: no words" in one_line(lwnmt("vocab", empty, "--out", tmp_path / "dict.txt"))
    assert not (tmp_path / "dict.txt").exists()
    line = one_line(lwnmt("binarize", text, tmp_path / "bin", "--vocab", empty))
    assert f"{empty}: no symbols" in line and not list(tmp_path.glob("bin*"))


def test_summary_names_a_file_that_is_not_a_table_csv(tmp_path):
    """A table's .md given for its .csv wrote an empty summary and exited 0; an empty file was a pandas traceback."""
    markdown, empty = tmp_path / "T1.md", tmp_path / "T2.csv"
    markdown.write_text("| row | ours |\n|---|---|\n")
    empty.write_text("")
    line = one_line(lwnmt("summary", markdown, "--out-prefix", tmp_path / "summary"))
    assert f"{markdown}: no column(s) ours, row, status" in line and not list(tmp_path.glob("summary*"))
    assert f"{empty}: not readable as CSV" in one_line(lwnmt("summary", empty, "--out-prefix", tmp_path / "s"))


def test_inspect_names_missing_and_unknown_options(tmp_path):
    line = one_line(
        lwnmt("inspect", "m.pt", "--kind", "attention", "--options", '{"data": "d", "sentense": 1}', "--out", "o")
    )
    assert "--options for attention: missing src, tgt, source, hypothesis, sentence, module; unknown sentense" in line


def test_evidence_and_params_refuse_what_they_would_otherwise_ignore(tmp_path):
    """`evidence copy --partial` from a misspelt --results folder copied nothing and exited 0; `params --tgt-vocab`
    alone was ignored."""
    study = ("--config", "config.yaml", "--config", "config/study_cpu.yaml", "--table", "study_cpu/T1")
    copied = lwnmt("evidence", "copy", *study, "--seed", 1, "--out", tmp_path / "docs", "--results", tmp_path / "no")
    assert f"--results {tmp_path / 'no'}: no such folder" in one_line(copied)
    collected = lwnmt("evidence", "collect", *study, "--out", tmp_path / "none")
    assert f"--out {tmp_path / 'none'}: no such folder" in one_line(collected)
    line = one_line(lwnmt("params", "--config", "config.yaml", "--tgt-vocab", "8000"))
    assert "--src-vocab and --tgt-vocab: expected both" in line


# 5. an overlay's mistakes are named where the user wrote them


@pytest.mark.parametrize(
    "data, expected",
    [
        (  # a warm-start cycle was a RecursionError traceback
            {"experiments": {"demo.transformer": {"warm_start": "demo.gca_full"}}},
            "config key experiments/demo.transformer/warm_start: cycle demo.transformer → demo.gca_full → "
            "demo.transformer",
        ),
        (  # an AttributeError traceback
            {"experiments": "demo.transformer"},
            "config key experiments: a str; expected a mapping of names to settings",
        ),
        ({"experiments": {"demo.transformer": {"seeds": [-1]}}}, "seeds/0: -1 is less than the minimum of 0"),
        ({"defaults": {"seeds": [1, 1]}}, "config key defaults/seeds: [1, 1] has non-unique elements"),
        (  # a task translating into its own language was "ok, can run"
            {"tasks": {"multi30k_deen": {"tgt": "de"}}},
            "config key tasks/multi30k_deen/tgt: 'de', the source language too",
        ),
        (  # named config/demo.yaml and rows/6
            {"papers": {"demo": {"tables": {"T1": {"append_rows": {"x": {"label": "X", "experiment": "demo.no"}}}}}}},
            "config key papers/demo/tables/T1/append_rows/x/experiment: unknown experiment 'demo.no'",
        ),
        (  # named config.yaml and a generated experiment's key only
            {"compare": {"mine": {"task": "multi30k_deen", "preset": "demo", "decode": {"beam": 0}}}},
            "config key compare/mine, whose experiment mine.transformer/decode/beam: 0; expected an integer ≥ 1",
        ),
    ],
)
def test_an_overlays_mistake_is_one_line_naming_the_overlay_and_its_key(tmp_path, data, expected):
    mine = overlay(tmp_path, data)
    line = one_line(lwnmt("status", "--config", "config.yaml", "--config", "config/demo.yaml", "--config", mine))
    assert f"{mine}: " in line and expected in line


def test_a_key_given_twice_in_one_mapping_is_refused_with_both_lines(tmp_path):
    """PyYAML keeps the last of two equal keys: a second `train:` (or `experiments:` block) replaced the first."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("experiments:\n  demo.transformer:\n    train: {max_tokens: 2048}\n    train: {lr: 0.001}\n")
    line = one_line(lwnmt("status", "--config", "config.yaml", "--config", "config/demo.yaml", "--config", mine))
    assert f"{mine}, line 4, column 5" in line and "key 'train' given twice (first at line 3)" in line


def test_lwnmt_help_lists_the_users_commands_apart_from_the_pipelines_steps():
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "layerwise_nmt", "--help"], capture_output=True, text=True).stdout
    users, steps = shown.split("your commands:")[1].split("the pipeline's steps")
    assert "  translate " in users and "  status " in users and "  binarize " not in users
    assert "  binarize " in steps and "  check-reference " in steps and "  translate " not in steps
