"""The main job and the question it exists for: ``./run.sh train``, then ``ella select`` on it.

Runs ``ella train`` with its defaults (the embedded MNIST subset, seed 0) into ``--out``,
then ``ella select`` on that run (20 epochs per candidate network, ``--seeds K`` seeds per
candidate), each resumed where an earlier call stopped; then writes
``results/main_job.json`` and ``.md``: the run's test accuracy, log evidence and mean
shares, and the selection's rounds, the paths it keeps, the selected network's accuracy
against the whole network trained on alike, and how sure the answer is
(:func:`ella.selection.decision`: each step's mean and standard error over the seeds,
whether it is decided). The README's line under the main job's sample output is written
from that file by ``python -m benchmarks.claims``.

    python -m benchmarks.main_job --out runs/main_job             # about 15 min on 2 cores
    python -m benchmarks.main_job --out runs/main_job --seeds 3   # about 40 min
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ella.cli import main as ella
from ella.rundir import PATH_SELECTION, RESULTS, SELECT_EPOCHS
from ella.selection import decision
from studies.results import BENCHMARK_RESULTS, environment, write_results

__all__ = ["collect", "main"]


def collect(run_dir: Path, seconds: dict[str, float]) -> dict:
    """The payload of ``results/main_job.json`` from a finished run and its selection."""
    results = json.loads((run_dir / RESULTS).read_text())
    record = json.loads((run_dir / PATH_SELECTION).read_text())
    layers = results["effective_parameters"]
    shares = {p: sum(r[p] for r in layers) / len(layers) for p in ("fc", "conv", "gconv")}
    rounds = [
        {
            "kept": r["kept"],
            "winner": r["winner"],
            "rows": [
                {
                    k: row[k]
                    for k in ("dropped", "test_accuracy", "log_evidence", "replicates")
                    if k in row
                }  # fmt: skip
                for row in r["rows"]
            ],
        }
        for r in record["rounds"]
    ]
    return {
        "command": "python -m benchmarks.main_job",
        "environment": environment("cpu"),
        "run": {
            "test_accuracy": results["test_accuracy"],
            "log_marglik": results["log_marglik_reported_state"],
            "mean_shares": shares,
            "train_time_s": results["train_time_s"],
            "seed": results["config"]["seed"],
            "train_size": results["train_size"],
        },
        "selection": {
            "epochs": record["epochs"],
            "kept": record["kept"],
            "rounds": rounds,
            "networks": sum(len(r["rows"]) for r in record["rounds"]),
            "null_log_evidence": record["null"]["log_evidence"],
            "seeds": record.get("seeds", 1),
            "decision": decision(record),
        },
        "seconds_this_call": seconds,  # a step resumed finished costs nothing here
    }


def markdown(payload: dict) -> str:
    run, sel = payload["run"], payload["selection"]
    lines = [
        "# The main job and which paths its data need",
        "",
        f"`{payload['command']}`: `ella train` (defaults, seed {run['seed']}, "
        f"{run['train_size']} images), then `ella select` ({sel['epochs']} epochs per "
        "network).",
        "",
        f"Run: test accuracy {100 * run['test_accuracy']:.2f}%, log evidence "
        f"{run['log_marglik']:.1f}, mean shares FC/CONV/GCONV "
        + "/".join(f"{run['mean_shares'][p]:.1f}" for p in ("fc", "conv", "gconv"))
        + "%.",
        "",
        "| round | network | dropped | test acc % | log evidence | vs control |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for number, r in enumerate(sel["rounds"], start=1):
        control = r["rows"][0]["log_evidence"]
        for row in r["rows"]:
            lines.append(
                f"| {number} | {'+'.join(r['kept']).upper()} | {row['dropped']} | "
                f"{100 * row['test_accuracy']:.2f} | {row['log_evidence']:.1f} | "
                f"{row['log_evidence'] - control:+.1f} |"
            )
    lines += [
        "",
        f"Kept: {'+'.join(sel['kept']).upper()} ({sel['networks']} networks; no network: "
        f"log evidence {sel['null_log_evidence']:.1f}).",
    ]
    sure = sel.get("decision")
    if sure is not None:
        lines += ["", "| round | step | gain (nats) | standard error | seeds agreeing | decided |",
                  "|---:|---|---:|---:|---:|---|"]  # fmt: skip
        for step in sure["steps"]:
            se = "-" if step["se"] is None else f"{step['se']:.0f}"
            lines.append(
                f"| {step['round']} | {step['action']} {step['unit'].upper()} | "
                f"{step['mean']:+.0f} | {se} | {step['agree']} of {step['seeds']} | "
                f"{'yes' if step['decided'] else 'no'} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/main_job", help="the run directory (resumed)")
    parser.add_argument("--seeds", type=int, default=1, help="ella select --seeds (default 1)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    if not (out / RESULTS).is_file():
        resume = ["--resume"] if (out / "checkpoint.pt").is_file() else []
        if ella(["train", "--out", str(out), "--no-progress", *resume]) != 0:
            raise SystemExit("ella train failed (above); run this script again to resume it")
    seconds["train"] = time.perf_counter() - start
    start = time.perf_counter()
    asked = ["--epochs", str(SELECT_EPOCHS), "--seeds", str(args.seeds), "--no-progress"]
    if ella(["select", str(out), *asked]) != 0:
        raise SystemExit("ella select failed (above); run this script again to resume it")
    seconds["select"] = time.perf_counter() - start
    payload = collect(out, seconds)
    write_results("main_job", payload, markdown(payload), BENCHMARK_RESULTS)
    return payload


if __name__ == "__main__":
    main()
