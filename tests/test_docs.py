"""The docs say what the code does: generated blocks are regenerated and compared, the rest is checked here."""

import re

import yaml

from conftest import ROOT
from layerwise_nmt import config as cfg
from layerwise_nmt.docs import BLOCK, GENERATORS, documents, update
from layerwise_nmt.params import parameter_rows


def test_every_generated_block_is_what_lwnmt_docs_writes_now():
    """The plan table (docs/usage.md), the LWC parameter counts (docs/papers.md) and the figure kinds: `lwnmt docs`
    rewrites them from config.yaml; a stale one names itself here."""
    kinds = {m["spec"].split()[0] for path in documents() for m in BLOCK.finditer(path.read_text(encoding="utf-8"))}
    assert kinds == set(GENERATORS)  # every generator has a block, every block a generator
    assert update(check=True) == []


def test_the_demo_parameter_counts_are_lwnmt_params():
    demo = cfg.load(ROOT / "config.yaml", ROOT / "config/demo.yaml")
    counts = {r["experiment"]: r["params"] for r in parameter_rows(demo, ["demo.lwc", "demo.transformer"], (7880, 7880))}
    description = yaml.safe_load((ROOT / "config/demo.yaml").read_text())["experiments"]["demo.lwc"]["description"]
    assert f"({counts['demo.lwc']:,} vs {counts['demo.transformer']:,} with the 7,880-symbol dictionary" in description


def test_no_doc_or_config_points_outside_the_repository_unexplained():
    """../shared/ is the project's workspace beside the checkout, not in a user's clone: every mention must say so
    (README's note) or be a pointer to it as provenance, never a path the workflow needs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`../shared/`" in readme and "not part of the repository" in readme
    head = (ROOT / "config.yaml").read_text(encoding="utf-8").split("\n# ----", 1)[0]
    assert "../shared/ below" in head and "workspace" in head
    for path in (ROOT / "src/layerwise_nmt/cli.py", ROOT / "workflow/schemas/config.schema.yaml"):
        for line in path.read_text(encoding="utf-8").splitlines():
            assert "../shared" not in line or "workspace" in line, (path, line)


def test_the_readme_says_how_to_build_one_table_one_paper_and_translate_raw_text():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "snakemake --cores all results/tables/lwc/T3.md" in readme
    assert "--config targets=" in readme or "targets:" in readme
    assert re.search(r"translate (\S+ )?--experiment \S+ --config config.yaml --config config/demo.yaml", readme)
