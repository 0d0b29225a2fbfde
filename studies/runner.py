"""Running the studies: the profiles' pinned settings, the common command-line arguments,
running a list of configurations (resuming an interrupted one; ensembles too), stamping
and writing a results table through :mod:`studies.results`' guarded writers, and timing a
call."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ella.ensembles import EnsembleConfig, EnsembleTrainer
from ella.io import save_json
from studies.results import BENCHMARK_RESULTS, environment, write_generated

#: the offline data directory of this project (``../shared/data``), used unless
#: ``--data-dir`` or ``$ELLA_DATA`` says otherwise
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


#: a tiny budget for smoke tests of the scripts
SMOKE = dict(
    train_size=32, test_size=32, epochs=2, n_epochs_burnin=1, marglik_frequency=1,
    n_hypersteps=2, width=1, batch_size=16,
)  # fmt: skip
#: the evidence rounds of ``ella train``'s first recipe (every third epoch, 20 Adam steps on
#: the log precisions per round), pinned by the profiles whose results were made with them;
#: the damped optimum that replaced them: docs/research/0009-a-converging-schedule.md
ADAM_ROUNDS = dict(prior_update="adam", prior_step=1.0, marglik_frequency=3)
#: every path at its random start, pinned by the profiles whose results were made so; the FC
#: path starting at zero that replaced it: docs/research/0011-fc-path-starts-at-zero.md
RANDOM_START = dict(zero_init=())
#: the GCONV paths at every other tensor's rate, pinned by the profiles whose results were
#: made so; ``--gconv-lr auto`` that replaced it: docs/research/0013-gconv-rate.md
SAME_GCONV_RATE = dict(gconv_lr="same")
#: the MC GGN on 1000 images per evidence round, N / M alone, pinned by the profiles whose
#: results were made with it; the stratified GGN on 500 images and the subset's control
#: variate that replaced it: docs/research/0024-stratified-ggn.md,
#: docs/research/0025-subset-control-variate.md (Table 3 under both:
#: docs/research/0026-table3-with-current-rounds.md)
MC_ROUNDS = dict(ggn="mc", marglik_subset_size=1000, subset_control="none")
#: the reference's schedule on the full data (for a GPU)
PAPER_SCHEDULE = dict(
    train_size=None, test_size=None, epochs=200, n_epochs_burnin=10, marglik_frequency=5,
    n_hypersteps=20, optimizer="sgd", lr=0.1, prior_precision=1.0, batch_size=500,
    prior_update="adam", prior_step=1.0, **MC_ROUNDS,
)  # fmt: skip


def claims_markdown(claims: dict[str, bool], notes: list[str]) -> list[str]:
    """The claims checked at a profile and the measured notes on them, as Markdown lines."""
    lines = ["", "Claims of the paper at this profile:", ""]
    lines += [f"- {claim}: **{'yes' if ok else 'no'}**" for claim, ok in claims.items()]
    lines += ["", "Why, as measured:", ""]
    lines += [f"- {note}" for note in notes]
    return [*lines, ""]


def analysis_lines(record: str | None) -> list[str]:
    """The Markdown line naming the decision record (under ``docs/research/``) that reads a
    results file, where one does; none otherwise."""
    return [f"Analysis: {record}", ""] if record else []


def default_data_dir() -> str | None:
    """``$ELLA_DATA``, else :data:`SHARED_DATA` where it is a folder, else None (ella's
    embedded subset)."""
    if os.environ.get("ELLA_DATA"):
        return os.environ["ELLA_DATA"]
    return str(SHARED_DATA) if SHARED_DATA.is_dir() else None


def common_arguments(parser: argparse.ArgumentParser, profiles: dict) -> None:
    """``--profile``, ``--data-dir``, ``--results-dir`` (benchmarks/results: an experiment
    sets its own default), ``--seed``, ``--device`` and ``--render-only``."""
    parser.add_argument("--profile", choices=sorted(profiles), default="cpu")
    parser.add_argument(
        "--data-dir", default=default_data_dir(), help="data directory (default: ../shared/data)"
    )
    parser.add_argument(
        "--results-dir", default=str(BENCHMARK_RESULTS), help="where to write results"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device of every run, e.g. cpu or cuda (the results file says which)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rebuild the JSON claims/notes and the Markdown from the existing results file",
    )


def run_with_partial(
    runs: list[tuple[dict, Any]],
    run_one: Callable[[dict, Any], dict],
    desc: str,
    partial: Path | None = None,
) -> list[dict]:
    """``run_one(labels, config)`` for every run; return one row per run.

    If ``partial`` is given, each finished row is saved there at once (atomically),
    and rows already saved for the same labels and configuration (``config.to_dict()``)
    are reused, so an interrupted benchmark continues where it stopped.
    """
    done = {}
    if partial is not None and partial.is_file():
        for row in json.loads(partial.read_text()):
            done[json.dumps([row["labels"], row["config"]], sort_keys=True)] = row["row"]
    saved, rows = [], []
    bar = tqdm(runs, desc=desc)
    for labels, config in bar:
        bar.set_postfix(labels)
        key = json.dumps([labels, config.to_dict()], sort_keys=True)
        if key not in done:
            done[key] = run_one(labels, config)
        rows.append(done[key])
        saved.append({"labels": labels, "config": config.to_dict(), "row": done[key]})
        if partial is not None:
            save_json(saved, partial)
    return rows


Measure = Callable[[dict, EnsembleTrainer], dict]


def run_ensembles(
    runs: list[tuple[dict, EnsembleConfig]],
    measure: Measure,
    desc: str,
    partial: Path | None = None,
) -> list[dict]:
    """Train every ensemble configuration and ``measure(labels, trainer)`` it; one row per
    run, resuming from ``partial`` (see :func:`run_with_partial`)."""

    def run_one(labels: dict, config: EnsembleConfig) -> dict:
        start = time.perf_counter()
        trainer = EnsembleTrainer(config)
        trainer.run(evaluate=False)
        return {**labels, **measure(labels, trainer), "seconds": time.perf_counter() - start}

    return run_with_partial(runs, run_one, desc, partial)


def command_line(args: argparse.Namespace, script: str) -> str:
    """The command that reproduces a results file (profile, and seed and device where they
    are not the defaults)."""
    command = f"python -m benchmarks.{script} --profile {args.profile}"
    if args.seed != 0:
        command += f" --seed {args.seed}"
    if getattr(args, "device", "cpu") != "cpu":
        command += f" --device {args.device}"
    return command


def as_experiment(payload: dict) -> dict:
    """``payload`` with its ``command`` naming the script's module under ``experiments``
    (:func:`stamp` writes ``python -m benchmarks.NAME``)."""
    command = payload.get("command")
    if isinstance(command, str) and command.startswith("python -m benchmarks."):
        payload["command"] = "python -m experiments." + command.removeprefix(
            "python -m benchmarks."
        )
    return payload


def stamp(args: argparse.Namespace, script: str, profile: dict, seconds: float) -> dict:
    """What a results file says of its making: profile, command, settings, seed,
    environment, wall time and threads."""
    return {
        "profile": args.profile,
        "command": command_line(args, script),
        "settings": profile,
        "seed": args.seed,
        "environment": environment(getattr(args, "device", "cpu")),
        "wall_time_s": seconds,
        "torch_threads": torch.get_num_threads(),
    }


def partial_path(args: argparse.Namespace, name: str) -> Path:
    """Where finished runs of an unfinished benchmark are kept (removed when it completes)."""
    return Path(args.results_dir) / f".{name}.{args.profile}.partial.json"


def write(args: argparse.Namespace, name: str, payload: dict, markdown: str) -> None:
    """Write ``NAME.json`` and ``NAME.md`` under ``--results-dir`` and remove the partial
    file of the finished runs."""
    root = Path(args.results_dir)
    write_generated(root / f"{name}.json", payload, root / f"{name}.md", markdown)
    partial_path(args, name).unlink(missing_ok=True)


def load_or_measure(
    args: argparse.Namespace, name: str, settings: dict, measure: Callable[[], dict]
) -> dict:
    """With ``--render-only`` load ``results/NAME.json``; else time ``measure()`` (the
    payload's own keys) and put the :func:`stamp` in front of what it returns."""
    if args.render_only:
        return json.loads((Path(args.results_dir) / f"{name}.json").read_text())
    start = time.time()
    measured = measure()
    return {**stamp(args, name, settings, time.time() - start), **measured}


def header_line(payload: dict, data_note: str = "") -> str:
    """Command, profile, settings, seed, (data note,) device and wall time of a results file."""
    data = f"{data_note}; " if data_note else ""
    return (
        f"`{payload['command']}`; profile `{payload['profile']}`: {payload['settings']}; "
        f"seed {payload['seed']}; {data}{payload['environment']['device']}, "
        f"{payload['torch_threads']} threads; wall time {payload['wall_time_s'] / 60:.1f} min."
    )


def seconds(fn) -> float:
    """Wall time of one call ``fn()``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    """The middle value (the upper one of the two middle values of an even count)."""
    return sorted(values)[len(values) // 2]


def median_seconds(fn, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls after one warm-up."""
    fn()
    return median([seconds(fn) for _ in range(repeats)])


__all__ = [
    "ADAM_ROUNDS",
    "MC_ROUNDS",
    "PAPER_SCHEDULE",
    "RANDOM_START",
    "SAME_GCONV_RATE",
    "SHARED_DATA",
    "SMOKE",
    "Measure",
    "analysis_lines",
    "as_experiment",
    "claims_markdown",
    "command_line",
    "common_arguments",
    "default_data_dir",
    "header_line",
    "load_or_measure",
    "median",
    "median_seconds",
    "partial_path",
    "run_ensembles",
    "run_with_partial",
    "seconds",
    "stamp",
    "write",
]
