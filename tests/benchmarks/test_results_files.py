"""benchmarks/results/ holds what scripts write, and no script writes over what they did
not: a Markdown file a script writes ends with the generated-file mark, and a script refuses
to replace one without it (a hand-written record) before it writes anything."""

from __future__ import annotations

import argparse
import ast
import json

import pytest

from benchmarks._common import GENERATED, RESULTS, check_generated, write_generated
from benchmarks._runner import write

BENCHMARKS = RESULTS.parent


def test_a_file_without_the_mark_is_never_replaced(tmp_path):
    md, js = tmp_path / "x.md", tmp_path / "x.json"
    md.write_text("# my notes\n")
    with pytest.raises(FileExistsError, match="not written by a benchmark script"):
        write_generated(js, {"a": 1}, md, "# results\n")
    assert md.read_text() == "# my notes\n" and not js.exists()


def test_a_generated_file_is_marked_and_replaced(tmp_path):
    md, js = tmp_path / "x.md", tmp_path / "x.json"
    for value in (1, 2):
        write_generated(js, {"a": value}, md, f"# results {value}\n")
        assert md.read_text().startswith(f"# results {value}")
        assert md.read_text().rstrip().endswith(GENERATED)
        assert json.loads(js.read_text()) == {"a": value}
    (tmp_path / "d.md").mkdir()
    with pytest.raises(FileExistsError, match="is not a file"):
        check_generated(tmp_path / "d.md")


def test_the_hand_written_recipe_log_is_refused_by_its_script():
    """``python -m benchmarks.recipe --profile cpu`` once replaced the hand-written log
    recipe.md with its 60-line table; its write is refused before anything changes."""
    before = {p: p.read_bytes() for p in (RESULTS / "recipe.md", RESULTS / "recipe.json")}
    args = argparse.Namespace(results_dir=str(RESULTS), profile="cpu")
    with pytest.raises(FileExistsError, match="recipe.md was not written by a benchmark"):
        write(args, "recipe", {"rows": []}, "# a table\n")
    assert {p: p.read_bytes() for p in before} == before


def test_no_script_writes_a_file_but_through_the_guarded_writers():
    """Only benchmarks/_common.py calls ``save_text``, ``write_text`` or ``write_bytes``;
    every other script writes Markdown through :func:`write_generated` (or
    ``write_markdown``) and JSON progress through ``save_json``."""
    writers = {"save_text", "write_text", "write_bytes"}
    for script in sorted(BENCHMARKS.glob("*.py")):
        if script.name == "_common.py":
            continue
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                assert name not in writers, f"{script.name}:{node.lineno} calls {name}"


def test_every_generated_markdown_result_carries_the_mark():
    """Each .md under benchmarks/results/ is either marked (a script wrote it and may
    replace it) or a hand-written record that no script writes to."""
    hand_written = {"recipe.md", "path_drop.md", "prior_reading.md", "README.md"}
    for md in sorted(RESULTS.rglob("*.md")):
        marked = md.read_text().rstrip().endswith(GENERATED)
        assert marked or md.name in hand_written, md
