"""The README's install lines, run as written from the checkout's root (offline: without
dependencies or build isolation, into a target folder)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
OFFLINE = ["--no-deps", "--no-build-isolation"]


def install_commands() -> list[list[str]]:
    """The ``pip`` commands of the README's Install section, without their comments."""
    section = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    lines = [ln.split("#")[0].split() for b in re.findall(r"```bash\n(.*?)```", section, re.S)
             for ln in b.splitlines()]  # fmt: skip
    return [ln for ln in lines if ln[:1] == ["pip"]]


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


@pytest.mark.slow
def test_the_readme_install_lines_work_as_written_from_the_checkout_root(tmp_path):
    commands = install_commands()
    library = [c for c in commands if c[:2] == ["pip", "install"] and "torch" not in c]
    wheel = [c for c in commands if c[:2] == ["pip", "wheel"]]
    assert library == [["pip", "install", "."]], library
    assert wheel == [["pip", "wheel", "--no-deps", "-w", "dist", "."]], wheel
    root = checkout(tmp_path)
    target = tmp_path / "site"
    subprocess.run([*PIP, *library[0][1:], *OFFLINE, "--target", str(target)], cwd=root, check=True)
    assert Path(imports_from(target, tmp_path)).is_relative_to(target)
    subprocess.run([*PIP, *wheel[0][1:], "--no-build-isolation"], cwd=root, check=True)
    (built,) = (root / "dist").glob("ella_torch-*.whl")
    wheel_target = tmp_path / "wheel_site"
    subprocess.run([*PIP, "install", str(built), "--no-deps", "--target", str(wheel_target)],
                   check=True)  # fmt: skip
    assert Path(imports_from(wheel_target, tmp_path)).is_relative_to(wheel_target)


def test_the_readme_says_where_ella_is_published():
    assert "not published on PyPI" in README
