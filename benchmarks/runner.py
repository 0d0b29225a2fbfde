"""The harness shared by the benchmark scripts and the experiments (``experiments/``):
running a list of training configurations (resuming an interrupted one), the profiles'
pinned settings, the common command-line arguments, and stamping and writing a results
table through :mod:`benchmarks.common`'s guarded writers."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from benchmarks.common import RESULTS, environment, write_generated
from ella.engine.health import collapse_line
from ella.io import atomic_write, save_json
from ella.learner.report import share_summary
from ella.train import TrainConfig, Trainer, cosine_lr, evidence_epochs

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
    if os.environ.get("ELLA_DATA"):
        return os.environ["ELLA_DATA"]
    return str(SHARED_DATA) if SHARED_DATA.is_dir() else None


def common_arguments(parser: argparse.ArgumentParser, profiles: dict) -> None:
    parser.add_argument("--profile", choices=sorted(profiles), default="cpu")
    parser.add_argument(
        "--data-dir", default=default_data_dir(), help="data directory (default: ../shared/data)"
    )
    parser.add_argument("--results-dir", default=str(RESULTS), help="where to write results")
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


def train_row(labels: dict, config: TrainConfig) -> dict:
    """Train one configuration in a temporary directory; its labels plus measurements."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        r = Trainer(config, out).run()
    return {
        **labels,
        "test_accuracy": r["test_accuracy"],
        "test_nll": r["test_nll"],
        "final_test_accuracy": r["final_test_accuracy"],
        "log_marglik": r["log_marglik_reported_state"],
        "log_marglik_history": r["log_marglik"],
        "shares": share_summary(r["effective_parameters"]),
        # the paper's Table 3 measure (ella.marglik.relative_effective)
        "relative_shares": share_summary([row["relative"] for row in r["effective_parameters"]]),
        "shares_history": r["shares_history"],
        "effective_parameters": r["effective_parameters"],
        "prior_precision": r["prior_precision"],
        "prior_convergence": r["prior_convergence"],
        "training_collapse": r["training_collapse"],
        "eta": r["eta"],
        "eta_history": r["eta_history"],
        "parameters": r["parameters"],
        "train_size": r["train_size"],
        "test_size": r["test_size"],
        "epochs": r["epochs"],
        "seconds": time.perf_counter() - start,
    }


def run_all(
    runs: list[tuple[dict, TrainConfig]], desc: str, partial: Path | None = None
) -> list[dict]:
    """Train every configuration (:func:`train_row`), resuming from ``partial``."""
    return run_with_partial(runs, train_row, desc, partial)


def command_line(args: argparse.Namespace, script: str) -> str:
    """The command that reproduces a results file (profile, and seed and device where they
    are not the defaults)."""
    command = f"python -m benchmarks.{script} --profile {args.profile}"
    if args.seed != 0:
        command += f" --seed {args.seed}"
    if getattr(args, "device", "cpu") != "cpu":
        command += f" --device {args.device}"
    return command


def stamp(args: argparse.Namespace, script: str, profile: dict, seconds: float) -> dict:
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
    root = Path(args.results_dir)
    write_generated(root / f"{name}.json", payload, root / f"{name}.md", markdown)
    partial_path(args, name).unlink(missing_ok=True)


def schedule_note(settings: dict) -> str:
    """When the evidence acted, for a profile's settings (a fact about the schedule).

    Callers pass the settings a results file stored over the profile's current ones, so
    that options pinned to the values a file ran with (``ADAM_ROUNDS``) fill what an
    older file did not store, instead of today's defaults."""
    config = TrainConfig(**{k: v for k, v in settings.items() if k in TrainConfig.__annotations__})
    epochs = evidence_epochs(config)
    if not epochs:
        return "the evidence was never fitted during training at this profile"

    steps = epochs[0] / config.epochs
    lr_left = cosine_lr(int(1000 * steps), 1000, 1.0, config.lr_min / config.lr)
    return (
        f"the evidence was fitted after epochs {epochs} of {config.epochs}: the learned priors "
        f"shaped the weights for the last {config.epochs - epochs[0]} epochs only, when the "
        f"cosine schedule had cut the learning rate to {100 * lr_left:.0f}% of its start"
    )


def comparison_notes(rows: list[dict], group: str, base: str, other: str) -> list[str]:
    """Facts per data set/task: runs whose training collapsed (:mod:`ella.engine.health`;
    recorded since 2026-11-26), under-trained models and differences below one point."""
    notes = [
        f"{r[group]}, {r['model']}: {collapse_line(r['training_collapse'])}"
        for r in rows
        if r.get("training_collapse")
    ]
    by = {}
    for r in rows:
        by.setdefault(r[group], {})[r["model"]] = r
    for name, models in by.items():
        best = max(r["test_accuracy"] for r in models.values())
        if best < 0.5:
            notes.append(
                f"{name}: the best test accuracy is {100 * best:.1f}%; the networks have not "
                "learned this task at this budget, so accuracies and shares describe "
                "under-trained models"
            )
        if base in models and other in models:
            diff = models[other]["test_accuracy"] - models[base]["test_accuracy"]
            if abs(diff) < 0.01:
                notes.append(
                    f"{name}: {other} and {base} differ by {100 * diff:+.1f} points, "
                    "less than one point at this budget"
                )
    return notes


def run_or_load(
    args: argparse.Namespace, name: str, runs: list[tuple[dict, TrainConfig]], extra: dict
) -> dict:
    """Train ``runs`` and stamp the payload, or with ``--render-only`` load the saved one."""
    settings = extra.pop("settings")

    def produce() -> dict:
        rows = run_all(runs, name.replace("table", "table "), partial_path(args, name))
        return {**extra, "rows": rows}

    return load_or_measure(args, name, settings, produce)


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


def save_figure_atomic(fig, path) -> None:
    """Write a matplotlib figure as PNG atomically."""
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))


def header_line(payload: dict, data_note: str = "") -> str:
    """Command, profile, settings, seed, (data note,) device and wall time of a results file."""
    data = f"{data_note}; " if data_note else ""
    return (
        f"`{payload['command']}`; profile `{payload['profile']}`: {payload['settings']}; "
        f"seed {payload['seed']}; {data}{payload['environment']['device']}, "
        f"{payload['torch_threads']} threads; wall time {payload['wall_time_s'] / 60:.1f} min."
    )


__all__ = [
    "ADAM_ROUNDS",
    "MC_ROUNDS",
    "PAPER_SCHEDULE",
    "RANDOM_START",
    "SAME_GCONV_RATE",
    "SMOKE",
    "analysis_lines",
    "claims_markdown",
    "command_line",
    "common_arguments",
    "comparison_notes",
    "default_data_dir",
    "header_line",
    "load_or_measure",
    "partial_path",
    "run_all",
    "run_or_load",
    "run_with_partial",
    "save_figure_atomic",
    "schedule_note",
    "stamp",
    "train_row",
    "write",
]
