"""The analysis notebook runs top to bottom, and its committed copy carries its outputs."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK = NOTEBOOKS / "learned_symmetry.ipynb"


def test_committed_notebook_is_rendered():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count is not None for cell in code)
    assert all(output.get("output_type") != "error" for cell in code for output in cell.outputs)
    text = "".join(out.get("text", "") for cell in code for out in cell.outputs)
    assert "G-EED under C4" in text and "layer8" in text
    # the closing section is computed from the cells: each finding is printed under them
    for finding in ("* Accuracy", "* Shares", "* Measured symmetry", "* Which paths the data"):
        assert finding in text, finding
    assert any("image/png" in out.get("data", {}) for cell in code for out in cell.outputs)


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's run directories go here
    monkeypatch.setenv("ELLA_NOTEBOOK_SMOKE", "1")  # 64 images, 1 epoch: every cell runs
    before = sorted(NOTEBOOKS.iterdir())
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:  # execute a clean copy
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        nb,
        timeout=None,  # no wall-clock limit: the outcome must not depend on machine load
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # raises CellExecutionError naming the failing cell
    nbformat.write(nb, tmp_path / "executed.ipynb")
    assert sorted(NOTEBOOKS.iterdir()) == before  # nothing written into the repository
    assert any(p.name.startswith("ella-notebook-") for p in tmp_path.iterdir())
    text = "".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    assert "normalised G-EED of each layer alone" in text
    assert "* Which paths the data need" in text  # the computed conclusions ran
