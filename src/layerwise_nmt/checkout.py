"""The checkout, for what works on the repository rather than on a config: `lwnmt rehearse` runs its workflow,
`lwnmt docs` rewrites its documents, an export records its commit.

What the package itself reads (the config's schema, the rehearsal's release listings) is package data, read
through importlib.resources and never from here, so that an installed wheel runs every other command in any
folder."""

from __future__ import annotations

import os
from pathlib import Path

from . import UserError

PACKAGE = Path(__file__).resolve().parent


def is_checkout(path: Path) -> bool:
    return (path / "workflow" / "Snakefile").is_file() and (path / "config.yaml").is_file()


def source_tree() -> Path | None:
    """The checkout whose src/ these sources are (an editable install, PYTHONPATH=src); None for an installed
    copy, whose folder (site-packages) says nothing of where a checkout is."""
    root = PACKAGE.parents[1]
    return root if PACKAGE.parent.name == "src" and is_checkout(root) else None


# An installed package finds the checkout only as the folder it is run in.
ROOT = source_tree() or Path(os.getcwd())


def required() -> Path:
    """ROOT, or a one-line UserError when it is not a checkout."""
    if not is_checkout(ROOT):
        raise UserError(
            f"{ROOT} is not a checkout of layerwise-nmt (no workflow/Snakefile and config.yaml); run it in one"
        )
    return ROOT
