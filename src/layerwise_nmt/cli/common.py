"""What several command groups share: a subcommand's parser, the --config option and the config it names, the flags
that name the code of a model from outside the package."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable

from .. import UserError

# Set by the workflow (snakemake_glue/snakefile.py: prepare_jobs) for its jobs, whose stderr is a log file and whose
# stdout is Snakemake's console: a job's one-line error (or stop) is copied there, so the console shows it, not only
# a CalledProcessError.
ERRORS_ON_STDOUT = "LWNMT_ERRORS_ON_STDOUT"

# What a user types; the other subcommands are the pipeline's steps, which the workflow's rules call.
USER_COMMANDS = (
    "status",
    "plan",
    "show",
    "params",
    "translate",
    "score",
    "export",
    "import-fairseq",
    "rehearse",
    "evidence",
    "readme",
    "docs",
)


def copy_to_console(line: str) -> None:
    """`line` on stdout inside a workflow job (ERRORS_ON_STDOUT) whose stderr is a log file; nowhere otherwise: a
    user's stdout is data (`lwnmt translate … > hyp.txt`), and stderr is on the user's terminal already."""
    if not os.environ.get(ERRORS_ON_STDOUT):
        return
    try:
        err, out = os.fstat(sys.stderr.fileno()), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # captured streams without a file descriptor (tests)
        return
    if stat.S_ISREG(err.st_mode) and (err.st_dev, err.st_ino) != (out.st_dev, out.st_ino):
        print(line, flush=True)


def command(subparsers, name: str, help: str, handler: Callable[[argparse.Namespace], None]) -> argparse.ArgumentParser:
    """A subcommand's parser, running `handler` with the parsed arguments; -v also after the subcommand
    (SUPPRESS keeps a -v given before it)."""
    parser = subparsers.add_parser(name, help=help)
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging and tracebacks"
    )
    parser.set_defaults(func=handler)
    return parser


def integer(minimum: int) -> Callable[[str], int]:
    """An option's type: an integer ≥ `minimum`; anything else is argparse's usage error naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer ≥ {minimum}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: expected an integer ≥ {minimum}")
        return value

    return parse


def add_config_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help="a config file (default config.yaml); "
        "repeat the option for overlays, later ones override: --config config.yaml --config "
        "config/demo.yaml",
    )
    parser.add_argument(
        "--configfile",
        action="extend",
        nargs="+",
        metavar="FILE",
        help="overlays merged over the --config files (default config.yaml), as Snakemake's --configfile: "
        "--configfile config/demo.yaml",
    )


def config_files(a) -> list[str]:
    """The config files in the order they are merged: --config's (default config.yaml), then --configfile's."""
    return (a.config or ["config.yaml"]) + (getattr(a, "configfile", None) or [])


def load_config(a) -> dict:
    """The --config files merged and checked as `snakemake -n` checks them (schema, references, stage settings)."""
    from .. import grid
    from ..grid.config_files import check_files, check_targets
    from ..grid.stage_checks import check_experiments

    files = config_files(a)
    check_files(files, grid.read)  # an overlay's misspelt experiment, table or figure, before merging hides it
    config = grid.load(*files)
    try:
        check_targets(config)
        check_experiments(config)
    except UserError as err:
        raise grid.located(err, files) from None
    return config


def add_user_code_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--user-dir",
        metavar="FOLDER",
        help="a model from outside the package: the folder holding "
        "its module (put first on the import path); a model file never imports code on its own",
    )
    parser.add_argument(
        "--user-module",
        metavar="MODULE",
        help="a model from outside the package: its module, importable as installed (instead of --user-dir)",
    )


def user_code(a):
    from ..models.user import UserCode

    return UserCode(a.user_dir, (a.user_module,) if a.user_module else ())


def refuse_beside_spec(a, stood_for: tuple[str, ...], gives: str) -> None:
    """A one-line UserError when a flag that a job's --spec stands for (`stood_for`, as argparse names them) is
    given beside it: the spec would silently win over it."""
    given = [f"--{name.replace('_', '-')}" for name in stood_for if getattr(a, name) is not None]
    if given:
        which = f"no {given[0]}" if len(given) == 1 else f"none of {', '.join(given)}"
        raise UserError(f"--spec: it gives {gives}; expected {which} beside it")
