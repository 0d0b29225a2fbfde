"""The default column of the training guide's defaults table, generated from ``TrainConfig``.

``docs/guide/training.md`` ("The defaults and why") has a row per option: the options, the
default, why, and the decision record that set it. The "why" and "record" cells are
written by hand; the default cell is this script's: it writes each option's default as
:class:`ella.train.TrainConfig` declares it (the evidence-round defaults there are
:class:`ella.engine.recipe.EvidenceRecipe`'s), keeping a cell's wording where it already
reads the default (``3e-3`` for 0.003, a note in parentheses after it).

    python tools/defaults_table.py           # rewrite the default column
    python tools/defaults_table.py --check   # exit 1 where the column is not the class's

``tests/train/test_config.py`` runs the check.
"""

from __future__ import annotations

import argparse
import enum
import re
import sys
from pathlib import Path

from ella.train.config import TrainConfig

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "training.md"
HEADING = "## The defaults and why"
#: the row of the input invariance, whose options' defaults are said in one sentence
INVARIANCE_ROW = "`--invariance` and its options"
INVARIANCE_OPTIONS = (
    "invariance",
    "generators",
    "invariance_samples",
    "invariance_eval_samples",
    "eta_init",
    "lr_eta",
    "augerino_reg",
    "invariance_marglik_size",
)


def field_of(option: str) -> str:
    """``--lr-min`` -> ``lr_min``."""
    return option.removeprefix("--").replace("-", "_")


def read_value(text: str, like: object) -> object:
    """A cell's value in the type of ``like`` (``auto`` (``fan_in`` with Adam) reads ``auto``;
    ``all`` or ``none`` read None where the default is None; ``on``/``off`` a flag)."""
    text = re.sub(r"\s*\(.*\)$", "", text).replace("`", "").strip()
    if like is None:
        return None if text in ("all", "none") else text
    if isinstance(like, bool):
        return {"on": True, "off": False}.get(text, text)
    if isinstance(like, list):
        return text.split()
    try:
        if isinstance(like, float):
            return float(text)
        if isinstance(like, int):
            return int(text)
    except ValueError:
        return text
    return text


def written(value: object) -> str:
    """A default as a new cell writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and 0 < abs(value) < 0.01:  # 3e-3, as the table writes it
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, list):
        return f"`{' '.join(map(str, value))}`"
    return f"`{value}`"


def default_cell(options: list[str], cell: str, defaults: dict) -> str:
    """The default cell of the row of ``options``: each option's part of ``cell`` kept
    where it reads the default, else written anew."""
    parts = [p.strip() for p in cell.split(",")] if len(options) > 1 else [cell.strip()]
    if len(parts) != len(options):
        parts = [""] * len(options)
    cells = []
    for option, part in zip(options, parts, strict=True):
        want = defaults[field_of(option)]
        cells.append(part if part and read_value(part, want) == want else written(want))
    return ", ".join(cells)


def invariance_cell(defaults: dict) -> str:
    """The input invariance's defaults in one sentence."""
    d = defaults
    generators = (
        "all six generators"
        if len(d["generators"]) == 6
        else "generators " + " ".join(f"`{g}`" for g in d["generators"])
    )
    return (
        f"`{d['invariance']}`; {generators}, {d['invariance_samples']} samples "
        f"({d['invariance_eval_samples']} at test), `eta` from {d['eta_init']:g} at lr "
        f"{d['lr_eta']:g}, Augerino weight {d['augerino_reg']:g}, "
        f"{d['invariance_marglik_size']} images per step"
    )


def table_bounds(text: str) -> tuple[int, int]:
    """Character offsets of the table's body rows (after its header and rule)."""
    start = text.index(HEADING)
    head = text.index("\n| option |", start) + 1
    body = text.index("\n", text.index("\n", head) + 1) + 1
    end = text.find("\n\n", body)
    return body, len(text) if end < 0 else end + 1


def table_rows(text: str) -> list[tuple[list[str], str]]:
    """``(options, default cell)`` of each row of the defaults table."""
    body, end = table_bounds(text)
    rows = []
    for line in text[body:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((re.findall(r"`(--[\w-]+)`", cells[0]), cells[1]))
    return rows


def generated(text: str) -> str:
    """``text`` with the table's default column generated from ``TrainConfig()``."""
    defaults = {
        k: (v.value if isinstance(v, enum.Enum) else v) for k, v in TrainConfig().to_dict().items()
    }
    body, end = table_bounds(text)
    lines = []
    for line in text[body:end].splitlines():
        cells = line.strip().strip("|").split("|")
        first = cells[0].strip()
        if first == INVARIANCE_ROW:
            cell = invariance_cell(defaults)
        else:
            cell = default_cell(re.findall(r"`(--[\w-]+)`", first), cells[1], defaults)
        cells[1] = f" {cell} "
        lines.append("|" + "|".join(cells) + "|")
    return text[:body] + "\n".join(lines) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 on a difference")
    args = parser.parse_args(argv)
    text = GUIDE.read_text()
    new = generated(text)
    if new == text:
        return 0
    if args.check:
        old_rows, new_rows = table_rows(text), table_rows(new)
        for (options, old), (_, cell) in zip(old_rows, new_rows, strict=True):
            if old != cell:
                print(f"{', '.join(options)}: the table says {old!r}, TrainConfig {cell!r}")
        print(f"run: python tools/defaults_table.py (rewrites {GUIDE.name}'s default column)")
        return 1
    GUIDE.write_text(new)
    print(f"rewrote the default column of {GUIDE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
