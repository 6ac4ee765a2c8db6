"""A corpus from the user's own files, and the four methods compared on it by config alone
(config/your-corpus.example.yaml): the overlay's expansion, its bad input, and one run through the real rules."""

import csv
import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, snakemake
from layerwise_nmt import UserError, grid
from layerwise_nmt.training import checkpoint
from layerwise_nmt.data.prepare import assemble

PAIR = ("xx", "yy")  # a language pair no task of the grid uses, and one the Moses tokenizer has no rules for


def corpus(root: Path, sizes=(("train", 300), ("dev", 40), ("test", 40)), seed: int = 0) -> Path:
    """Synthetic pairs: yy is xx's words renamed and reversed; the training files gzipped."""
    rng = random.Random(seed)
    words = [f"xa{i}" for i in range(60)]
    root.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        src = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + " ." for _ in range(n)]
        tgt = [" ".join(w.replace("xa", "yb") for w in reversed(s.split()[:-1])) + " ." for s in src]
        for lang, lines in zip(PAIR, (src, tgt), strict=True):
            text = "\n".join(lines) + "\n"
            if split == "train":
                with gzip.open(root / f"train.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)
            else:
                (root / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return root


def overlay(tmp_path: Path, corpus_dir: Path, **compare) -> Path:
    spec = {
        "datasets": {
            "my-corpus": {
                "local": {
                    "dir": str(corpus_dir),
                    "train": "train.{lang}.gz",
                    "valid": "dev.{lang}",
                    "test": "test.{lang}",
                }
            }
        },
        "tasks": {"my_xxyy": {"dataset": "my-corpus", "src": "xx", "tgt": "yy", "bpe": {"merges": 200}}},
        "compare": {"mine": {"task": "my_xxyy", "preset": "demo", "seeds": [1], **compare}},
    }
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def edit(path: Path, change) -> Path:
    spec = yaml.safe_load(path.read_text())
    change(spec)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def load(path: Path) -> dict:
    return grid.load(ROOT / "config.yaml", path)


def test_the_example_overlay_expands_to_the_comparison():
    config = load(ROOT / "config" / "your-corpus.example.yaml")
    ((name, spec),) = config["compare"].items()
    rows = config["papers"][name]["tables"]["T1"]["rows"]
    assert [r["experiment"].split(".", 1)[1] for r in rows] == [
        "transformer",
        "lwc",
        "mlrf_dec_sa",
        "gca_full",
        "dou_deep",
        "transformer_longer",
    ]
    assert config["targets"] == {"tasks": [spec["task"]], "tables": [f"{name}/T1"], "figures": [f"{name}/buckets"]}
    assert len((ROOT / "config" / "your-corpus.example.yaml").read_text().splitlines()) <= 60


def test_expansion(tmp_path):
    path = overlay(
        tmp_path,
        corpus(tmp_path / "corp", (("train", 300), ("dev", 40), ("test", 40), ("news", 20))),
        preset="iwslt",
        methods=["gca"],
    )
    config = load(edit(path, lambda s: s["datasets"]["my-corpus"]["local"].update(tests={"news": "news.{lang}"})))
    assert config["datasets"]["my-corpus"]["files"]["train.xx"] == {"path": "train.xx.gz"}
    task = config["tasks"]["my_xxyy"]
    assert task["splits"]["valid"]["parts"] == ["valid.{lang}"] and task["estimate"]["train_pairs"] == 300
    assert sorted(n for n in config["experiments"] if n.startswith("mine.")) == [
        "mine.gca_full",
        "mine.transformer",
        "mine.transformer_longer",
    ]
    gca = config["experiments"]["mine.gca_full"]
    assert gca["warm_start"] == "mine.transformer" and gca["arch"]["preset"] == "iwslt"
    table = config["papers"]["mine"]["tables"]["T1"]
    assert table["metric"] == ["bleu", "chrf", "news_bleu", "news_chrf"] and table["verdict"] is True
    assert task["splits"]["news"] == {"parts": ["news.{lang}"], "format": "plain", "overlap_with_train": "warn"}
    assert config["datasets"]["my-corpus"]["files"]["news.yy"] == {"path": "news.yy"}
    assert "test sets test, news: tokenized BLEU and chrF (sacrebleu), cased;" in table["caption"]
    assert grid.runnable_tasks(config) == ["my_xxyy"]
    assert grid.load(ROOT / "config.yaml", tmp_path / "mine.yaml") == config  # the same however often it runs
    lowercased = load(edit(path, lambda s: s["tasks"]["my_xxyy"].update(lowercase=True)))["papers"]["mine"]
    assert "chrF (sacrebleu), lowercased (the task lowercases its text" in lowercased["tables"]["T1"]["caption"]
    assert "(lowercased (the task" in lowercased["figures"]["buckets"]["caption"]


def test_status_says_what_is_missing_and_plan_prices_it(tmp_path, capsys):
    from layerwise_nmt.cli import main

    path = overlay(tmp_path, tmp_path / "absent")
    main(["status", "--config", str(ROOT / "config.yaml"), "--config", str(path)])
    out = capsys.readouterr().out  # the key the user wrote (local: dir), not the user_path it expands to
    assert f"datasets/my-corpus/local/dir {tmp_path / 'absent'}: no such directory; expected one holding " in out
    assert "train.xx.gz, train.yy.gz, dev.xx" in out
    (tmp_path / "absent").mkdir()
    main(["status", "--config", str(ROOT / "config.yaml"), "--config", str(path)])
    assert "lacks train.xx.gz, train.yy.gz, dev.xx" in capsys.readouterr().out
    corpus(tmp_path / "absent")
    main(["plan", "--config", str(ROOT / "config.yaml"), "--config", str(path)])
    assert "mine T1       6    6" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda s: s["datasets"]["my-corpus"]["local"].update(train={"xx": "train.yy.gz", "yy": "train.xx.gz"}),
            "config key datasets/my-corpus/local/train/xx: train.yy.gz is named for language 'yy', not 'xx'",
        ),
        (
            lambda s: s["datasets"]["my-corpus"]["local"].update(test={"xx": "test.xx", "en": "test.en"}),
            "config key datasets/my-corpus/local/test: files for xx, en, but task my_xxyy translates xx→yy",
        ),
        (
            lambda s: s["tasks"]["my_xxyy"].update(tgt="zz"),
            "has train.yy.gz but no train.zz.gz; task my_xxyy's languages are xx/zz",
        ),
        (
            lambda s: s["tasks"]["my_xxyy"].update(splits={"train": {}, "valid": {}, "test": {"empty_lines": "drop"}}),
            "config key tasks/my_xxyy/splits/test/empty_lines: drop; an evaluation set's lines must stay aligned",
        ),
        (lambda s: s["compare"]["mine"].update(task="my_xxzz"), "config key compare/mine/task: unknown task 'my_xxzz'"),
        (lambda s: s["compare"]["mine"].update(preset="huge"), "config key compare/mine/preset: 'huge' is not one of"),
        (
            lambda s: s["datasets"]["my-corpus"]["local"].update(train="train.{lang}-{tgt}.gz"),
            "config key datasets/my-corpus/local/train: 'train.{lang}-{tgt}.gz' is not a name with {lang} in it",
        ),
    ],
)
def test_config_errors_name_the_key(tmp_path, change, message):
    path = edit(overlay(tmp_path, corpus(tmp_path / "corp")), change)
    with pytest.raises(UserError) as err:
        load(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_corrupt_gz_among_the_users_files_leaves_the_config_loading(tmp_path):
    """Counting the training pairs for `lwnmt plan` skips a file it cannot read (the extract job names it), a .gz
    whose deflate stream is damaged (zlib.error, not an OSError) included."""
    root = corpus(tmp_path / "corp")
    data = (root / "train.yy.gz").read_bytes()
    (root / "train.yy.gz").write_bytes(data[:12] + bytes(b ^ 0x5A for b in data[12:-8]) + data[-8:])
    config = load(overlay(tmp_path, root))
    assert config["tasks"]["my_xxyy"].get("estimate") is None


def lwnmt(*args):
    return subprocess.run([sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, text=True)


def error_line(result) -> str:
    assert result.returncode == 1, result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_invalid_utf8_is_named_by_the_users_file_and_line(tmp_path):
    bad = tmp_path / "train.xx"
    bad.write_bytes(b"good\nba\xe9d\n")
    assert f"{bad}:2: invalid UTF-8" in error_line(lwnmt("extract", bad, tmp_path / "raw" / "train.xx", "--text"))
    assert not (tmp_path / "raw" / "train.xx").exists()
    gz = tmp_path / "train.yy.gz"
    gz.write_bytes(gzip.compress(b"good\nfine\nba\xe9d\n"))
    assert f"{gz}:3: invalid UTF-8" in error_line(
        lwnmt("extract", gz, tmp_path / "raw" / "train.yy", "--text", "--archive")
    )


@pytest.mark.parametrize(
    "content", [gzip.compress(b"", mtime=0), b"", b"\x1f\x8b\x08 not gzip after all"], ids=["empty", "0-byte", "broken"]
)
def test_an_empty_or_broken_gz_of_the_users_is_refused_without_advice_to_delete_it(tmp_path, content):
    """An empty .gz would pass every step up to training's first validation; a damaged one is the user's own copy,
    perhaps the only one: no "delete it and fetch it again"."""
    gz, out = tmp_path / "dev.xx.gz", tmp_path / "raw" / "dev.xx"
    gz.write_bytes(content)
    line = error_line(lwnmt("extract", gz, out, "--text", "--archive"))
    assert line.startswith(f"lwnmt extract: error: {gz}") and "delete" not in line, line
    expected = "is empty" if content == gzip.compress(b"", mtime=0) else "expected gzip-compressed UTF-8 text"
    assert expected in line, line
    assert not out.exists() and gz.read_bytes() == content


@pytest.mark.parametrize("name, archive", [("dev.xx", []), ("train.xx.gz", ["--archive"])])
def test_a_file_changed_after_first_use_is_refused(tmp_path, name, archive):
    source, out = tmp_path / name, tmp_path / "raw" / "file"
    write = (lambda text: source.write_bytes(gzip.compress(text))) if archive else source.write_bytes
    write(b"one\ntwo\n")
    assert lwnmt("extract", source, out, "--text", *archive).returncode == 0
    assert (tmp_path / "raw" / "file.sha256").is_file()
    write(b"one\nthree\n")
    out.unlink()  # Snakemake removes a job's output before it runs the job again
    line = error_line(lwnmt("extract", source, out, "--text", *archive))
    assert str(source) in line and "the first copy of this file had" in line and "file.sha256" in line


def parts(tmp_path: Path, files: dict[str, str]) -> dict:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")

    def part(s: str, t: str) -> list:
        return [[str(tmp_path / s), str(tmp_path / t), str(tmp_path / s), str(tmp_path / t), "plain"]]

    return {
        "train": {"parts": part("tr.xx", "tr.yy")},
        "valid": {"parts": part("va.xx", "va.yy")},
        "test": {"parts": part("te.xx", "te.yy"), "overlap_with_train": "warn"},
    }


def outputs(tmp_path: Path) -> dict:
    return {s: (str(tmp_path / f"out.{s}.xx"), str(tmp_path / f"out.{s}.yy")) for s in ("train", "valid", "test")}


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    spec = parts(
        tmp_path,
        {"tr.xx": "a\nb\nc\n", "tr.yy": "A\nB\n", "va.xx": "v\n", "va.yy": "V\n", "te.xx": "t\n", "te.yy": "T\n"},
    )
    with pytest.raises(UserError, match=r"tr.xx has 3 segments but .*tr.yy has 2; parallel files must have equal"):
        assemble(spec, outputs(tmp_path), str(tmp_path / "stats.json"))
    assert not list(tmp_path.glob("out.*"))


def test_empty_lines_dropped_and_counted_or_refused(tmp_path, caplog):
    files = {
        "tr.xx": "a\n  \nc\nd\n",
        "tr.yy": "A\nB\n\t\nD\n",
        "va.xx": "v\n",
        "va.yy": "V\n",
        "te.xx": "a\nnew\n",
        "te.yy": "A\nNEW\n",
    }
    stats = assemble(parts(tmp_path, files), outputs(tmp_path), str(tmp_path / "stats.json"))
    assert stats["train"]["empty"] == 2 and stats["train"]["kept"] == 2
    assert "train: dropped 2 pairs (empty)" in caplog.text
    assert stats["test"]["in_train"] == 1  # "a" is also a training source
    assert "test: 1 of 2 source sentences also occur in the training data" in caplog.text
    spec = parts(tmp_path, files)
    spec["train"]["empty_lines"] = "refuse"
    with pytest.raises(UserError, match=r"train line 2 .*empty segment \(raw .*tr.xx:2, empty or whitespace only\)"):
        assemble(spec, outputs(tmp_path), str(tmp_path / "stats2.json"))
    assert not (tmp_path / "stats2.json").exists()


@pytest.mark.system
def test_the_four_methods_and_ones_own_on_a_corpus_of_ones_own(tmp_path):
    """Through the real rules at a tiny size: files → data → seven trainings (the baseline, the four papers'
    methods, the example's own method from examples/layer_mix/, the control) → decoding → scores → one table, the
    figure."""
    example = yaml.safe_load((ROOT / "examples" / "layer_mix" / "overlay.yaml").read_text())
    example["models"]["layer_mix"]["user_dir"] = str(ROOT / "examples" / "layer_mix")
    sizes = (("train", 300), ("dev", 40), ("test", 40), ("news", 30))  # news: a second test set, named
    path = overlay(
        tmp_path,
        corpus(tmp_path / "corp", sizes),
        arch={"d_model": 32, "d_ff": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2},
        lwc_layers=3,
        decode={"beam": 2, "batch_size": 64},
        train={"max_tokens": 500, "warmup_updates": 5, "total_num_update": 30, "max_update": 30, "log_interval": 10},
        own_methods=example["compare"]["mix"]["own_methods"],
        **{"continue": {"warmup_updates": 2, "total_num_update": 10, "max_update": 10}},
    )
    edit(path, lambda s: s.update(models=example["models"]))
    edit(path, lambda s: s["datasets"]["my-corpus"]["local"].update(tests={"news": "news.{lang}"}))
    snakemake(tmp_path / "run", "tables", "--configfile", str(path))
    results = tmp_path / "run" / "results"
    with open(results / "tables" / "mine" / "T1.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [row["row"] for row in table] == [
        "Transformer baseline",
        "LWC, He et al. 2018 (shared layers over [source; target])",
        "MLRF Dec-SA, Wang et al. 2018 (4 hops)",
        "GCA full model, Liu et al. 2020 (from the baseline)",
        "Dou et al. 2018 + Deep Representations (from the baseline)",
        "Learned layer mix, ELMo's scalar mix per decoder layer (ours)",
        "Baseline trained on as long (the warm-started rows' control)",
    ]
    for column in (
        "ours bleu",
        "ours chrf",
        "ours news_bleu",
        "ours news_chrf",
        "updates",
        "sentences seen",
        "target tokens",
    ):
        assert all(row[column] != "—" for row in table), column
    for column in ("p vs bleu", "p vs chrf", "p vs news_bleu", "p vs news_chrf"):  # each method's own p-values
        assert all(row[column] != "—" for row in table[1:6]), column
    assert [row["updates"] for row in table] == ["30", "30", "30", "10", "10", "30", "10"]
    assert {row["status"] for row in table} == {"ours"}
    assert table[3]["p vs bleu"].endswith(" mine.transformer_longer)")  # a warm start: against its control
    assert table[5]["p vs bleu"].endswith(" mine.transformer)") and table[5]["p vs chrf"].endswith(" mine.transformer)")
    for row in table[1:6]:  # each method: who won, on every metric, against its own control, by the same test
        control = "mine.transformer_longer" if "(from the baseline)" in row["row"] else "mine.transformer"
        assert row["verdict"].startswith(
            f"vs {control}, paired bootstrap resampling (Koehn 2004), first seeds at p < 0.05: BLEU "
        ), row["verdict"]
        assert [part.split(" (")[0].split(" ", 1)[0] for part in row["verdict"].split(": ", 1)[1].split("; ")] == [
            "BLEU",
            "chrF",
            "news",
            "news",
        ]
    assert table[0]["verdict"] == table[6]["verdict"] == "—"
    md = (results / "tables" / "mine" / "T1.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| row"))
    assert "paper" not in header and "delta" not in header and "| verdict |" in header
    assert "test sets test, news: tokenized BLEU and chrF (sacrebleu), cased;" in md
    assert (results / "figures" / "mine" / "buckets.png").is_file()
    trained = checkpoint.load(results / "my_xxyy" / "mine.layer_mix" / "seed1" / "model.pt")
    assert (trained["model_name"], trained["model_class"]) == ("layer_mix", "layer_mix:LayerMixTransformer")
    logs = results / "logs" / "my_xxyy"
    assert "no rules for language 'xx'" in (logs / "tokenize" / "train.xx.log").read_text()
    stats = json.loads((results / "my_xxyy" / "data" / "text" / "stats.xx-yy.json").read_text())
    assert stats["train"]["kept"] == 300 and stats["test"]["in_train"] == 0
    news = json.loads((results / "my_xxyy" / "data" / "text" / "stats.news.xx-yy.json").read_text())
    assert news["news"]["in_train"] == 0


def test_sides_that_come_tokenized_or_segmented_skip_those_steps(tmp_path):
    from types import SimpleNamespace

    path = edit(
        overlay(tmp_path, corpus(tmp_path / "corp")),
        lambda s: s["tasks"]["my_xxyy"].update(bpe={"merges": 200, "segmented": ["yy"]}),
    )
    config = load(path)
    task = config["tasks"]["my_xxyy"]
    assert grid.tokenize_options(task, "yy", task["splits"]["train"])["tokenizer"] == "none"
    assert "tokenizer" not in grid.tokenize_options(task, "xx", task["splits"]["train"])
    inputs = grid.RuleInputs(config)
    job = lambda lang: SimpleNamespace(task="my_xxyy", lang=lang)  # noqa: E731
    assert inputs.bpe_learn_texts(job("xx")) == ["results/my_xxyy/data/text/train.xx-yy.xx"]
    assert inputs.bpe_codes(job("xx")) == ["results/my_xxyy/data/bpe/code"] and inputs.bpe_codes(job("yy")) == []


def test_chinese_is_segmented_as_the_wmt17_task_does(tmp_path):
    corpus_dir = tmp_path / "corp"
    corpus_dir.mkdir()
    path = edit(overlay(tmp_path, corpus_dir), lambda s: s["tasks"]["my_xxyy"].update(src="zh"))
    task = load(path)["tasks"]["my_xxyy"]
    wmt17 = load(ROOT / "config" / "demo.yaml")["tasks"]["wmt17_zhen"]
    options = grid.tokenize_options(task, "zh", task["splits"]["train"])
    assert options["tokenizer"] == wmt17["tokenize"]["zh"]["tokenizer"] == "jieba"


def test_unequal_copies_name_the_users_files(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.xx").write_text("a\nb\nc\n")
    (tmp_path / "mine" / "train.yy.gz").write_bytes(gzip.compress(b"A\nB\n"))
    raw = tmp_path / "raw"
    assert lwnmt("extract", tmp_path / "mine" / "train.xx", raw / "train.xx", "--text").returncode == 0
    assert lwnmt("extract", tmp_path / "mine" / "train.yy.gz", raw / "train.yy", "--text", "--archive").returncode == 0
    part = [str(raw / "train.xx"), str(raw / "train.yy"), str(raw / "train.xx"), str(raw / "train.yy"), "plain"]
    with pytest.raises(UserError) as err:
        assemble(
            {"train": {"parts": [part]}, "valid": {"hold_out_every": 2}},
            outputs(tmp_path),
            str(tmp_path / "stats.json"),
        )
    assert str(err.value) == (
        f"{raw / 'train.xx'} has 3 segments but {raw / 'train.yy'} has 2; parallel files must "
        f"have equal counts (copies of {tmp_path / 'mine' / 'train.xx'} and "
        f"{tmp_path / 'mine' / 'train.yy.gz'})"
    )


def test_a_named_test_set_assembled_apart_from_train_counts_its_overlap_with_it(tmp_path):
    """A named test set is assembled after train, by its own job (`lwnmt assemble` with only that split): its
    overlap is counted against the training text in the same folder (it raised KeyError: 'train')."""
    files = {
        "tr.xx": "a\nb\n",
        "tr.yy": "A\nB\n",
        "va.xx": "v\n",
        "va.yy": "V\n",
        "te.xx": "t\n",
        "te.yy": "T\n",
        "ne.xx": "b\nnew\nb\n",
        "ne.yy": "B\nNEW\nB\n",
    }
    spec = parts(tmp_path, files)
    out = tmp_path / "text"

    def run(spec, stats):
        return lwnmt(
            "assemble",
            "--spec",
            json.dumps({"splits": spec}),
            "--src",
            "xx",
            "--tgt",
            "yy",
            "--out-dir",
            out,
            "--stats",
            out / stats,
        )

    assert run(spec, "stats.xx-yy.json").returncode == 0
    news = {
        "news": {
            "parts": [[str(tmp_path / n) for n in ("ne.xx", "ne.yy", "ne.xx", "ne.yy")] + ["plain"]],
            "overlap_with_train": "warn",
        }
    }
    result = run(news, "stats.news.xx-yy.json")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "stats.news.xx-yy.json").read_text())["news"]["in_train"] == 2
    assert "news: 2 of 3 source sentences also occur in the training data" in result.stderr


def test_a_named_test_sets_job_reads_the_training_text_it_is_checked_against(tmp_path):
    from types import SimpleNamespace

    files = corpus(tmp_path / "corp", (("train", 300), ("dev", 40), ("test", 40), ("news", 20)))
    config = load(
        edit(
            overlay(tmp_path, files),
            lambda s: s["datasets"]["my-corpus"]["local"].update(tests={"news": "news.{lang}"}),
        )
    )
    assert config["tasks"]["my_xxyy"]["splits"]["news"]["overlap_with_train"] == "warn"
    inputs = grid.RuleInputs(config)
    news = inputs.assemble_inputs(SimpleNamespace(task="my_xxyy", split="news"))
    assert "results/my_xxyy/data/text/train.xx-yy.xx" in news
    assert not any("text/train" in path for path in inputs.assemble_inputs(SimpleNamespace(task="my_xxyy")))


def test_files_named_by_three_letter_codes_or_words_are_taken_as_given(tmp_path):
    """`test: {fi: newstest.fin.txt, et: newstest.est.txt}` (the example overlay's form): a three-letter part of a
    name is another code form (ISO 639-2) or a word, not a language contradicting the task's two-letter codes; a
    two-letter code of another language still is."""
    root = corpus(tmp_path / "corp")
    for lang, name in (("xx", "newstest.xxa.txt"), ("yy", "newstest.raw")):
        (root / name).write_text((root / f"test.{lang}").read_text())
    named = {"xx": "newstest.xxa.txt", "yy": "newstest.raw"}
    path = edit(overlay(tmp_path, root), lambda s: s["datasets"]["my-corpus"]["local"].update(test=named))
    assert load(path)["datasets"]["my-corpus"]["files"]
    other = {"xx": "test.de", "yy": "test.yy"}
    edit(path, lambda s: s["datasets"]["my-corpus"]["local"].update(test=other))
    with pytest.raises(UserError, match="test.de is named for language 'de', but task my_xxyy translates xx→yy"):
        load(path)


@pytest.mark.system  # runs Snakemake
def test_a_targeted_corpus_whose_folder_is_missing_stops_the_dry_run_naming_it(tmp_path):
    from conftest import snakemake

    overlay = tmp_path / "mine.yaml"
    overlay.write_text(
        (ROOT / "config" / "your-corpus.example.yaml").read_text().replace("~/corpora/fi-et", str(tmp_path / "nope"))
    )
    result = snakemake(tmp_path, "-n", "--configfile", str(overlay), check=False)
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert f"datasets/my-corpus/local/dir {tmp_path / 'nope'}: no such directory" in said
