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


def test_a_yaml_syntax_error_in_an_overlay_names_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets:\n  tasks: [multi30k_deen]\n  tables: [demo/T1\nexperiments: {}\n")
    line = snakemake_error(
        snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config/demo.yaml"), str(bad), check=False)
    )
    assert line.startswith(f"config file {bad}, line 4, column 12: not valid YAML: expected ',' or ']'"), line
    assert line.endswith("(while parsing a flow sequence at line 3, column 11)")  # where the list began
    assert one_line(lwnmt("status", "--config", "config.yaml", "--config", bad)) == f"lwnmt status: error: {line}"


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
    line = snakemake_error(
        snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config/demo.yaml"), str(typo), check=False)
    )
    assert line.startswith(f"{typo}: {expected}"), line
    status = lwnmt("status", "--config", "config.yaml", "--config", "config/demo.yaml", "--config", typo)
    assert one_line(status) == f"lwnmt status: error: {line}"


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
