"""ella.train.config: the training guide's defaults table states TrainConfig's defaults.

The table (docs/guide/training.md, "The defaults and why") is the one place that says why
each default is what it is, with its record; this test holds its default column to the
class, and every option of the class to a row of it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ella.train.config import TrainConfig

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "training.md"
#: options one row covers without listing their defaults one by one
GROUPED = {"--invariance": ("invariance",)}


def table_rows() -> list[tuple[list[str], str]]:
    """``(options, default cell)`` of each row of the defaults table."""
    text = GUIDE.read_text()
    table = text[text.index("## The defaults and why") :].split("\n\n")[2]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((re.findall(r"`(--[\w-]+)`", cells[0]), cells[1]))
    return rows


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
    if isinstance(like, float):
        return float(text)
    if isinstance(like, int):
        return int(text)
    return text


def field_of(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def test_every_default_in_the_table_is_train_configs():
    defaults = TrainConfig().to_dict()
    rows = table_rows()
    assert len(rows) > 30, "the defaults table was not found"
    for options, cell in rows:
        if options[0] in GROUPED:
            continue
        values = [v.strip() for v in cell.split(",")] if len(options) > 1 else [cell]
        assert len(values) == len(options), f"row {options}: {cell!r}"
        for option, text in zip(options, values, strict=True):
            want = defaults[field_of(option)]
            got = read_value(text, want)
            assert got == want, f"{option}: the table says {text!r}, TrainConfig {want!r}"


def test_every_option_of_train_config_has_a_row():
    listed = {field_of(o) for options, _ in table_rows() for o in options}
    listed |= {f for names in GROUPED.values() for f in names}
    invariance = {"generators", "invariance_samples", "invariance_eval_samples", "eta_init"}
    invariance |= {"lr_eta", "augerino_reg", "invariance_marglik_size"}
    fields = {f.name for f in dataclasses.fields(TrainConfig)} - invariance
    assert sorted(fields - listed) == [], "options without a row in the defaults table"


@pytest.mark.parametrize(
    ("text", "like", "value"),
    [
        ("`auto` (`fan_in` with Adam)", "x", "auto"),
        ("all", None, None),
        ("3e-3", 0.1, 3e-3),
        ("off", False, False),
        ("`fc conv`", [], ["fc", "conv"]),
    ],
)
def test_the_table_reader(text, like, value):
    assert read_value(text, like) == value
