"""Epoch times of Table 3's learned rotated-MNIST row at the paper profile on a GPU (the C4
mixer at width 4, 60,000 images, batches of 500), for ``docs/research/0037-gpu-training-step.md``.

``before`` (run at 03ba083, before the step stopped reading the device): two epochs, one
evidence fit, the peak memory, and whether ``torch.compile`` runs there. ``after``: two epochs
per ``--precision`` (fp32, tf32, bf16), one process. (As run, ``after`` went on to profile a
whole tf32 epoch, which did not finish within the call's limit; ``benchmarks.speed --profile
gpu`` profiles ten steps instead.) From the repository root on the device machine, with
MNIST/raw under ``DATA``::

    python -m experiments.gpu_probe before DATA
    python -m experiments.gpu_probe after DATA
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time

import torch

from ella.train import Trainer
from studies.table3 import PROFILES, row_config


def timed_epochs(trainer: Trainer, epochs: int = 2) -> list[float]:
    """Seconds of each of ``epochs`` epochs, the GPU synchronised around each."""
    times = []
    for _ in range(epochs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        row = trainer.train_epoch()
        trainer.state.epoch += 1
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        print(f"epoch {trainer.state.epoch}: {times[-1]:.2f} s", row, flush=True)
    return times


def before(config) -> dict:
    trainer = Trainer(config, tempfile.mkdtemp())
    out = {"epochs": timed_epochs(trainer)}
    start = time.perf_counter()
    trainer.fit_evidence()
    torch.cuda.synchronize()
    out["fit"] = time.perf_counter() - start
    out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    try:
        torch.compile(torch.nn.Linear(8, 8).cuda())(torch.randn(4, 8, device="cuda"))
        out["compile"] = "ok"
    except Exception as error:  # noqa: BLE001 - recorded
        out["compile"] = repr(error)[:300]
    return out


def after(config) -> dict:
    out = {}
    for precision in ("fp32", "tf32", "bf16"):
        trainer = Trainer(dataclasses.replace(config, precision=precision), tempfile.mkdtemp())
        out[precision] = timed_epochs(trainer)
        del trainer
    return out


def main() -> None:
    mode, data = sys.argv[1:3]
    print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), flush=True)
    args = argparse.Namespace(data_dir=data, seed=0, device="cuda")
    config = row_config("rotated_mnist", True, PROFILES["paper"], "full", args)
    print(json.dumps({"before": before, "after": after}[mode](config)))


if __name__ == "__main__":
    main()
