"""The paper profile's epoch on a GPU once the step reads nothing back from the device: two
epochs of ``train_epoch`` per ``--precision`` (fp32, tf32, bf16) of Table 3's learned
rotated-MNIST row, one process (``docs/research/0037-gpu-training-step.md``)::

    python -m experiments.gpu_probe_after DATA

(As run, it went on to profile a whole tf32 epoch, which did not finish within the call's
limit; ``benchmarks.speed --profile gpu`` profiles ten steps instead.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time

import torch

from benchmarks.table3 import PROFILES, row_config
from ella.train import Trainer


def main() -> None:
    args = argparse.Namespace(data_dir=sys.argv[1], seed=0, device="cuda")
    base = row_config("rotated_mnist", True, PROFILES["paper"], "full", args)
    out = {}
    for precision in ("fp32", "tf32", "bf16"):
        trainer = Trainer(dataclasses.replace(base, precision=precision), tempfile.mkdtemp())
        times = []
        for _ in range(2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            row = trainer.train_epoch()
            trainer.state.epoch += 1
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        out[precision] = times
        print(precision, [round(t, 2) for t in times], row, flush=True)
        del trainer
    print(json.dumps(out))


if __name__ == "__main__":
    main()
