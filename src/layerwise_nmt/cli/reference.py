"""The command-line reference (`lwnmt docs`; docs/reference/cli.md): every subcommand with its arguments, from the
parser itself, so that it cannot drift from what `lwnmt` accepts."""

from __future__ import annotations

import argparse

from ..report.reference import cell
from .common import USER_COMMANDS


def cli_block(config: dict, parser: argparse.ArgumentParser) -> str:
    """Each subcommand of `parser` (lwnmt's): its one-line purpose and a table of its arguments, the user's commands
    first."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps: dict[str, str] = getattr(sub, "command_help", {})
    order = [n for n in USER_COMMANDS if n in sub.choices] + [n for n in sub.choices if n not in USER_COMMANDS]
    lines = []
    for name in order:
        command = sub.choices[name]
        group = "your command" if name in USER_COMMANDS else "a pipeline step"
        lines += [f"### `lwnmt {name}`", "", f"{cell(helps.get(name, ''))} ({group}).", ""]
        lines += ["| argument | default | what it does |", "|---|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            name_cell = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                name_cell += f" {{{', '.join(map(str, action.choices))}}}"
            default = action.default
            shown = "" if default in (None, argparse.SUPPRESS, False, []) else f"`{default}`"
            lines.append(f"| {name_cell} | {shown} | {cell(action.help or '')} |")
        lines.append("")
    return "\n".join(lines)
