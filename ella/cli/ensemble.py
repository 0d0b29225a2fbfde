"""``ella ensemble``: train an ensemble (deep, repulsive or FoRDE) and evaluate it."""

from __future__ import annotations

import argparse

from ella import distributed
from ella.cli.common import (
    add_run_command,
    reports_errors,
    run_claimed,
)
from ella.ensembles.config import HELP, EnsembleConfig
from ella.ensembles.report import format_results

__all__ = ["add_parser", "cmd_ensemble"]


@reports_errors
def cmd_ensemble(args: argparse.Namespace) -> int:
    """Train and evaluate an ensemble as configured by the options."""
    from ella.ensembles.trainer import EnsembleTrainer

    world = distributed.start()  # several processes under torchrun, else this one
    claimed = run_claimed(args, EnsembleConfig, "ensemble", world, EnsembleTrainer)
    with claimed as (out, _, results):
        if not world.is_main:
            return 0
        print(format_results(results))
        print(f"run directory: {out} (results.json, metrics.jsonl, checkpoint.pt)")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``ella ensemble`` (options generated from :class:`EnsembleConfig`)."""
    return add_run_command(
        sub,
        "ensemble",
        EnsembleConfig,
        HELP,
        cmd_ensemble,
        "ensemble",
        help="train and evaluate a deep / repulsive / FoRDE ensemble",
        description="Train M members together (vectorised with torch.func), optionally with "
        "data augmentation by a group and a repulsion between members (weight-space, "
        "function-space or input-gradient RDE, as Wasserstein gradient descent), then report "
        "test accuracy, NLL and ECE, the same on corrupted test images, and (--osp-group) "
        "orbit-same-predictions.",
    )
