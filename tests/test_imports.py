"""The package has no import circles, its command modules import in any order, and a
dependency that cannot be imported here (a torchvision of another torch build) is one line
that names the fix."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PACKAGE = Path(__file__).resolve().parents[1] / "ella"


def module_imports() -> dict[str, set[str]]:
    """Each ella module -> the ella modules it imports anywhere (top level or in functions)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {resolve(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {resolve(f"{node.module}.{a.name}") for a in node.names}
        edges[name] = {t for t in targets if t and t != name and t.startswith("ella")}
    return edges


def test_no_module_imports_a_module_that_imports_it():
    edges = module_imports()
    assert len(edges) > 40  # the walk found the package
    mutual = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges[b]})
    mutual = [(a, b) for a, b in mutual if not (b.startswith(a + ".") or a.startswith(b + "."))]
    assert mutual == [], f"modules importing each other: {mutual}"


@pytest.mark.parametrize(
    "order", [("ella.cli", "ella.cli.ensemble"), ("ella.cli.ensemble", "ella.cli")]
)
def test_command_modules_import_in_either_order(order):
    """...and neither loads laplace-torch (about 3 s of every command's start-up: torchmetrics
    and scipy.signal), which only an evidence fit needs."""
    code = "; ".join(f"import {name}" for name in order)
    code += "; import sys; assert 'laplace' not in sys.modules, 'laplace was imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------- a torchvision of another torch build
BROKEN_TORCHVISION = {
    "RuntimeError": 'raise RuntimeError("operator torchvision::nms does not exist")\n',
    "ImportError": 'raise ImportError("torchvision/_C.so: undefined symbol: _ZN3c104cuda")\n',
}


def broken_torchvision(tmp_path: Path, failure: str) -> dict[str, str]:
    """An environment in which ``import torchvision`` fails as a build made for another
    torch does (a package with its metadata, so torchmetrics finds it installed), put
    first on the path of a subprocess; the real environment is untouched."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(BROKEN_TORCHVISION[failure])
    info = tmp_path / "torchvision-0.99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.99.0\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


@pytest.mark.parametrize("failure", sorted(BROKEN_TORCHVISION))
def test_a_broken_torchvision_is_one_line_that_names_the_fix(tmp_path, failure):
    """The README's quickstart import, where torchmetrics (under laplace-torch) finds a
    torchvision that cannot be imported: a DependencyError naming both versions and the
    fix, with no frame of torchmetrics or torchvision in the traceback."""
    code = "from ella.train import TrainConfig, train"
    env = broken_torchvision(tmp_path, failure)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ella.errors.DependencyError: torchvision 0.99.0 "), proc.stderr
    assert f"with torch {torch.__version__}" in last and "`pip uninstall torchvision`" in last
    assert failure in last  # the original error, summarised
    assert "torchmetrics/" not in proc.stderr and "lightning_utilities" not in proc.stderr


@pytest.mark.slow
def test_the_command_line_reports_a_broken_torchvision_as_one_error_line(tmp_path):
    env = broken_torchvision(tmp_path, "RuntimeError")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ella", "train", "--out", str(out), "--no-progress"],
        env=env, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: torchvision 0.99.0 "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "uninstall torchvision" in proc.stderr
    assert not out.exists()


def test_only_a_failure_inside_torchvision_is_reworded():
    from ella.runtime.dependencies import broken_torchvision as reworded

    assert reworded(RuntimeError("CUDA error: out of memory")) is None
    assert reworded(ImportError("cannot import name 'Kron' from 'laplace'")) is None
    missing = ModuleNotFoundError("No module named 'torchvision'", name="torchvision")
    assert reworded(missing) is None
    assert "pip uninstall torchvision" in reworded(
        AttributeError("partially initialized module 'torchvision' has no attribute 'ops'")
    )
