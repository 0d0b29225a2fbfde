"""tools/run_notebook.py executes a notebook into a copy and never over a file unasked."""

import importlib.util
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("run_notebook", ROOT / "tools" / "run_notebook.py")
TOOL = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(TOOL)


def notebook(path: Path, code: str) -> Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), path)
    return path


def outputs(path: Path) -> str:
    cells = nbformat.read(path, as_version=4).cells
    return "".join(out.get("text", "") for cell in cells for out in cell.get("outputs", []))


def test_a_notebook_runs_into_the_default_copy_and_leaves_itself_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = notebook(tmp_path / "n.ipynb", "print(6 * 7)")
    before = source.read_bytes()
    assert TOOL.main([str(source)]) == 0
    assert outputs(tmp_path / TOOL.DEFAULT_DIR / "n.ipynb") == "42\n"
    assert source.read_bytes() == before


def test_an_existing_copy_is_kept_unless_overwrite(tmp_path, capsys):
    source, out = notebook(tmp_path / "n.ipynb", "print(6 * 7)"), tmp_path / "out.ipynb"
    out.write_text("a user's file")
    assert TOOL.main([str(source), "--out", str(out)]) == 1
    assert "--overwrite" in capsys.readouterr().err and out.read_text() == "a user's file"
    assert TOOL.main([str(source), "--out", str(out), "--overwrite"]) == 0
    assert outputs(out) == "42\n"


def test_a_failing_cell_writes_nothing_and_says_so(tmp_path, capsys):
    source, out = notebook(tmp_path / "n.ipynb", "1 / 0"), tmp_path / "out.ipynb"
    assert TOOL.main([str(source), "--out", str(out)]) == 1
    assert "nothing was written" in capsys.readouterr().err and not out.exists()
