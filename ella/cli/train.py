"""``ella train``: train a mixer, learning its per-layer, per-path priors (or MAP only)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ella import distributed
from ella.cli.common import (
    add_run_command,
    reports_errors,
    run_claimed,
)
from ella.errors import ConfigError
from ella.train.config import TrainConfig, help_texts


@reports_errors
def cmd_train(args: argparse.Namespace) -> int:
    """Train a mixer, learning its per-layer, per-path priors (or MAP only)."""
    from ella.train import Trainer

    world = distributed.start()  # several processes under torchrun, else this one
    if getattr(args, "select_paths", False) and world.distributed:
        raise ConfigError("--select-paths runs in one process: run it without torchrun")
    with run_claimed(args, TrainConfig, "run", world, Trainer) as (out, config, results):
        if not world.is_main:
            return 0
        if not config.select_paths:
            print_answer(out, results)  # the headline; with --select-paths, the last lines
        print(results["table"])
        figures = [f.name for f in sorted(out.glob("*.png"))]
        print(f"run directory: {out} ({', '.join(['results.json', 'metrics.jsonl', *figures])})")
        if config.select_paths:
            print()
            from ella.cli.select import print_selection

            print_selection(out, config.select_epochs, None, config.data_dir, config.progress)
            print()
            print_answer(out, results, blank_after=False)
    return 0


def print_answer(run_dir: Path, results: dict, blank_after: bool = True) -> None:
    """Print :func:`ella.selection.format_answer`, where the run has one."""
    from ella.selection import format_answer

    answer = format_answer(run_dir, results)
    if answer:
        print(answer + ("\n" if blank_after else ""))


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella train`` (options generated from :class:`~ella.train.config.TrainConfig`)."""
    add_run_command(
        sub,
        "train",
        TrainConfig,
        help_texts(),
        cmd_train,
        "run",
        help="train with learned layer-wise priors (the main job)",
        description="Train a relaxed-equivariant mixer, alternating MAP steps on the weights "
        "with marginal-likelihood steps on one prior precision per layer and path, and "
        "report the effective parameters per layer and path.",
    )
