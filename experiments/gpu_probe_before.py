"""The paper profile's epoch on a GPU before the step stopped reading the device: two epochs
of ``train_epoch`` and one evidence fit of Table 3's learned rotated-MNIST row (the C4 mixer at
width 4, 60,000 images, batches of 500), and whether ``torch.compile`` runs there.

Run on the device machine from the repository root at the commit before the change, with
MNIST/raw under ``DATA`` (``docs/research/0037-gpu-training-step.md``)::

    python -m experiments.gpu_probe_before DATA
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import torch

from benchmarks.table3 import PROFILES, row_config
from ella.train import Trainer


def main() -> None:
    print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), flush=True)
    args = argparse.Namespace(data_dir=sys.argv[1], seed=0, device="cuda")
    start = time.perf_counter()
    trainer = Trainer(
        row_config("rotated_mnist", True, PROFILES["paper"], "full", args), tempfile.mkdtemp()
    )
    print("setup s", round(time.perf_counter() - start, 1), "n", trainer.n_train, flush=True)
    out = {}
    for i in range(2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        row = trainer.train_epoch()
        trainer.state.epoch += 1
        torch.cuda.synchronize()
        out[f"epoch{i}"] = time.perf_counter() - start
        print("epoch", i, round(out[f"epoch{i}"], 2), row, flush=True)
    start = time.perf_counter()
    trainer.fit_evidence()
    torch.cuda.synchronize()
    out["fit"] = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30
    print("fit s", round(out["fit"], 2), "peak GiB", peak, flush=True)
    try:
        compiled = torch.compile(torch.nn.Linear(8, 8).cuda())
        compiled(torch.randn(4, 8, device="cuda"))
        out["compile"] = "ok"
    except Exception as error:  # noqa: BLE001 - recorded
        out["compile"] = repr(error)[:300]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
