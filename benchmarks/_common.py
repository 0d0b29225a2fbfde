"""Helpers shared by the benchmark scripts: environment stamp and result writing."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import torch

from ella.io import save_json, save_text

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


def write_results(name: str, payload: dict, markdown: str) -> None:
    """Write ``results/NAME.json`` and ``results/NAME.md``."""
    save_json(payload, RESULTS / f"{name}.json")
    save_text(markdown, RESULTS / f"{name}.md")
    print(f"wrote {RESULTS / name}.json and .md")
