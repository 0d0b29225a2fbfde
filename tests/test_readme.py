"""The README's install lines, run as written from the checkout's root (offline: without
dependencies or build isolation, into a target folder), and what they install: everything
ella imports, and no torchvision (which pip would take from PyPI with another torch)."""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
INDEX = (ROOT / "docs" / "index.md").read_text()
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
OFFLINE = ["--no-deps", "--no-build-isolation"]
DEPENDENCIES = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def install_commands(text: str = README) -> list[list[str]]:
    """The ``pip`` commands of a page's Install section, without their comments."""
    section = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    lines = [ln.split("#")[0].split() for b in re.findall(r"```bash\n(.*?)```", section, re.S)
             for ln in b.splitlines()]  # fmt: skip
    return [ln for ln in lines if ln[:1] == ["pip"]]


def named(command: list[str]) -> list[str]:
    """The distributions a ``pip install`` command names (``.``: ella-torch)."""
    args = [a for i, a in enumerate(command[2:]) if not a.startswith("-")
            and not command[1 + i].startswith("--index")]  # fmt: skip
    return [
        "ella-torch" if a == "." else canonicalize_name(Requirement(a.strip("\"'")).name)
        for a in args
    ]


def requires(name: str) -> list[str]:
    """``name``'s requirements (its ``pyproject.toml`` for ella-torch, else its installed
    metadata; none where it is not installed), extras and other platforms' left out."""
    try:
        reqs = DEPENDENCIES if name == "ella-torch" else md.requires(name) or []
    except md.PackageNotFoundError:
        return []
    kept = [Requirement(r) for r in reqs]
    return [canonicalize_name(r.name) for r in kept
            if r.marker is None or r.marker.evaluate({"extra": ""})]  # fmt: skip


def checkout(tmp_path: Path) -> Path:
    """What a clone holds for the build: the package, its metadata, README and licence."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "ella", root / "ella", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def imports_from(target: Path, cwd: Path) -> str:
    probe = "import ella, ella.data; print(ella.__file__)"
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, env={"PYTHONPATH": str(target)},
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_install_lines_bring_what_ella_imports_and_no_torchvision(page):
    """No command names torchvision or reaches it through what it installs with its
    dependencies; the commands together name ella's requirements and those of the
    packages installed with ``--no-deps`` (torch and torchvision aside)."""
    commands = [c for c in install_commands((ROOT / page).read_text()) if c[1] == "install"]
    assert len(commands) == 3, commands
    torch_line, resolved, no_deps = commands
    assert "--index-url" in torch_line and named(torch_line) == ["torch"], torch_line
    assert "--no-deps" in no_deps and "ella-torch" in named(no_deps), no_deps
    assert "--no-deps" not in resolved
    everything = {n for c in commands for n in named(c)}
    assert "torchvision" not in everything
    seen, todo = set(), named(resolved)
    while todo:  # what pip installs for the command that resolves
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += requires(name)
    assert "torchvision" not in seen, f"{page}: {' '.join(resolved)} brings torchvision"
    needed = {n for p in named(no_deps) for n in requires(p)} - {"torch", "torchvision"}
    assert needed <= everything, f"{page} does not install {sorted(needed - everything)}"


@pytest.mark.slow
def test_the_readme_install_lines_work_as_written_from_the_checkout_root(tmp_path):
    library = [c for c in install_commands() if "." in c]
    (wheel,) = [c for c in install_commands(INDEX) if c[:2] == ["pip", "wheel"]]
    assert len(library) == 1 and "--no-deps" in library[0], library
    assert wheel == ["pip", "wheel", "--no-deps", "-w", "dist", "."], wheel
    root = checkout(tmp_path)
    target = tmp_path / "site"
    subprocess.run([*PIP, "install", ".", *OFFLINE, "--target", str(target)], cwd=root, check=True)
    assert Path(imports_from(target, tmp_path)).is_relative_to(target)
    subprocess.run([*PIP, *wheel[1:], "--no-build-isolation"], cwd=root, check=True)
    (built,) = (root / "dist").glob("ella_torch-*.whl")
    wheel_target = tmp_path / "wheel_site"
    subprocess.run([*PIP, "install", str(built), "--no-deps", "--target", str(wheel_target)],
                   check=True)  # fmt: skip
    assert Path(imports_from(wheel_target, tmp_path)).is_relative_to(wheel_target)


def test_the_readme_says_where_ella_is_published():
    assert "not published on PyPI" in README
