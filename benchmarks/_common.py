"""Helpers shared by the benchmark scripts: environment stamp and result writing."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def environment() -> dict:
    """Device, thread count and versions, stamped into every result file."""
    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_results(name: str, payload: dict, markdown: str) -> None:
    """Write ``results/NAME.json`` and ``results/NAME.md``."""
    write_atomic(RESULTS / f"{name}.json", json.dumps(payload, indent=2) + "\n")
    write_atomic(RESULTS / f"{name}.md", markdown)
    print(f"wrote {RESULTS / name}.json and .md")
