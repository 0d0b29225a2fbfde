"""Helpers shared by the benchmark scripts: environment stamp and result writing."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import torch

from ella.io import save_json, save_text

RESULTS = Path(__file__).resolve().parent / "results"


def environment(device: str | None = None) -> dict:
    """Device, thread count and versions, stamped into every result file. ``device``: the
    torch device the runs used (its GPU's name is written for ``cuda``); ``None``: the GPU
    when there is one."""
    on_gpu = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    return {
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
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
