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
from ella.rundir import (
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_FIGURE,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_STATE,
)
from ella.train.config import HELP, TrainConfig


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
            print_selection(out, config.select_epochs, False, config.data_dir, config.progress)
            print()
            print_answer(out, results, blank_after=False)
    return 0


def print_answer(run_dir: Path, results: dict, blank_after: bool = True) -> None:
    """Print :func:`ella.selection.format_answer`, where the run has one."""
    from ella.selection import format_answer

    answer = format_answer(run_dir, results)
    if answer:
        print(answer + ("\n" if blank_after else ""))


def print_selection(
    run_dir: Path,
    epochs: int,
    drop_only: bool,
    data_dir,
    progress: bool = True,
    per_layer: bool = False,
    overwrite: bool = False,
) -> None:
    """Select a learned run's paths (:func:`ella.selection.select`), print them and the
    files written."""
    from ella.selection import format_path_drops, format_path_selection, select

    record = select(
        run_dir, epochs=epochs, drop_only=drop_only, per_layer=per_layer, data_dir=data_dir,
        progress=progress, overwrite=overwrite,
    )  # fmt: skip
    if drop_only:
        print(format_path_drops(record))
        print(f"written: {run_dir / PATH_DROPS}")
        return
    print(format_path_selection(record))
    files = (PATH_SELECTION_PER_LAYER, PATH_SELECTION_PER_LAYER_STATE) if per_layer else (
        PATH_SELECTION, PATH_SELECTION_STATE
    )  # fmt: skip
    if per_layer:
        from ella.selection import save_per_layer_figure

        save_per_layer_figure(record, run_dir / PATH_SELECTION_PER_LAYER_FIGURE)
        files = (*files, PATH_SELECTION_PER_LAYER_FIGURE)
    print(f"written: {', '.join(str(run_dir / f) for f in files)}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella train`` (options generated from :class:`~ella.train.config.TrainConfig`)."""
    add_run_command(
        sub,
        "train",
        TrainConfig,
        HELP,
        cmd_train,
        "run",
        help="train with learned layer-wise priors (the main job)",
        description="Train a relaxed-equivariant mixer, alternating MAP steps on the weights "
        "with marginal-likelihood steps on one prior precision per layer and path, and "
        "report the effective parameters per layer and path.",
    )
