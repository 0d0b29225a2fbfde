"""What the benchmark scripts alone share (beside :mod:`studies`, which they share with the
experiments): training a list of ``ella train`` configurations as a table's rows (resuming
an interrupted one), the notes on a schedule and on a comparison, and saving a figure."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ella.engine.health import collapse_line
from ella.io import atomic_write
from ella.learner.report import share_summary
from ella.train import TrainConfig, Trainer, cosine_lr, evidence_epochs
from studies.runner import load_or_measure, partial_path, run_with_partial


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


def save_figure_atomic(fig, path) -> None:
    """Write a matplotlib figure as PNG atomically."""
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))


__all__ = [
    "comparison_notes",
    "run_all",
    "run_or_load",
    "save_figure_atomic",
    "schedule_note",
    "train_row",
]
