"""``ella select RUN``: choose a finished learned run's paths by the Laplace evidence."""

from __future__ import annotations

import argparse
from pathlib import Path

from ella import distributed
from ella.cli.common import reports_errors
from ella.errors import ConfigError
from ella.rundir import SELECT_EPOCHS


@reports_errors
def cmd_select(args: argparse.Namespace) -> int:
    """Choose the paths of a finished learned run by the Laplace evidence."""
    if distributed.launched():
        raise ConfigError("ella select runs in one process: run it without torchrun")
    from ella.selection import search_of

    search = search_of(
        args.search, drop_only=args.drop_only, per_layer=args.per_layer, option="--search"
    )
    print_selection(
        Path(args.run_dir), args.epochs, search.name, args.data_dir, args.progress,
        overwrite=args.overwrite, criterion=args.criterion, seeds=args.seeds,
        dry_run=args.dry_run, executor=args.executor, workers=args.workers,
        address=args.address,
    )  # fmt: skip
    return 0


def print_selection(
    run_dir: Path,
    epochs: int,
    search: str | None,
    data_dir,
    progress: bool = True,
    overwrite: bool = False,
    criterion: str | None = None,
    seeds: int = 1,
    dry_run: bool = False,
    executor: str | None = None,
    workers: int | None = None,
    address: str | None = None,
) -> None:
    """Say what a registered search will train (:func:`ella.selection.format_plan`), then,
    unless ``dry_run``, run it on a learned run (:func:`ella.selection.run_search`), print
    its record (:meth:`~ella.selection.Search.format`) and the files written; the
    candidates train where ``executor`` puts them (:mod:`ella.selection.executors`)."""
    from ella.selection import (
        check_seeds,
        criterion_of,
        executor_of,
        format_plan,
        run_search,
        save_per_layer_figure,
        search_of,
    )

    chosen = search_of(search, option="--search")
    criterion_of(criterion, "--criterion")
    check_seeds(seeds, "--seeds")
    runner = executor_of(executor, workers=workers, address=address, option="--executor")
    print(format_plan(run_dir, chosen.name, chosen.flag, epochs, seeds, criterion), flush=True)
    if dry_run:
        return
    record = run_search(
        run_dir, chosen.name, epochs, data_dir, progress, overwrite, criterion, seeds, runner
    )
    print(chosen.format(record))
    names = [chosen.files.record, *([chosen.files.winner] if chosen.files.winner else [])]
    if chosen.files.figure and record.get("per_layer"):
        save_per_layer_figure(record, run_dir / chosen.files.figure)
        names.append(chosen.files.figure)
    print(f"written: {', '.join(str(run_dir / f) for f in names)}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella select RUN_DIR [--drop-only | --per-layer | --search NAME] [--criterion NAME]
    [--epochs N] [--data-dir DIR] [--no-progress]``."""
    select = sub.add_parser(
        "select",
        help="choose the paths a learned run's network needs by the evidence (trains candidates)",
        description="Choose the paths (FC, CONV, GCONV) a finished learned mixer needs by the "
        "Laplace evidence: train on the network and, for each path, the network without it "
        "(held at zero in every relaxed layer) for --epochs, each with the run's recipe, "
        "and compare their evidence (exact GGN on all training images). By default greedily: "
        "drop the path whose removal raises the evidence most, then again from that network, "
        "until none does or one path is left; writes path_selection.json and the selected "
        "network's weights, path_selection.pt. Resumable: a second call with the same "
        "--epochs goes on where the first stopped. ella report RUN shows the selection again. "
        "Cost: one training of --epochs per candidate, times --seeds; a three-path mixer's "
        "first round trains 4 networks (7 in all if a path is dropped each round), "
        "--per-layer 1 + 3 per layer in its first round; --dry-run prints the count and the "
        "time at the run's pace.",
    )
    select.add_argument(
        "run_dir", help="a finished run directory of ella train with learned priors"
    )
    select.add_argument(
        "--drop-only",
        action="store_true",
        help="one round only: the whole network and the network without each path, trained "
        "on alike, and which paths the evidence would drop; writes path_drops.json",
    )
    select.add_argument(
        "--per-layer",
        action="store_true",
        help="drop one path of one layer at a time (every layer keeps one path at least), "
        "greedily as by default: each round trains one network per path of every layer "
        "that still has two or more; writes path_selection_per_layer.json and .pt",
    )
    select.add_argument(
        "--search",
        default=None,
        metavar="NAME",
        help="a registered search by name (ella.selection.SEARCHES; --drop-only is drop, "
        "--per-layer is per_layer); default: greedy",
    )
    select.add_argument(
        "--criterion",
        default=None,
        metavar="NAME",
        help="what scores a candidate, a registered criterion by name "
        "(ella.selection.CRITERIA); default: validation, the held-out likelihood, where "
        "the run holds images out (ella train --validation-size V), else evidence",
    )
    select.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="train every candidate at this many seeds (the run's own first) and drop a "
        "path only where its gain over the control has one sign at every seed and exceeds "
        "two standard errors; costs this many times the networks (default 1)",
    )
    select.add_argument(
        "--executor",
        default=None,
        metavar="NAME",
        help="where a round's candidates train: local, one after another in this process "
        "(default); processes, in --workers processes on this machine; ray, as tasks on "
        "the Ray cluster at --address or on a local Ray instance (the extra "
        "ella-torch[ray]); at equal threads per candidate the record is the same under each",
    )
    select.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="candidates trained at once by --executor processes (default: one per CPU, "
        "the machine's cores shared among them) or ray",
    )
    select.add_argument(
        "--address",
        default=None,
        metavar="HOST:PORT",
        help="the Ray cluster of --executor ray (default: the one RAY_ADDRESS names, or a "
        "local instance)",
    )
    select.add_argument(
        "--epochs",
        type=int,
        default=SELECT_EPOCHS,
        help=f"epochs of training on per candidate network (default {SELECT_EPOCHS})",
    )
    select.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a selection (or drops) of other --epochs in the run directory, which "
        "is refused otherwise",
    )
    select.add_argument(
        "--dry-run",
        action="store_true",
        help="print the networks the selection would train and the time at the run's pace "
        "(printed before any selection too), and train nothing",
    )
    select.add_argument("--data-dir", default=None, help="data files, if moved since the run")
    select.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a progress bar per candidate (default: on)",
    )
    select.set_defaults(func=cmd_select)
