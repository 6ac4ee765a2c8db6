"""What several command groups share: a subcommand's parser, the --config option and the config it names."""

from __future__ import annotations

import argparse
from typing import Callable

from .. import UserError


def command(subparsers, name: str, help: str,
            handler: Callable[[argparse.Namespace], None]) -> argparse.ArgumentParser:
    """A subcommand's parser, running `handler` with the parsed arguments; -v also after the subcommand
    (SUPPRESS keeps a -v given before it)."""
    parser = subparsers.add_parser(name, help=help)
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging and tracebacks")
    parser.set_defaults(func=handler)
    return parser


def add_config_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", action="append", metavar="FILE", help="a config file (default config.yaml); "
                        "repeat the option for overlays, later ones override: --config config.yaml --config "
                        "config/demo.yaml")


def config_files(a) -> list[str]:
    return a.config or ["config.yaml"]


def load_config(a) -> dict:
    """The --config files merged and checked as `snakemake -n` checks them (schema, references, stage settings)."""
    from .. import grid as cfg
    from ..grid.stage_checks import check_experiments

    files = config_files(a)
    config = cfg.load(*files)
    try:
        check_experiments(config)
    except UserError as err:
        raise cfg.located(err, files) from None
    return config
