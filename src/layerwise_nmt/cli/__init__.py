"""`lwnmt`: one command with subcommands; every Snakemake rule calls one of them.

The parser and the error handling are here; each command group is a module that adds its subcommands
(`add_commands`) and runs each with a few lines calling the library, which it imports only then: `lwnmt --help` and
the data commands never import torch."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap

from .. import UserError
from . import data, evaluate, project, report, train, translate
from .common import USER_COMMANDS, copy_to_console

DESCRIPTION = "`lwnmt`: one command with subcommands; every Snakemake rule calls one of them."
GROUPS = (data, train, translate, evaluate, report, project)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="lwnmt", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_commands(sub)
    parser.epilog = grouped_commands(sub)
    sub.command_help = {action.dest: action.help or "" for action in sub._choices_actions}  # type: ignore[attr-defined]
    sub._choices_actions = []  # listed by group in the epilog instead of argparse's one list
    # a command that runs another command line first (extract --make-input) parses it with this parser, handed to
    # it here rather than imported back from this module
    parser.set_defaults(parser=parser)
    return parser


def grouped_commands(sub) -> str:
    """`lwnmt --help`'s list of subcommands: the user's commands first, then the pipeline's steps."""
    helps = {action.dest: action.help or "" for action in sub._choices_actions}
    width = max(map(len, helps)) + 2

    def listed(names) -> list[str]:
        indent = " " * (width + 2)
        return [textwrap.fill(f"  {n:<{width}}{helps[n]}", 100, subsequent_indent=indent) for n in names]

    steps = [name for name in helps if name not in USER_COMMANDS]
    return "\n".join(
        [
            "your commands:",
            *listed(n for n in USER_COMMANDS if n in helps),
            "",
            "the pipeline's steps (the workflow's rules run them):",
            *listed(steps),
            "",
            "lwnmt COMMAND --help: its options",
        ]
    )


def print_error(line: str) -> None:
    """The one-line error on stderr; also on stdout inside a workflow job (ERRORS_ON_STDOUT) when stderr is a log
    file. Never otherwise: a user's stdout is data (`lwnmt translate … > hyp.txt 2> err.log`), and an error line in
    it would be scored as a translation."""
    print(line, file=sys.stderr)
    copy_to_console(line)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        args.func(args)
    except UserError as err:
        print_error(f"lwnmt {args.command}: error: {err}")
        sys.exit(getattr(args, "error_status", 1))  # train's is its own: the workflow retries failed trainings
    except BrokenPipeError:  # stdout's reader has gone (`lwnmt plan | head -1`): nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush of stdout would fail too
        sys.exit(1)
    except OSError as err:  # a path given on the command line that is not there (or not readable)
        if args.verbose or err.filename is None:
            raise
        print_error(f"lwnmt {args.command}: error: {err.filename}: {err.strerror} (--verbose for the traceback)")
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (which checkpoints and exits 75 by itself)
        if args.verbose:
            raise
        print_error(f"lwnmt {args.command}: interrupted (Ctrl-C)")
        sys.exit(130)  # 128 + SIGINT, as a shell reports it


def run() -> None:
    """The program `lwnmt` (and `python -m layerwise_nmt`): main(), then, once the command has succeeded, the
    process ends without Python's teardown, which after importing torch takes 0.3-0.6 s (~5% of a test set's
    decoding, paid by each of a run's hundreds of jobs). Every command has closed its files by then; the streams
    and log handlers are flushed here. An error (SystemExit, an exception) ends the process the usual way."""
    main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
