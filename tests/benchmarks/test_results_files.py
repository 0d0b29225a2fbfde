"""benchmarks/results/ and experiments/results/ hold what scripts write, and no script writes
over what they did not: a Markdown file a script writes ends with the generated-file mark,
and a script refuses to replace one without it (a hand-written record) before it writes
anything."""

from __future__ import annotations

import argparse
import ast
import json

import pytest

from studies.results import (
    BENCHMARK_RESULTS,
    EXPERIMENT_RESULTS,
    GENERATED,
    ROOT,
    check_generated,
    write_generated,
)
from studies.runner import as_experiment, write

BENCHMARKS = BENCHMARK_RESULTS.parent
EXPERIMENTS = EXPERIMENT_RESULTS.parent
#: the scripts' folders and the folder each writes to by default
SCRIPT_FOLDERS = {BENCHMARKS: BENCHMARK_RESULTS, EXPERIMENTS: EXPERIMENT_RESULTS}
#: where the guarded writers are defined (the only file that may write a file directly)
WRITERS = {ROOT / "studies" / "results.py"}


def scripts():
    """Every script under benchmarks/ and experiments/ and every module of studies/ (not
    their tests)."""
    folders = [*SCRIPT_FOLDERS, ROOT / "studies"]
    return [s for folder in folders for s in sorted(folder.glob("*.py"))]


def hand_written():
    """The Markdown files under either results folder that no script wrote."""
    return [
        md
        for results in SCRIPT_FOLDERS.values()
        for md in sorted(results.rglob("*.md"))
        if not md.read_text().rstrip().endswith(GENERATED)
    ]


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


def test_the_hand_written_recipe_log_is_refused_by_its_script(tmp_path):
    """``python -m benchmarks.recipe --profile cpu`` once replaced the hand-written log
    recipe.md with its 60-line table; its write is refused before anything changes."""
    (tmp_path / "recipe.md").write_text("# my log\n")
    (tmp_path / "recipe.json").write_text("{}")
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    args = argparse.Namespace(results_dir=str(tmp_path), profile="cpu")
    with pytest.raises(FileExistsError, match="recipe.md was not written by a benchmark"):
        write(args, "recipe", {"rows": []}, "# a table\n")
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("md", hand_written(), ids=lambda p: p.name)
def test_no_script_replaces_a_hand_written_result(md):
    """Each hand-written file still under a results folder is refused by every writer."""
    before = md.read_bytes()
    with pytest.raises(FileExistsError, match="not written by a benchmark script"):
        check_generated(md.with_suffix(".json"), md)
    assert md.read_bytes() == before


def test_no_script_writes_a_file_but_through_the_guarded_writers():
    """Only studies/results.py calls ``save_text``, ``write_text`` or ``write_bytes``; every
    other script under benchmarks/ and experiments/ (and module of studies/) writes Markdown
    through :func:`write_generated` (or ``write_markdown``) and JSON progress through
    ``save_json``."""
    writers = {"save_text", "write_text", "write_bytes"}
    checked = 0
    for script in scripts():
        if script in WRITERS:
            continue
        checked += 1
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                assert name not in writers, f"{script.name}:{node.lineno} calls {name}"
    assert checked >= 10 and any(s.parent == EXPERIMENTS for s in scripts())


def imported_packages(path) -> set[str]:
    """The top-level packages the module at ``path`` imports (absolute imports)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_studies_stand_between_the_library_and_the_scripts():
    """benchmarks/ and experiments/ (scripts and tests) import what they share from
    studies/, not from each other; studies/ imports neither, and ella never imports it."""
    below = {
        "experiments": {"benchmarks"},
        "benchmarks": {"experiments"},
        "studies": {"benchmarks", "experiments"},
        "ella": {"studies", "benchmarks", "experiments"},
    }
    for folder, forbidden in below.items():
        files = sorted((ROOT / folder).rglob("*.py"))
        assert files, folder
        for path in files:
            wrong = imported_packages(path) & forbidden
            assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_an_experiment_writes_to_experiments_results_by_default():
    """Where a script under experiments/ adds ``studies.runner``'s common arguments (whose
    ``--results-dir`` is benchmarks/results) it sets the default."""
    for script in sorted(EXPERIMENTS.glob("*.py")):
        tree = ast.parse(script.read_text())
        calls = {
            getattr(node.func, "attr", getattr(node.func, "id", None)): node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        if "common_arguments" in calls:
            defaults = calls.get("set_defaults")
            assert defaults is not None, f"{script.name} keeps benchmarks/results as default"
            assert [k.arg for k in defaults.keywords] == ["results_dir"], script.name


def test_an_experiment_names_its_own_module_as_the_command():
    payload = {"command": "python -m benchmarks.recipe --profile cpu", "rows": []}
    assert as_experiment(payload)["command"] == "python -m experiments.recipe --profile cpu"
    assert as_experiment({"rows": []}) == {"rows": []}


def test_every_generated_markdown_result_carries_the_mark():
    """Each .md under benchmarks/results/ is marked (a script wrote it and may replace it);
    under experiments/results/ only a folder's README, which describes files a run wrote
    there, is not. Findings are written as decision records in docs/research/."""
    unmarked = hand_written()
    assert {md.name for md in unmarked} <= {"README.md"}
    assert not [md for md in unmarked if md.is_relative_to(BENCHMARK_RESULTS)]
