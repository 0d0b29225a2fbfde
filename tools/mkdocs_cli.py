"""mkdocs hook: the CLI reference, generated from ``ella``'s argparse parsers.

A page that contains the marker ``<!-- ella-cli -->`` gets, in its place, one section per
subcommand of ``ella`` (its description and a table of its arguments: flags, default,
help), read from :func:`ella.cli.build_parser`. So the page cannot drift from ``--help``.
"""

from __future__ import annotations

import argparse

MARKER = "<!-- ella-cli -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return f"{names} `{metavar}`"


def _default(action: argparse.Action) -> str:
    if not action.option_strings or action.nargs == 0:
        return ""
    if action.default is None or action.default is argparse.SUPPRESS:
        return ""
    value = action.default
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return f"`{value}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    text = parser._get_formatter()._expand_help(action)
    return _cell(text)


def _section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `ella {name}`", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    lines += [f"```text\n{parser.format_usage().strip()}\n```", ""]
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
        ]
        if not actions:
            continue
        title = (group.title or "arguments").capitalize()
        lines += [f"**{title}**", "", "| argument | default | meaning |", "|---|---|---|"]
        lines += [f"| {_flags(a)} | {_default(a)} | {_help(parser, a)} |" for a in actions]
        lines.append("")
    if parser.epilog:
        lines += [_cell(parser.epilog), ""]
    return lines


def cli_reference() -> str:
    """The Markdown reference of every ``ella`` subcommand."""
    from ella.cli import build_parser

    parser = build_parser()
    lines = [_cell(parser.description or ""), ""]
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, subparser in sub.choices.items():
        lines += _section(name, subparser)
    if parser.epilog:
        lines += ["## Threads", "", _cell(parser.epilog), ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
