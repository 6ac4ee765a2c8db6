"""A model from outside the package, named in the config by module and class (examples/layer_mix/): its contract,
every place a built-in model goes (training and resume, averaging, the model directory, translate, params, plan),
the workflow reading it without torch or the module, rows beside the papers', and each bad input in one line."""

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT, TINY, assert_autoregressive, snakemake, tiny_batch, toy_spec, train_command
from test_driver_env import driver_fixture, run as run_driver  # noqa: F401 (the `driver` fixture: Snakemake alone)
from layerwise_nmt import UserError
from layerwise_nmt.training import checkpoint
from layerwise_nmt import grid
from layerwise_nmt.grid.stage_checks import check_experiments
from layerwise_nmt.job_specs import InspectSpec
from layerwise_nmt.models import UserModel, build, count_built
from layerwise_nmt.models.transformer import count_parameters

EXAMPLE = ROOT / "examples" / "layer_mix"
LAYER_MIX = UserModel("layer_mix", "layer_mix:LayerMixTransformer", str(EXAMPLE), "config key models/layer_mix/class")


def example_overlay(tmp_path: Path, **change) -> Path:
    """The example's overlay with its user_dir absolute (the tests run Snakemake in other directories)."""
    spec = yaml.safe_load((EXAMPLE / "overlay.yaml").read_text())
    spec["models"]["layer_mix"]["user_dir"] = str(EXAMPLE)
    for key, value in change.items():
        spec[key] = value
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def lwnmt(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def error_line(result) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    return lines[-1]


def test_the_example_keeps_the_contract():
    """Causal in the target, cached beam search = recomputation, every decoder layer reading its own mix of the
    encoder's layers, and the meta-device count equal to the built model's."""
    settings = {**TINY["transformer"], "decoder_layers": 2}
    torch.manual_seed(0)
    model = build("layer_mix", settings, LAYER_MIX).eval()
    src, prev = tiny_batch("transformer")
    assert_autoregressive(model, src, prev)
    baseline = count_built("transformer", settings)
    assert count_built("layer_mix", settings, LAYER_MIX) == count_parameters(model) == baseline + 3 * 2 + 2
    assert count_built("layer_mix", {**settings, "per_layer": False, "embeddings": False}, LAYER_MIX) == baseline + 3
    with torch.no_grad():  # the mix reads the lower layers: weighting them otherwise changes the output
        before = model(src, prev)
        model.weights[:, 0] += 3.0
        assert not torch.allclose(model(src, prev), before, atol=1e-4)


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory) -> dict:
    """The example model trained on the toy data by `lwnmt train`'s library call, as the workflow's spec names it."""
    root = tmp_path_factory.mktemp("own")
    spec = {
        **toy_spec(max_update=4, save_interval_updates=2),
        "model": "layer_mix",
        "user_model": {"class": LAYER_MIX.target, "user_dir": str(EXAMPLE)},
    }
    from layerwise_nmt.training.loop import train

    train(spec, str(toy_data), "de", "en", str(root / "run"), str(root / "model.pt"))
    for lang in ("de", "en"):
        shutil.copy(toy_data.parent / "vocab" / "dict.joint.txt", root / f"dict.{lang}.txt")
    return {"root": root, "spec": spec, "data": toy_data}


def test_training_resume_averaging_and_the_model_file(trained, caplog):
    from layerwise_nmt.training.average import average
    from layerwise_nmt.training.loop import train

    root, spec = trained["root"], trained["spec"]
    state = checkpoint.load(root / "model.pt")
    assert (state["model_name"], state["model_class"]) == ("layer_mix", LAYER_MIX.target)
    assert "weights" in state["model"] and state["model_config"]["per_layer"] is True
    longer = {**spec, "train": {**spec["train"], "max_update": 6}}
    with caplog.at_level("INFO"):
        progress = train(longer, str(trained["data"]), "de", "en", str(root / "run"), str(root / "longer.pt"))
    assert progress["update"] == 6
    assert "resumed from" in caplog.text and "starting afresh" not in caplog.text
    average(checkpoint.last_checkpoints(root / "run", 2, "update"), root / "averaged.pt")
    assert checkpoint.load(root / "averaged.pt")["model_class"] == LAYER_MIX.target


@pytest.mark.system
def test_the_model_directory_names_the_code_it_needs_and_translate_imports_it_only_when_told(trained, tmp_path):
    from layerwise_nmt.inference import export

    root = trained["root"]
    out = export.write(
        root / "model.pt",
        tmp_path / "dir",
        "de",
        "en",
        root / "dict.de.txt",
        root / "dict.en.txt",
        None,
        {"tokenizer": "none"},
        {"beam": 2},
        {},
    )
    manifest = json.loads((out / "lwnmt.json").read_text())
    assert (manifest["model_class"], manifest["needs_module"]) == (LAYER_MIX.target, "layer_mix")
    source = tmp_path / "in.de"
    source.write_text("w1 w2 w3\nw4 w5\n")
    refused = error_line(lwnmt("translate", source, "--model", out, cwd=tmp_path))
    assert refused == (
        f"lwnmt translate: error: {out}/model.pt: model 'layer_mix' is layer_mix:LayerMixTransformer, "
        f"code from outside the package, and loading a model never imports code on its own: name it "
        f"with --user-dir FOLDER (the folder holding module layer_mix) or --user-module layer_mix"
    )
    done = lwnmt("translate", source, "--model", out, "--user-dir", EXAMPLE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    missing = error_line(lwnmt("translate", source, "--model", out, "--user-dir", tmp_path, cwd=tmp_path))
    assert missing == (
        f"lwnmt translate: error: {out}/model.pt: model 'layer_mix' (layer_mix:LayerMixTransformer): "
        f"cannot import module 'layer_mix' from {tmp_path}: ModuleNotFoundError: No module named "
        f"'layer_mix'"
    )


def test_inspect_reads_its_attention_when_told_its_code(trained, tmp_path):
    """An attention figure's row on one's own model: `lwnmt inspect` (the workflow's inspect job) imports the code
    only when named, as translate does, and the job is given the config's own flags."""
    root = trained["root"]
    (tmp_path / "src.de").write_text("w1 w2 w3\n")
    (tmp_path / "hyp.en").write_text("w4 w5\n")
    options = {
        "data": str(root),
        "src": "de",
        "tgt": "en",
        "source": str(tmp_path / "src.de"),
        "hypothesis": str(tmp_path / "hyp.en"),
        "sentence": 0,
        "module": "decoder.layers.0.cross_attn",
    }
    args = (
        "inspect",
        root / "model.pt",
        "--kind",
        "attention",
        "--options",
        json.dumps(options),
        "--out",
        tmp_path / "attention.json",
    )
    refused = error_line(lwnmt(*args, cwd=tmp_path))
    assert refused.startswith("lwnmt inspect: error: ") and "--user-dir FOLDER" in refused
    done = lwnmt(*args, "--user-dir", EXAMPLE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    attention = json.loads((tmp_path / "attention.json").read_text())
    assert len(attention["grid"]) == 3 and len(attention["grid"][0]) == 4  # "w4 w5 </s>" x "w1 w2 w3 </s>"
    # the inspect rule's spec names the code as the config does
    spec = InspectSpec("attention", options, {"class": LAYER_MIX.target, "user_dir": str(EXAMPLE)}).to_json()
    (tmp_path / "attention.json").unlink()
    done = lwnmt("inspect", root / "model.pt", "--spec", spec, "--out", tmp_path / "attention.json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads((tmp_path / "attention.json").read_text()) == attention, done.stderr


def test_the_workflow_reads_it_with_neither_torch_nor_the_module(tmp_path):
    """What `snakemake -n` does with the config: load and check it, price and order the trainings, write each job's
    command; the module is named, never imported."""
    overlay = example_overlay(tmp_path)
    code = (
        "import json, sys; from types import SimpleNamespace as W; from layerwise_nmt import grid; "
        "from layerwise_nmt.grid.stage_checks import check_experiments; "
        "from layerwise_nmt.grid.budget_checks import budget_warnings; "
        "from layerwise_nmt.grid.pricing import experiment_cost; "
        f"c = grid.load('config.yaml', {str(overlay)!r}); check_experiments(c); grid.all_statuses(c); "
        "budget_warnings(c); [experiment_cost(c, n) for n in c['experiments']]; r = grid.RuleInputs(c); "
        "w = W(task='multi30k_deen', experiment='mix.layer_mix', seed='1'); "
        "print(json.dumps([json.loads(r.train_spec(w))['user_model'], json.loads(r.translate_spec(w))['user_model'], "
        "sorted(m for m in ('torch', 'numpy', 'layer_mix') if m in sys.modules)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    trained, decoded, imported = json.loads(out.stdout)
    assert trained == decoded == {"class": LAYER_MIX.target, "user_dir": str(EXAMPLE)} and imported == []


def test_params_and_plan_count_it_as_built(tmp_path, capsys):
    from layerwise_nmt.cli import main

    config = ["--config", str(ROOT / "config.yaml"), "--config", str(example_overlay(tmp_path))]
    main(["params", *config, "--vocab", "8000", "--format", "csv", "mix.transformer", "mix.layer_mix"])
    counts = {r["experiment"]: int(r["params"]) for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert counts["mix.layer_mix"] - counts["mix.transformer"] == (3 + 1) * 3 + 3
    main(["plan", *config])
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("mix T1"))
    assert line.split()[2:4] == ["7", "7"] and "not estimable" not in line, line
    header = next(line for line in out.splitlines() if line.startswith("table "))
    assert header.split()[:6] == ["table", "rows", "runs", "GPU-hours", "CPU-hours", "precision"]
    gpu, cpu = (
        float(cell.lstrip("≤≥~")) for cell in line.split()[4:6]
    )  # ≥: a small model's lower bound  # the demo preset: minutes on a GPU, under an hour on 2 cores
    assert 0 < gpu < 0.01 and 0.1 < cpu < 2


def test_rows_beside_the_papers(tmp_path):
    config = grid.load(ROOT / "config.yaml", example_overlay(tmp_path))
    rows = config["papers"]["mix"]["tables"]["T1"]["rows"]
    assert [r["experiment"] for r in rows] == [
        "mix.transformer",
        "mix.lwc",
        "mix.mlrf_dec_sa",
        "mix.gca_full",
        "mix.dou_deep",
        "mix.layer_mix",
        "mix.transformer_longer",
    ]
    assert rows[5]["compare_to"] == "mix.transformer"
    e = grid.experiment(config, "mix.layer_mix")
    assert e["model"] == "layer_mix" and e["arch"]["per_layer"] is True
    assert e["train"] == grid.experiment(config, "mix.transformer")["train"]  # the same budget as the baseline
    warm = example_overlay(
        tmp_path,
        compare={
            "mix": {
                "task": "multi30k_deen",
                "preset": "demo",
                "methods": ["lwc"],
                "own_methods": {"mix_warm": {"model": "layer_mix", "label": "from the baseline", "warm_start": True}},
            }
        },
    )
    config = grid.load(ROOT / "config.yaml", warm)
    rows = config["papers"]["mix"]["tables"]["T1"]["rows"]
    assert [r["experiment"] for r in rows] == ["mix.transformer", "mix.lwc", "mix.mix_warm", "mix.transformer_longer"]
    assert rows[2]["compare_to"] == "mix.transformer_longer"
    assert config["experiments"]["mix.mix_warm"]["warm_start"] == "mix.transformer"
    assert (
        config["experiments"]["mix.mix_warm"]["train"]["max_update"]
        == config["experiments"]["mix.transformer_longer"]["train"]["max_update"]
        == 300
    )


@pytest.mark.system
def test_an_overlay_adds_rows_without_restating_the_others(tmp_path):
    """Two overlays each add a row to the demo's table: `append_rows` is a mapping, which overlays merge key by
    key, in grid.load as in Snakemake's own merge of --configfile files."""
    first = tmp_path / "pre.yaml"
    first.write_text(
        yaml.safe_dump(
            {
                "experiments": {"demo.pre_norm": {"extends": "demo.transformer", "arch": {"norm": "pre"}}},
                "papers": {
                    "demo": {
                        "tables": {
                            "T1": {
                                "append_rows": {
                                    "pre": {
                                        "label": "Pre-norm baseline",
                                        "experiment": "demo.pre_norm",
                                        "compare_to": "demo.transformer",
                                    }
                                }
                            }
                        },
                        "figures": {
                            "buckets": {"append_rows": {"pre": {"label": "pre-norm", "experiment": "demo.pre_norm"}}}
                        },
                    }
                },
            }
        )
    )
    second = example_overlay(
        tmp_path,
        compare={},
        experiments={"demo.layer_mix": {"extends": "demo.transformer", "model": "layer_mix"}},
        papers={
            "demo": {
                "tables": {
                    "T1": {
                        "append_rows": {
                            "mix": {
                                "label": "Learned layer mix",
                                "experiment": "demo.layer_mix",
                                "compare_to": "demo.transformer",
                            }
                        }
                    }
                }
            }
        },
    )
    demo = grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml")["papers"]["demo"]
    config = grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml", first, second)
    rows = config["papers"]["demo"]["tables"]["T1"]["rows"]
    assert rows[:-2] == demo["tables"]["T1"]["rows"]
    assert [r["experiment"] for r in rows[-2:]] == ["demo.pre_norm", "demo.layer_mix"]
    figure = config["papers"]["demo"]["figures"]["buckets"]["rows"]
    assert figure[:-1] == demo["figures"]["buckets"]["rows"] and figure[-1]["experiment"] == "demo.pre_norm"
    assert grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml", first, second) == config
    dry = snakemake(
        tmp_path / "run", "-n", "-p", "--configfile", str(ROOT / "config" / "demo.yaml"), str(first), str(second)
    )
    assert "output: results/multi30k_deen/demo.pre_norm/seed1/model.pt" in dry.stdout
    job = next(
        block
        for block in dry.stdout.split("\nrule ")
        if "output: results/multi30k_deen/demo.layer_mix/seed1/test.bpe" in block
    )
    assert f'"user_model": {{"class": "{LAYER_MIX.target}", "user_dir": "{EXAMPLE}"}}' in job


def own_model_overlay(tmp_path, module: str, arch: dict | None = None):
    """A module mine.py of class mine:Mine in its own folder, and an overlay with experiment demo.mine on it."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "mine.py").write_text(module)
    overlay = tmp_path / "mine.yaml"
    experiment = {"extends": "demo.transformer", "model": "mine", **({"arch": arch} if arch is not None else {})}
    overlay.write_text(
        yaml.safe_dump(
            {
                "models": {"mine": {"class": "mine:Mine", "user_dir": str(folder)}},
                "experiments": {"demo.mine": experiment},
            }
        )
    )
    return folder, overlay


@pytest.mark.parametrize(
    "module, message",
    [
        (
            "import no_such_dependency\n",
            "config key models/mine/class: cannot import module 'mine' from {dir}: "
            "ModuleNotFoundError: No module named 'no_such_dependency'",
        ),
        (
            "def broken(:\n",
            "config key models/mine/class: cannot import module 'mine' from {dir}: SyntaxError: invalid "
            "syntax (mine.py, line 1)",
        ),
        (
            "class Mine:\n    pass\n",
            "config key models/mine/class: class mine:Mine is not a subclass of "
            "layerwise_nmt.models.transformer.Model (or of Seq2Seq, the shared Transformer), whose methods the "
            'trainer, beam search and checkpoints call (docs/usage.md, "Your own method")',
        ),
        (
            "from layerwise_nmt.models.transformer import Seq2Seq\nclass Mine(Seq2Seq):\n    pass\n",
            "config key models/mine/class: class mine:Mine has no config_class: its settings, a @dataclass subclass of "
            'layerwise_nmt.models.config.ModelConfig (the config\'s arch keys) (docs/usage.md, "Your own method")',
        ),
        (
            "from layerwise_nmt.models.config import ModelConfig\nfrom layerwise_nmt.models.transformer import Model\n"
            "class Mine(Model):\n    config_class = ModelConfig\n    def outputs(self, src, prev): pass\n"
            "    def start(self, src): pass\n",
            "config key models/mine/class: class mine:Mine lacks step: beam search's next step: step(last, state) -> "
            'next-token logits (docs/usage.md, "Your own method")',
        ),
        ("Other = 1\n", "config key models/mine/class: module mine ({dir}/mine.py) has no 'Mine'"),
    ],
)
def test_bad_code_is_one_line_naming_the_key(tmp_path, capsys, module, message):
    """Where the class is first imported for the config (`lwnmt params`, as `lwnmt plan` and the jobs do)."""
    from layerwise_nmt.cli import main

    folder, overlay = own_model_overlay(tmp_path, module)
    sys.modules.pop("mine", None)
    with pytest.raises(SystemExit):
        main(
            [
                "params",
                "--config",
                str(ROOT / "config.yaml"),
                "--config",
                str(ROOT / "config/demo.yaml"),
                "--config",
                str(overlay),
                "--vocab",
                "100",
                "demo.mine",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert err == f"lwnmt params: error: {message.format(dir=folder)}"
    sys.modules.pop("mine", None)


BROKEN = {
    "a syntax error": (
        "def broken(:\n",
        "config key models/mine/class: cannot import module 'mine' from {dir}: "
        "SyntaxError: invalid syntax (mine.py, line 1)",
        {},
    ),
    "a missing module": (
        "import no_such_dependency\n",
        "config key models/mine/class: cannot import module 'mine' "
        "from {dir}: ModuleNotFoundError: No module named 'no_such_dependency'",
        {},
    ),
    "no step": (
        "from layerwise_nmt.models.config import ModelConfig\n"
        "from layerwise_nmt.models.transformer import Model\n"
        "class Mine(Model):\n    config_class = ModelConfig\n    def outputs(self, src, prev): pass\n"
        "    def start(self, src): pass\n",
        "config key models/mine/class: class mine:Mine lacks step: beam search's next step: step(last, "
        'state) -> next-token logits (docs/usage.md, "Your own method")',
        {},
    ),
    "an unknown arch key": (
        "from layerwise_nmt.models.config import ModelConfig\n"
        "from layerwise_nmt.models.transformer import Seq2Seq\n"
        "class Mine(Seq2Seq):\n    config_class = ModelConfig\n",
        "config key experiments/demo.mine/arch: unknown model setting(s) encoder_layerz; did you "
        "mean encoder_layers? (model mine, mine:Mine)",
        {"encoder_layerz": 2},
    ),
}


@pytest.mark.system
@pytest.mark.parametrize("case", list(BROKEN))
def test_the_dry_run_stops_a_broken_plugin_with_the_line_params_prints(tmp_path, case):
    """`snakemake -n` imports and builds the config's own models in a child process (the DAG itself imports neither
    torch nor the module) and stops before any job with the one line `lwnmt params` prints."""
    module, message, arch = BROKEN[case]
    folder, overlay = own_model_overlay(tmp_path, module, arch)
    line = message.format(dir=folder)
    params = lwnmt(
        "params",
        "--config",
        ROOT / "config.yaml",
        "--config",
        ROOT / "config/demo.yaml",
        "--config",
        overlay,
        "--vocab",
        "64",
        "demo.mine",
    )
    assert error_line(params) == f"lwnmt params: error: {line}"
    dry = snakemake(
        tmp_path / "run", "-n", "--configfile", str(ROOT / "config" / "demo.yaml"), str(overlay), check=False
    )
    assert dry.returncode == 1 and dry.stderr.strip().splitlines()[-1] == f"error: {line}", dry.stderr[-3000:]
    assert "Job stats" not in dry.stdout + dry.stderr  # stopped before the DAG was built
    if case == "no step":
        lint = snakemake(
            tmp_path / "run", "--lint", "--configfile", str(ROOT / "config" / "demo.yaml"), str(overlay), check=False
        )
        assert lint.returncode == 1 and lint.stderr.strip().splitlines()[-1] == f"error: {line}"


@pytest.mark.system
def test_a_plugin_that_passed_is_not_imported_again_until_its_code_changes(tmp_path):
    from layerwise_nmt.grid.stage_checks import check_own_models

    folder = tmp_path / "code"
    shutil.copytree(EXAMPLE, folder)
    overlay = example_overlay(tmp_path)
    spec = yaml.safe_load(overlay.read_text())
    spec["models"]["layer_mix"]["user_dir"] = str(folder)
    overlay.write_text(yaml.safe_dump(spec))
    config = grid.load(ROOT / "config.yaml", overlay)
    cache = tmp_path / "checked.json"
    assert check_own_models(config, cache) is None and cache.is_file()
    assert check_own_models(config, cache, python="/nonexistent/python") is None  # from the cache: nothing run
    (folder / "layer_mix.py").write_text(
        (folder / "layer_mix.py").read_text().replace("def source_views", "def source_views(:")
    )
    with pytest.raises(UserError, match="cannot import module 'layer_mix'.*SyntaxError"):
        check_own_models(config, cache)


@pytest.mark.parametrize(
    "overlay, message",
    [
        (
            {"models": {"transformer": {"class": "layer_mix:LayerMixTransformer"}}},
            "config key models/transformer: shadows the built-in model 'transformer'; give yours another name "
            "(built-in: context_gate, cross_view, deep, lwc, mlrf, transformer)",
        ),
        (
            {"models": {"mine": {"class": "layer_mix.LayerMixTransformer"}}},
            "config key models/mine/class: 'layer_mix.LayerMixTransformer' does not match",
        ),
        (
            {"models": {"mine": {"class": "layer_mix:LayerMixTransformer", "user_dir": "no/such/folder"}}},
            "config key models/mine/user_dir: no/such/folder: no such folder (relative paths are read from the working "
            "directory, ",
        ),
        (
            {
                "compare": {
                    "mix": {
                        "task": "multi30k_deen",
                        "preset": "demo",
                        "own_methods": {"layer_mix": {"model": "layer_mixx", "label": "x"}},
                    }
                }
            },
            "config key compare/mix/own_methods/layer_mix/model: unknown model 'layer_mixx'; did you mean 'layer_mix'? "
            "(your own are declared under models:)",
        ),
        (
            {
                "compare": {
                    "mix": {
                        "task": "multi30k_deen",
                        "preset": "demo",
                        "own_methods": {"lwc": {"model": "layer_mix", "label": "x"}},
                    }
                }
            },
            "config key compare/mix/own_methods/lwc: its experiment mix.lwc would be one of the papers' rows; "
            "pick another name",
        ),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path, overlay, message):
    path = example_overlay(tmp_path, **overlay)
    with pytest.raises(UserError) as err:
        grid.load(ROOT / "config.yaml", path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_settings_key_the_class_does_not_know(tmp_path, capsys):
    """Found where the class is imported: by `lwnmt params`/`plan` naming the config key, by the training job
    naming the model (`snakemake -n` reads no user code)."""
    from layerwise_nmt.cli import main

    path = example_overlay(
        tmp_path,
        compare={
            "mix": {
                "task": "multi30k_deen",
                "preset": "demo",
                "methods": [],
                "own_methods": {"layer_mix": {"model": "layer_mix", "label": "x", "arch": {"per_layayer": False}}},
            }
        },
    )
    config = grid.load(ROOT / "config.yaml", path)
    check_experiments(config)  # the DAG's check: no user code read
    with pytest.raises(SystemExit):
        main(
            ["params", "--config", str(ROOT / "config.yaml"), "--config", str(path), "--vocab", "100", "mix.layer_mix"]
        )
    assert capsys.readouterr().err.strip() == (
        "lwnmt params: error: config key experiments/mix.layer_mix/arch: unknown model setting(s) per_layayer; did "
        "you mean per_layer? (model layer_mix, layer_mix:LayerMixTransformer)"
    )
    spec = json.loads(
        grid.RuleInputs(config).train_spec(
            type("W", (), {"task": "multi30k_deen", "experiment": "mix.layer_mix", "seed": "1"})()
        )
    )
    with pytest.raises(UserError) as err:
        build(spec["model"], {**spec["arch"], "src_vocab": 10, "tgt_vocab": 10}, UserModel.from_spec(spec))
    assert str(err.value) == (
        "model layer_mix (layer_mix:LayerMixTransformer): unknown model setting(s) per_layayer; did you mean per_layer?"
    )


def test_two_ranks_in_bf16_train_it(trained, tmp_path):
    """`lwnmt train --ranks 2` (torchrun, two gloo ranks) with amp: bf16: each rank imports the class the spec names."""
    spec = {**trained["spec"], "train": {**trained["spec"]["train"], "max_update": 2, "amp": "bf16"}}
    result = subprocess.run(
        train_command(spec, trained["data"], tmp_path / "run", "--final", str(tmp_path / "model.pt"), "--ranks", "2"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "data-parallel: 2 ranks (gloo)" in result.stderr and "precision: bf16" in result.stderr
    assert checkpoint.load(tmp_path / "model.pt")["model_class"] == LAYER_MIX.target


@pytest.mark.system  # builds the Snakemake-only venv
def test_snakemake_alone_reads_it(driver, tmp_path):
    """In an environment holding only Snakemake (tests/test_driver_env.py's), the DAG builds and the linter passes
    with the example's model in the config: nothing at DAG time imports torch or the module."""
    overlay = example_overlay(tmp_path)
    dry = run_driver(driver, tmp_path / "run", "-n", "--quiet", "rules", "--configfile", str(overlay))
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-3000:]
    assert "train" in dry.stdout and "translate" in dry.stdout
    lint = run_driver(driver, tmp_path / "run", "--lint", "--configfile", str(overlay))
    assert lint.returncode == 0 and "Congratulations" in lint.stdout + lint.stderr, lint.stdout[-3000:]
