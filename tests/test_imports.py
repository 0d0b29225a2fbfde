"""The package has no import circles, and its command modules import in any order."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
