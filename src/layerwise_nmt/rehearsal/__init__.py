"""The rehearsal (`make rehearse`): every experiment of every table and figure of config.yaml, end to end through
the real Snakemake rules, at toy size on stand-in data, so that what would fail after GPU-days fails in minutes.

- standins.py: small inputs in the releases' formats and packaging where the corpora are not on this machine;
- overlay.py: the full config with each row's structure kept and only its sizes shrunk (`--config rehearsal=DIR`);
- run.py: `lwnmt rehearse`, which builds the stand-ins, runs the workflow and writes the summary.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import UserError

MANIFEST = "manifest.json"


def apply(config: dict, standins: str | Path) -> None:
    """Turn the Snakefile's config into the rehearsal's, in place (`--config rehearsal=<stand-in dir>`)."""
    from .overlay import shrink
    from .standins import Manifest

    path = Path(standins).resolve() / MANIFEST
    if not path.is_file():
        raise UserError(
            f"rehearsal={standins}: no {MANIFEST}; build the stand-ins first (`lwnmt rehearse` or `make rehearse`)"
        )
    saved = json.loads(path.read_text())
    manifest = Manifest({tuple(k.split("/", 1)): v for k, v in saved["digests"].items()}, [], saved["user_paths"])
    rehearsal = shrink({k: v for k, v in config.items() if k != "rehearsal"}, manifest)
    rehearsal["data_mirror"] = str(Path(standins).resolve() / "mirror")
    config.clear()
    config.update(rehearsal)
