"""The field tables of the API reference, generated from the configuration dataclasses.

``docs/api/train.md`` and ``docs/api/fit.md`` hold one table per configuration class
(``TrainConfig``, ``FitConfig``): every field with its type, its default and what it means
(the help text the command line shows, ``ella.train.config.HELP`` and
``ella.train.fit.FIT_HELP``), between the markers
``<!-- fields:NAME:begin -->`` and ``<!-- fields:NAME:end -->``.

    python tools/config_tables.py           # rewrite the tables
    python tools/config_tables.py --check   # exit 1 where a table is not its class's

``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from pathlib import Path

from ella.options import Config, choice_type
from ella.train.config import HELP, TrainConfig
from ella.train.fit import FIT_HELP, FitConfig

ROOT = Path(__file__).resolve().parents[1]
#: page -> the classes whose tables it holds, each with its help texts
TABLES: dict[str, list[tuple[type[Config], dict[str, str]]]] = {
    "docs/api/train.md": [(TrainConfig, HELP)],
    "docs/api/fit.md": [(FitConfig, FIT_HELP)],
}


def type_name(hint: typing.Any) -> str:
    """A field's type as the table writes it: ``int``, ``float or none``, a choice's values
    (``adam | sgd``), ``list of (fc | conv | gconv)``."""
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    inner = next(a for a in args if a is not type(None)) if optional else hint
    choice = choice_type(hint)
    if choice is not None:
        values = " \\| ".join(choice.values())
        many = typing.get_origin(inner) is tuple
        text = f"list of ({values})" if many else values
    elif typing.get_origin(inner) is tuple:
        text = f"list of {typing.get_args(inner)[0].__name__}"
    else:
        text = getattr(inner, "__name__", str(inner))
    return f"{text} or none" if optional else text


def default_text(value: typing.Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(map(str, value)) or "(empty)"
    return f"{value:g}" if isinstance(value, float) else str(value)


def table(cls: type[Config], help_texts: dict[str, str]) -> str:
    """The Markdown table of ``cls``'s fields (:mod:`this module <tools.config_tables>`)."""
    defaults = cls().to_dict()
    hints = cls.hints()
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        meaning = re.sub(r"\s+", " ", help_texts[field.name]).replace("|", "\\|")
        default = default_text(defaults[field.name]).replace("|", "\\|")
        lines.append(
            f"| `{field.name}` | {type_name(hints[field.name])} | `{default}` | {meaning} |"
        )
    return "\n".join(lines)


def rewritten(text: str, cls: type[Config], help_texts: dict[str, str]) -> str:
    """``text`` with the table of ``cls`` between its markers replaced."""
    begin = f"<!-- fields:{cls.__name__}:begin (written by tools/config_tables.py) -->"
    end = f"<!-- fields:{cls.__name__}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"no markers for {cls.__name__}: add the lines\n{begin}\n{end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table(cls, help_texts)}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where a table differs")
    args = parser.parse_args(argv)
    stale = []
    for page, classes in TABLES.items():
        path = ROOT / page
        text = path.read_text()
        new = text
        for cls, help_texts in classes:
            new = rewritten(new, cls, help_texts)
        if new != text:
            stale.append(page)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale field tables in {stale}: run python tools/config_tables.py")
        return 1
    if not args.check:
        print(f"rewritten: {stale or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
