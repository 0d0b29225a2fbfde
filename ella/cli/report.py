"""``ella report RUN``: reprint a finished run's answer, table and figure, and measure it."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ella.cli.common import reports_errors
from ella.cli.train import print_answer
from ella.errors import CheckpointError, ConfigError, RunDirectoryError
from ella.groups import get_group
from ella.rundir import (
    PATH_OUTPUTS,
    RESULTS,
    RESULTS_FIX,
    lock_holder,
    read_json,
    run_lock,
)
from ella.schemas import check, results_schema

if TYPE_CHECKING:  # the loop and laplace-torch load only when a run is measured
    from ella.train.runs import TrainedRun


@reports_errors
def cmd_report(args: argparse.Namespace) -> int:
    """Reprint the table and redraw the figure of a finished run."""
    from ella.ensembles import format_results

    if args.symmetry_images < 1:
        raise ConfigError(f"--symmetry-images must be at least 1, got {args.symmetry_images}")
    if args.symmetry is not None:
        try:
            get_group(args.symmetry)  # refused before any work
        except ValueError as err:
            raise ConfigError(f"--symmetry {args.symmetry}: {err}") from None
    run_dir = Path(args.run_dir)
    path = run_dir / RESULTS
    if not path.is_file():
        raise RunDirectoryError(f"no results.json in {run_dir}; is the run finished?")
    results = read_json(path, "run's results")
    if "members" in results and "method" in results:  # an ella ensemble run
        for option, asked in (
            ("--symmetry", args.symmetry is not None),
            ("--path-outputs", args.path_outputs),
        ):
            if asked:
                raise ConfigError(f"{option} measures runs of ella train, not ensembles")
        print(format_results(results))
        return 0
    if "effective_parameters" not in results:
        raise CheckpointError(f"{path} is not the results file of an ella run")
    check(results, results_schema(results), path, RESULTS_FIX)
    if args.path_outputs and not results["effective_parameters"]:
        raise ConfigError(
            f"--path-outputs measures relaxed layers (FC/CONV/GCONV paths), and this run's "
            f"model ({results.get('config', {}).get('model', '?')}) has none"
        )
    # another process's run directory (a running ella select) or one this user cannot
    # write into (someone else's run): read and print, but write nothing there
    holder = lock_holder(run_dir)
    why = refusal = None
    if holder is not None:
        why = f"pid {holder} holds {run_dir}"
        refusal = f"in use by another ella process (pid {holder})", "that process has ended"
    elif not os.access(run_dir, os.W_OK):
        why = f"{run_dir} is not writable"
        refusal = "not writable", "you can write there"
    if refusal is not None and (args.path_outputs or args.symmetry is not None):
        raise RunDirectoryError(
            f"{run_dir} is {refusal[0]}, and --path-outputs and --symmetry write into it: ask "
            f"again when {refusal[1]}"
        )
    with contextlib.ExitStack() as held:
        if why is None:
            held.enter_context(run_lock(run_dir))
        _report_run(args, run_dir, results, path, draw=why is None)
        if why is not None:
            print(f"(figures not redrawn: {why})")
    return 0


def _report_run(
    args: argparse.Namespace, run_dir: Path, results: dict, path: Path, draw: bool
) -> None:
    """The report of a train run (its ``results.json`` at ``path``): the answer, the table,
    the figures (where ``draw``), the asked measurements and the last selections."""
    from ella.learner.report import format_table, save_eta_figure, save_figure

    print_answer(run_dir, results)
    try:
        print(format_table(results))
        if draw and results.get("effective_parameters"):
            print(f"figure: {save_figure(results, run_dir / 'effective_parameters.png')}")
        if draw and results.get("eta_history"):
            print(f"figure: {save_eta_figure(results, run_dir / 'eta.png')}")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise CheckpointError(
            f"{path} is incomplete, changed or from another version ({type(err).__name__}: "
            f"{err}); {RESULTS_FIX}"
        ) from None
    if args.path_outputs or args.symmetry is not None:
        from ella.train.runs import load_run

        run = load_run(args.run_dir, args.data_dir)  # once for both measurements
        x = run.data.test.tensors[0][: args.symmetry_images]
        if args.path_outputs:
            report_path_outputs(args, run, x)
        if args.symmetry is not None:
            report_symmetry(args, run, x)
    from ella.selection import SEARCHES, save_per_layer_figure

    for search in SEARCHES.values():  # the last ella select of each search, again
        path = run_dir / search.files.record
        if search.reported and path.is_file():
            record = search.read(path)
            if search.finished(record):
                print(f"\n{search.format(record)}")
                if draw and search.files.figure and record.get("per_layer"):
                    figure = run_dir / search.files.figure
                    print(f"figure: {save_per_layer_figure(record, figure)}")


def report_path_outputs(args: argparse.Namespace, run: TrainedRun, x: torch.Tensor) -> None:
    """Each relaxed layer's share of output power per path, on a run's test images ``x``."""
    from ella.io import save_json
    from ella.metrics import format_path_outputs, path_output_shares

    rows = path_output_shares(run.net, x)
    print(
        f"\npath outputs: each path's share of its layer's output power, on {len(x)} "
        f"{run.config.dataset} test images, {run.state} weights"
    )
    print(format_path_outputs(rows))
    path = Path(args.run_dir) / PATH_OUTPUTS
    save_json({"images": len(x), "state": run.state, "layers": rows}, path)
    print(f"written: {path}")


def report_symmetry(args: argparse.Namespace, run: TrainedRun, x: torch.Tensor) -> None:
    """Measure the G-EED per layer of a run's reported model on its test images ``x``."""
    import matplotlib

    matplotlib.use("Agg")
    from ella.io import save_json
    from ella.metrics import measure_symmetry, plot_symmetry

    report = measure_symmetry(run.net, x, args.symmetry)
    wrapped = None
    if run.model is not run.net:  # outputs of the invariance-averaged classifier
        wrapped = measure_symmetry(run.model, x, args.symmetry, layers={})
    print(f"\n{run.config.dataset} test images, {run.state} weights")
    print(report.format_table())
    if wrapped is not None:
        print(f"\nthe classifier with --invariance {run.config.invariance} around this network:")
        print(wrapped.format_table())
    stem = Path(args.run_dir) / f"symmetry_{report.group}"
    save_json(report.as_dict(), stem.with_suffix(".json"))
    plot_symmetry(report, stem.with_suffix(".png"))
    print(f"written: {stem}.json, {stem}.png")


#: options ``ella report`` had before path selection became ``ella select``: each is refused
#: with the command that replaces it
MOVED_REPORT_OPTIONS: tuple[tuple[str, int | str, str], ...] = (
    ("--select-paths", 0, "ella select RUN"),
    ("--drop-paths", 0, "ella select RUN --drop-only"),
    ("--drop-epochs", "?", "ella select RUN --epochs N"),
)


class MovedOption(argparse.Action):
    """A hidden option that only says which command replaced it (argparse's usage error)."""

    def __init__(self, option_strings: list[str], dest: str, moved: str, **kwargs) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, **kwargs)
        self.help = argparse.SUPPRESS
        self.moved = moved

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        """Refuse the moved option, naming the command that replaces it (exit status 2)."""
        parser.error(
            f"{option_string} moved to its own command: ella report only reports, and "
            f"selecting paths by the evidence trains candidate networks; use `{self.moved}`"
        )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella report RUN_DIR [--symmetry GROUP] [--path-outputs] ...``."""
    report = sub.add_parser(
        "report", help="reprint a run's answer, table and figure, and measure it"
    )
    report.add_argument("run_dir", help="a run directory written by ella train")
    report.add_argument(
        "--symmetry",
        metavar="GROUP",
        default=None,
        help="also measure the symmetry per layer (G-EED, Kvinge et al. 2022) under GROUP "
        "(C4, D4, C8, ...) on the run's test images",
    )
    report.add_argument(
        "--path-outputs",
        action="store_true",
        help="also measure each relaxed layer's share of output power per path (FC, CONV, "
        "GCONV) on the run's test images; writes path_outputs.json",
    )
    for option, nargs, moved in MOVED_REPORT_OPTIONS:
        report.add_argument(option, nargs=nargs, action=MovedOption, moved=moved)
    report.add_argument(
        "--symmetry-images",
        type=int,
        default=500,
        help="test images for --symmetry and --path-outputs (default 500)",
    )
    report.add_argument("--data-dir", default=None, help="data files, if moved since the run")
    report.set_defaults(func=cmd_report)
