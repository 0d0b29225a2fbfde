"""Time the Table 3 paper profile's epoch on a GPU per precision, eager and captured
(``--cuda-graph off``/``on``), one JSON line per variant, within ``--seconds``.

A short check for a device call with little time: the full benchmark is
``python -m benchmarks.speed --profile gpu``.

    python tools/gpu_epoch.py --data-dir DIR [--seconds 80]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import torch

from benchmarks.speed_gpu import release, run_variant, step_flops
from studies.table3 import PROFILES, row_config

VARIANTS = (("fp32", "off"), ("fp32", "on"), ("bf16", "on"), ("bf16", "off"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--seconds", type=float, default=80.0)
    args = parser.parse_args()
    start = time.time()
    ns = argparse.Namespace(data_dir=args.data_dir, seed=0, device="cuda")
    cfg = row_config("rotated_mnist", True, PROFILES["paper"], "full", ns)
    print(json.dumps({"card": torch.cuda.get_device_name(), "torch": torch.__version__}))
    flops = None
    for precision, graph in VARIANTS:
        if time.time() - start > args.seconds:
            print(json.dumps({"variant": f"{precision} graph {graph}", "skipped": "time"}))
            continue
        try:
            variant = dataclasses.replace(cfg, cuda_graph=graph)
            row, trainer = run_variant(variant, precision, False, 1)
            if flops is None:
                flops = step_flops(trainer)
            row["tflops"] = flops * row["steps_per_s"] / 1e12
            row["tensors"] = sum(1 for _ in trainer.model.parameters())
            del trainer
            release(torch.device("cuda"))
        except Exception as err:  # noqa: BLE001 (recorded, the next variant runs)
            row = {"error": f"{type(err).__name__}: {err}"[:500]}
        print(json.dumps({"variant": f"{precision} graph {graph}", **row}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
