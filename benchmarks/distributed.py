"""Data parallelism on this machine: one process with T threads against T processes with one.

On the default model and data (``TrainConfig()``: the 8-layer FC+CONV+GCONV
mixer, width 2, C4, 1000 images of the embedded MNIST subset at 28x28, batch
128), each setting in fresh processes, measured as the slowest process:

* one training epoch (after one warm-up epoch), with ``DistributedDataParallel``
  averaging the gradients across processes;
* one evidence fit over the 1000 images (native backend, exact and MC GGN),
  the Kronecker factors summed across processes with ``all_reduce``;
* the communication per evidence round: bytes of Kronecker factors all-reduced
  (every factor once, plus the log likelihood), against the model's parameter
  bytes (which DDP all-reduces on every training step).

The ratios are (time with P processes) / (time with one process), both with the
same number of cores in use; below 1 data parallelism is faster.

    python -m benchmarks.distributed                # cpu: 1 x 2 threads vs 2 x 1 thread, ~3 min
    python -m benchmarks.distributed --processes 4  # on a bigger machine
    python -m benchmarks.distributed --device cuda --processes 8  # one process per GPU (NCCL)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ella.io import save_json
from studies.results import BENCHMARK_RESULTS, environment, write_results
from studies.runner import ADAM_ROUNDS, RANDOM_START, SAME_GCONV_RATE

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- one process of a setting
def _timed(world, fn) -> float:
    """Seconds until every process has done ``fn()`` (the slowest process's time)."""
    if world.distributed:
        torch.distributed.barrier()
    start = time.perf_counter()
    fn()
    if world.distributed:
        torch.distributed.barrier()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def worker(out: str, device: str) -> None:
    """Measure one setting (run in every process of it); process 0 writes ``out``."""
    from ella import distributed
    from ella.marglik.laplace_internals import kron_factors
    from ella.train import TrainConfig, Trainer

    world = distributed.start()
    config = TrainConfig(
        progress=False, test_size=100, device=device, ggn="exact", marglik_subset_size=1000,
        subset_control="none",
        **ADAM_ROUNDS, **RANDOM_START, **SAME_GCONV_RATE,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, Path(tmp) / "run")
        trainer.train_epoch()  # warm-up (allocator, kernels)
        epoch = _timed(world, trainer.train_epoch)
        fits = {}
        for ggn in ("exact", "mc"):
            trainer.priors.recipe = trainer.priors.recipe.replace(ggn=ggn)
            fits[ggn] = _timed(world, trainer.fit_evidence)
        factors = [f for block in kron_factors(trainer.priors.evidence.laplace) for f in block]
    factor_bytes = sum(f.numel() * f.element_size() for f in factors) + 8
    model_bytes = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    if world.is_main:
        save_json(
            {
                "processes": world.size,
                "threads_per_process": torch.get_num_threads(),
                "epoch_s": epoch,
                "fit_exact_s": fits["exact"],
                "fit_mc_s": fits["mc"],
                "factor_bytes_per_round": factor_bytes,
                "model_bytes": model_bytes,
                "train_size": trainer.n_train,
                "batch_size": config.batch_size,
            },
            Path(out),
        )
    distributed.end_process(0)


# ---------------------------------------------------------------- the comparison
def _run_setting(processes: int, threads: int, device: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        worker_args = ["-m", "benchmarks.distributed", "--worker", str(out), "--device", device]
        if processes == 1:
            command = [sys.executable, *worker_args]
        else:
            command = [
                sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={processes}", *worker_args,
            ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "ELLA_THREADS": str(threads)}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="processes of the parallel run")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per process)")
    parser.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.device)
        return
    cores = args.processes
    one = _run_setting(1, cores if args.device == "cpu" else 1, args.device)
    many = _run_setting(args.processes, 1, args.device)
    ratios = {
        "epoch_ratio": many["epoch_s"] / one["epoch_s"],
        "fit_exact_ratio": many["fit_exact_s"] / one["fit_exact_s"],
        "fit_mc_ratio": many["fit_mc_s"] / one["fit_mc_s"],
        "factor_bytes_over_model_bytes": many["factor_bytes_per_round"] / many["model_bytes"],
    }
    payload = {"environment": environment(), "one_process": one, "processes": many, **ratios}
    label = f"{args.device}_{args.processes}"
    rows = [
        ("one training epoch (s)", "epoch_s", "epoch_ratio"),
        ("evidence fit, exact GGN (s)", "fit_exact_s", "fit_exact_ratio"),
        ("evidence fit, MC GGN (s)", "fit_mc_s", "fit_mc_ratio"),
    ]
    threads = one["threads_per_process"]
    lines = [
        f"# Data parallelism: 1 process x {threads} threads vs {args.processes} processes x 1",
        "",
        f"`python -m benchmarks.distributed --processes {args.processes} --device {args.device}` "
        f"({payload['environment']['date']}, {payload['environment']['cpu']}, torch "
        f"{payload['environment']['torch']}); default mixer, {one['train_size']} images, batch "
        f"{one['batch_size']}; times of the slowest process.",
        "",
        f"| measure | 1 x {threads} | {args.processes} x 1 | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, key, ratio in rows:
        lines.append(f"| {name} | {one[key]:.2f} | {many[key]:.2f} | {ratios[ratio]:.2f} |")
    lines += [
        "",
        f"Communication per evidence round: {many['factor_bytes_per_round'] / 1e6:.2f} MB of "
        f"Kronecker factors all-reduced, {ratios['factor_bytes_over_model_bytes']:.2f} x the "
        f"model's {many['model_bytes'] / 1e6:.2f} MB of parameters (which DDP all-reduces on "
        "every training step).",
    ]
    print("\n".join(lines))
    write_results(f"distributed_{label}", payload, "\n".join(lines) + "\n", BENCHMARK_RESULTS)


if __name__ == "__main__":
    main()
