"""The docs say what the code does: generated blocks are regenerated and compared, the rest is checked here."""

import re
import tomllib

import yaml

from conftest import ROOT
from layerwise_nmt import grid
from layerwise_nmt.report.doc_blocks import BLOCK, documents, update
from layerwise_nmt.grid.parameter_table import parameter_rows


def test_every_generated_block_is_what_lwnmt_docs_writes_now():
    """The plan table (docs/usage.md), the LWC parameter counts (docs/papers.md) and the figure kinds: `lwnmt docs`
    rewrites them from config.yaml; a stale one names itself here."""
    from layerwise_nmt.cli import build_parser
    from layerwise_nmt.cli.report import doc_generators

    generators = doc_generators(build_parser())
    kinds = {m["spec"].split()[0] for path in documents() for m in BLOCK.finditer(path.read_text(encoding="utf-8"))}
    assert kinds == set(generators)  # every generator has a block, every block a generator
    assert update(check=True, generators=generators) == []


def test_the_demo_parameter_counts_are_lwnmt_params():
    demo = grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml")
    counts = {
        r["experiment"]: r["params"] for r in parameter_rows(demo, ["demo.lwc", "demo.transformer"], (7880, 7880))
    }
    description = yaml.safe_load((ROOT / "config/demo.yaml").read_text())["experiments"]["demo.lwc"]["description"]
    assert f"({counts['demo.lwc']:,} vs {counts['demo.transformer']:,} with the 7,880-symbol dictionary" in description


def test_the_readmes_first_screen_says_what_it_reproduces_and_how_to_run_it():
    """A newcomer's first screen: the four papers by title, venue and arXiv id (as config.yaml cites them) and what
    is reproduced so far; then the two commands, and the full-scale route through Snakemake (conda or pip, SLURM, a
    login node) in the README's first sections."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme.split("\n## ", 1)[0]
    assert "no full-scale number" in first_screen.replace("\n", " ")
    start = (
        readme.split("\n## Using a trained model", 1)[0] + readme.split("\n## Full scale", 1)[1].split("\n## ", 1)[0]
    )
    papers = yaml.safe_load((ROOT / "config.yaml").read_text())["papers"]
    for key in ("lwc", "gca", "dou", "mlrf"):
        paper = papers[key]
        assert paper["title"].split(", ", 1)[1] in first_screen, key
        assert paper["citation"].split(",")[0].split(" (")[0] in first_screen, key
        if "arxiv" in paper:
            assert f"[{paper['arxiv']}](https://arxiv.org/abs/{paper['arxiv']})" in first_screen, key
    for command in (
        "make demo",
        "make test",
        "snakemake --cores all --use-conda",
        "--profile profiles/slurm",
        "--conda-create-envs-only",
        "pip install -e .",
    ):
        assert command in start, command
    pinned = next(
        line for line in (ROOT / "constraints.txt").read_text().splitlines() if line.startswith("snakemake==")
    )
    assert f"pip install {pinned}" in start


def test_the_license_is_mit_and_the_package_says_so():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) the layerwise-nmt authors")
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] in ("MIT", {"text": "MIT"})


def test_the_readme_says_how_to_build_one_table_one_paper_and_translate_raw_text():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "snakemake --cores all results/tables/lwc/T3.md" in readme
    assert "--config targets=" in readme or "targets:" in readme
    assert re.search(r"translate (\S+ )?--experiment \S+ --configfile config/demo.yaml", readme)


def test_a_table_block_shows_a_committed_tables_rows_and_names_a_missing_one():
    from layerwise_nmt import UserError
    from layerwise_nmt.report.doc_blocks import table_block

    block = table_block({}, "docs/study/small/T1.md")
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| row |") and len(rows) == 1 + 6  # the header and the study's six rows
    assert block.rstrip().splitlines()[-1].startswith("Our runs' precision")
    try:
        table_block({}, "docs/study/none/T1.md")
    except UserError as error:
        assert str(error).startswith("docs/study/none/T1.md: no such table")
    else:
        raise AssertionError("a missing table was not named")


def test_the_own_model_contract_names_the_codes_fields_and_methods():
    """docs/usage.md's "Your own method" against the classes it describes: the arch keys every model has
    (ModelConfig's fields: `encoder_layers`, `tie`, not "layers" or "tying"), what a training forward returns
    (ModelOutput), what the encoder hands `source_views` (EncoderOutput), the methods the contract checks
    (models/user.py), and where `setting` comes from."""
    import dataclasses
    import importlib

    from layerwise_nmt.models.config import ModelConfig
    from layerwise_nmt.models.transformer import EncoderOutput, ModelOutput
    from layerwise_nmt.models.user import CONTRACT

    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    contract = usage.split("\n## Your own method\n", 1)[1].split("\n## ", 1)[0]
    listed = re.search(r"whose fields\s+are the arch keys every model has: (.*?)\. Yours", contract, re.S).group(1)
    assert re.findall(r"`(\w+)`", listed) == [f.name for f in dataclasses.fields(ModelConfig)]
    for stale in ("layers, dropout, tying", " tying"):
        assert stale not in contract
    for cls in (ModelOutput, EncoderOutput):
        for f in dataclasses.fields(cls):
            assert re.search(rf"\b{f.name}\b", contract), (cls.__name__, f.name)
    for method, _ in CONTRACT:
        assert f"`{method}(" in contract, method
    assert "one tensor (B, S, D) per decoder layer" in contract  # source_views: a list, not the top state
    statement = re.search(r"`(from (\S+) import setting)`", contract)
    assert statement and hasattr(importlib.import_module(statement.group(2)), "setting")
    assert "norm: pre" in contract and "`states[-1]` only" in contract  # pre-norm's unnormalised lower states


def test_a_tables_verdict_option_is_documented():
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert "`verdict: true`" in usage


def test_the_references_name_every_subcommand_option_and_setting():
    from dataclasses import fields

    from layerwise_nmt.cli import build_parser
    from layerwise_nmt.training.config import TrainConfig

    cli = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    for name, command in sub.choices.items():
        assert f"### `lwnmt {name}`" in cli
        for action in command._actions:
            for option in action.option_strings if action.dest != "help" else []:
                assert f"`{option}`" in cli, (name, option)
    config = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    for f in fields(TrainConfig):
        assert f"| `{f.name}` |" in config
    assert "| `scaled_from` |" in config and "| `lr` | a number > 0 | `0.0005` |" in config
