"""Atomic file writes: a crash never leaves a half-written checkpoint or result."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file and an atomic rename."""
    _atomic(path, lambda f: torch.save(obj, f))


def save_json(obj: Any, path: Path) -> None:
    _atomic(path, lambda f: f.write((json.dumps(obj, indent=2) + "\n").encode()))


def save_jsonl(rows: list[dict], path: Path) -> None:
    _atomic(path, lambda f: f.write("".join(json.dumps(r) + "\n" for r in rows).encode()))


def load_torch(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:
        raise RuntimeError(f"cannot read checkpoint {path}: {err}") from err
