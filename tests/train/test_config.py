"""ella.train.config: the training guide's defaults table states TrainConfig's defaults.

The table (docs/guide/training.md, "The defaults and why") is the one place that says why
each default is what it is, with its record; its default column is generated from the
class by tools/defaults_table.py, and these tests fail where the file is not what the
script writes, or an option of the class has no row.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from ella.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "defaults_table", ROOT / "tools" / "defaults_table.py"
)
defaults_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(defaults_table)
#: options one row covers without listing their defaults one by one
GROUPED = {"--invariance": defaults_table.INVARIANCE_OPTIONS}


def table_rows() -> list[tuple[list[str], str]]:
    return defaults_table.table_rows(defaults_table.GUIDE.read_text())


def field_of(option: str) -> str:
    return defaults_table.field_of(option)


def test_the_default_column_is_generated_from_train_config(capsys):
    assert len(table_rows()) > 30, "the defaults table was not found"
    assert defaults_table.main(["--check"]) == 0, capsys.readouterr().out


def test_the_generator_rewrites_a_stale_default():
    text = defaults_table.GUIDE.read_text()
    stale = text.replace("| `--lr` | 3e-3 |", "| `--lr` | 1e-3 |")
    stale = stale.replace("8 samples (16 at test)", "4 samples (16 at test)")
    stale = stale.replace(
        "| `--fc-mode`, `--fc-rank` | `factorized`, 1 |",
        "| `--fc-mode`, `--fc-rank` | `factorized`, 2 |",
    )
    assert stale != text
    assert defaults_table.generated(stale) == text


def test_every_option_of_train_config_has_a_row():
    listed = {field_of(o) for options, _ in table_rows() for o in options}
    listed |= {f for names in GROUPED.values() for f in names}
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
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
    assert defaults_table.read_value(text, like) == value
