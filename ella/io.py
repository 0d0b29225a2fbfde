"""Atomic file writes: a crash never leaves a half-written checkpoint, result or figure."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(f)`` on a temporary file next to ``path``, then rename it to ``path``."""
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
    return path


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file and an atomic rename."""
    atomic_write(path, lambda f: torch.save(obj, f))


def save_text(text: str, path: Path) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def save_json(obj: Any, path: Path) -> None:
    save_text(json.dumps(obj, indent=2) + "\n", path)


def save_jsonl(rows: list[dict], path: Path) -> None:
    save_text("".join(json.dumps(r) + "\n" for r in rows), path)


class JsonConfig:
    """``to_dict``/``from_dict`` for dataclass configurations saved as JSON.

    Tuple fields become lists in the dict and lists become tuples again; unknown
    keys are refused (a run directory from another version says so).
    """

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown configuration keys: {sorted(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def load_checkpoint(path: Path, config: dict) -> dict:
    """Read a run's checkpoint for ``--resume``, refusing one saved with another configuration.

    Args:
        path: the checkpoint file (a dict with a ``"config"`` entry).
        config: the resuming run's configuration as a dict.

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        ValueError: the saved configuration differs; the message names the keys.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {path}")
    ckpt = load_torch(path)
    if ckpt["config"] != config:
        changed = sorted(k for k, v in ckpt["config"].items() if config.get(k) != v)
        raise ValueError(
            f"--resume: the configuration differs from the checkpoint's in {changed}; "
            "resume with the same options or start a new run directory"
        )
    return ckpt


def load_torch(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:
        raise RuntimeError(f"cannot read checkpoint {path}: {err}") from err
