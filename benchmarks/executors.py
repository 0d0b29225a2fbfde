"""Where a round's candidates train: ``local`` against ``processes`` and ``ray``.

One round of four small candidates (``ella select --drop-only`` on a learned FC+CONV+GCONV
mixer: the network and the network without each path), from the same run, under each
executor in turn, in this one process:

* the round's wall time, what a user waits for ``ella select``, start-up included, and its
  ratio against ``local`` (below 1 the executor is faster), with and without the start-up;
* each executor's start-up cost alone: a worker pool of spawned processes, or a local Ray
  instance, from nothing until a first job that imports torch has returned, then shut down
  (``local`` has none);
* the largest difference of a candidate's log evidence from ``local``'s: a candidate's
  figures depend on the torch threads it trains with (``local`` gives one candidate every
  core, two workers one each), and on nothing else of where it ran.

Each executor is measured ``--repeats`` times, interleaved (machines are noisy); the table
gives the mean and the range. With ``--gpu-shares`` on a machine with a GPU, the same round
runs as Ray tasks of a run trained on the GPU, ``1/k`` of the GPU per task, for each ``k``:
the shares at which the round stops getting faster.

    python -m benchmarks.executors                       # cpu, two workers, ~6 min
    python -m benchmarks.executors --gpu-shares 1 2 4 8  # where a GPU is lent
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import torch

from ella import selection
from ella.cli import main as ella
from ella.runtime.system import available_cpus
from ella.selection.executors import RayExecutor, run_job
from studies.results import BENCHMARK_RESULTS, environment, write_results

#: the learned run whose paths the round drops: small, so that a round takes a minute
RUN = [
    "--paths", "fc", "conv", "gconv", "--train-size", "1000", "--test-size", "100",
    "--width", "1", "--epochs", "2", "--batch-size", "32", "--n-epochs-burnin", "1",
    "--marglik-frequency", "1", "--n-hypersteps", "2", "--no-progress",
]  # fmt: skip
#: the epochs each candidate trains for
EPOCHS = 2


def learned_run(where: Path, device: str = "cpu") -> Path:
    """A learned run of :data:`RUN` on ``device`` under ``where``."""
    run = where / f"run_{device.split(':')[0]}"
    if ella(["train", "--out", str(run), *RUN, "--device", device]) != 0:
        raise RuntimeError(f"ella train {' '.join(RUN)} failed")
    return run


def one_round(run: Path, where: Path, executor, **settings) -> tuple[float, dict]:
    """Seconds of one drop round on a fresh copy of ``run`` under ``executor``, and its
    log evidence by candidate."""
    copy = Path(shutil.copytree(run, where))
    start = time.perf_counter()
    record = selection.select(
        copy, search="drop", epochs=EPOCHS, executor=executor, progress=False, **settings
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(copy)
    return seconds, {row["dropped"]: row["log_evidence"] for row in record["rows"]}


def _imports_torch(_: object) -> str:
    """A first job: what a worker does before any candidate (import torch and ella)."""
    import ella.selection.candidates  # noqa: F401

    return torch.__version__


def process_start(workers: int) -> float:
    """Seconds from nothing until ``workers`` spawned processes have each returned a first
    job, and the pool is shut down."""
    start = time.perf_counter()
    with ProcessPoolExecutor(workers, get_context("spawn")) as pool:
        futures = [pool.submit(run_job, _imports_torch, 1, n) for n in range(workers)]
        [f.result() for f in futures]
    return time.perf_counter() - start


def ray_start(workers: int) -> float:
    """Seconds from nothing until a local Ray instance of ``workers`` CPUs has returned a
    first job from each of its workers, and is shut down."""
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_job).options(num_cpus=1)
    ray.get([remote.remote(_imports_torch, 1, n) for n in range(workers)])
    ray.shutdown()
    return time.perf_counter() - start


def measure(run: Path, where: Path, workers: int, repeats: int) -> dict:
    """Every executor's rounds and start-ups, ``repeats`` times, interleaved."""
    settings = {
        "local": {},
        "processes": {"workers": workers},
        "ray": {"workers": workers},
    }
    starts = {"local": lambda: 0.0, "processes": partial(process_start, workers),
              "ray": partial(ray_start, workers)}  # fmt: skip
    found = {name: {"round_s": [], "start_s": [], "log_evidence": None} for name in settings}
    for repeat in range(repeats):
        for name, kwargs in settings.items():
            print(f"repeat {repeat + 1}/{repeats}: {name}", flush=True)
            seconds, evidence = one_round(run, where / f"{name}_{repeat}", name, **kwargs)
            found[name]["round_s"].append(seconds)
            found[name]["start_s"].append(starts[name]())
            found[name]["log_evidence"] = evidence
    return found


def gpu_shares(run: Path, where: Path, shares: list[int]) -> list[dict]:
    """The round as Ray tasks of ``1/k`` GPU each, for each ``k`` of ``shares``."""
    import ray

    rows = []
    for k in shares:
        ray.init(num_gpus=1, include_dashboard=False, log_to_driver=False)
        try:
            executor = RayExecutor(gpus=1.0 / k)
            seconds, _ = one_round(run, where / f"gpu_{k}", executor)
        finally:
            ray.shutdown()
        rows.append({"candidates_per_gpu": k, "round_s": seconds})
        print(f"{k} candidate(s) a GPU: {seconds:.1f} s", flush=True)
    return rows


def _spread(values: list[float]) -> str:
    """``mean (min-max)`` of ``values``, in seconds."""
    mean = statistics.fmean(values)
    return f"{mean:.1f} ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else f"{mean:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="workers of processes and ray")
    parser.add_argument("--repeats", type=int, default=2, help="rounds per executor")
    parser.add_argument(
        "--gpu-shares", type=int, nargs="*", default=[], metavar="K",
        help="candidates per GPU to measure, e.g. 1 2 4 8 (needs a GPU)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.gpu_shares and not torch.cuda.is_available():
        parser.error("--gpu-shares needs a GPU: leave it out on this machine")
    torch.set_num_threads(available_cpus())
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        run = learned_run(where)
        found = measure(run, where, args.workers, args.repeats)
        shares = []
        if args.gpu_shares:
            shares = gpu_shares(learned_run(where, "cuda"), where, args.gpu_shares)
    local = statistics.fmean(found["local"]["round_s"])
    for one in found.values():
        one["ratio"] = statistics.fmean(one["round_s"]) / local
        one["training_ratio"] = (
            statistics.fmean(one["round_s"]) - statistics.fmean(one["start_s"])
        ) / local
        one["largest_evidence_difference"] = max(
            abs(one["log_evidence"][k] - found["local"]["log_evidence"][k])
            for k in one["log_evidence"]
        )
    env = environment("cpu")
    payload = {"environment": env, "cpus": available_cpus(), "workers": args.workers,
               "candidates": len(found["local"]["log_evidence"]), "epochs": EPOCHS,
               "run": RUN, "executors": found, "gpu_shares": shares}  # fmt: skip
    lines = [
        f"# A round of {payload['candidates']} candidates under each executor",
        "",
        f"`python -m benchmarks.executors --workers {args.workers} --repeats {args.repeats}` "
        f"({env['date']}, {env['cpu']}, {payload['cpus']} CPUs, torch {env['torch']}); "
        f"`ella select --drop-only --epochs {EPOCHS}` on a learned FC+CONV+GCONV mixer of "
        f"1,000 images; `local` trains one candidate at a time on {env['threads']} threads, "
        f"`processes` and `ray` {args.workers} at a time on "
        f"{max(1, payload['cpus'] // args.workers)} each. Seconds: mean (range) of "
        f"{args.repeats} rounds.",
        "",
        "| executor | round (s) | ratio to local | start-up alone (s) | round less start-up, "
        "ratio to local | largest log evidence difference from local |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, one in found.items():
        start = _spread(one["start_s"]) if name != "local" else "none"
        lines.append(
            f"| {name} | {_spread(one['round_s'])} | {one['ratio']:.2f} | {start} | "
            f"{one['training_ratio']:.2f} | {one['largest_evidence_difference']:.1f} |"
        )
    if shares:
        lines += ["", "| candidates per GPU | round (s) |", "|---:|---:|"]
        lines += [f"| {r['candidates_per_gpu']} | {r['round_s']:.1f} |" for r in shares]
    else:
        lines += ["", "Candidates sharing one GPU: not measured (no GPU on this machine)."]
    print("\n".join(lines))
    write_results("executors", payload, "\n".join(lines) + "\n", BENCHMARK_RESULTS)


if __name__ == "__main__":
    main()
