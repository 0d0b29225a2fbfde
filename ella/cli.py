"""Command line: ``ella train``, ``ella ensemble``, ``ella report RUN_DIR [--symmetry GROUP]``,
``ella select RUN_DIR [--drop-only]``, ``ella export RUN_DIR`` and ``ella demo``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ella import distributed
from ella.choices import LayerGroup
from ella.commandline import (
    THREADS_NOTE,
    DefaultsHelpFormatter,
    add_config_options,
    add_run_options,
    reports_errors,
    run_claimed,
)
from ella.ensembles.cli import add_ensemble_parser
from ella.errors import CheckpointError, ConfigError, RunDirectoryError
from ella.groups import get_group
from ella.models import mixer
from ella.rundir import (
    EXPORT_THRESHOLD,
    EXPORTED,
    PATH_DROPS,
    PATH_OUTPUTS,
    PATH_SELECTION,
    PATH_SELECTION_STATE,
    RESULTS,
    SELECT_EPOCHS,
    read_json,
)
from ella.system import configure_threads
from ella.train.config import HELP, TrainConfig

if TYPE_CHECKING:  # the loop and laplace-torch load only when a run is measured
    from ella.train.runs import TrainedRun

PATH_SETS: dict[str, tuple[str, ...]] = {
    "FC": ("fc",),
    "CONV": ("conv",),
    "GCONV": ("gconv",),
    "FC+CONV+GCONV": ("fc", "conv", "gconv"),
}


def time_forward_backward(model: torch.nn.Module, x: torch.Tensor, repeats: int = 3) -> float:
    """Median seconds of one forward + backward pass of ``model`` on ``x`` (after a warm-up)."""
    times = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        model(x).logsumexp(dim=1).sum().backward()
        if i:
            times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return sorted(times)[len(times) // 2]


def cmd_demo(args: argparse.Namespace) -> int:
    """Build FC, CONV, GCONV and mixed networks and show size, speed and invariance."""
    torch.manual_seed(args.seed)
    x = torch.randn(args.batch_size, args.channels, args.image_size, args.image_size)
    print(
        f"ella mixer on {args.channels}x{args.image_size}x{args.image_size} inputs, "
        f"group {args.group}, width {args.width}, batch {args.batch_size}, "
        f"{torch.get_num_threads()} CPU threads"
    )
    header = f"{'paths':<15}{'parameters':>12}{'fwd+bwd [ms]':>14}{'max |f(gx)-f(x)|':>19}"
    print(header)
    print("-" * len(header))
    for label, paths in PATH_SETS.items():
        model = mixer(
            args.channels, 10, args.image_size, group=args.group, paths=paths, width=args.width
        )
        n = sum(p.numel() for p in model.parameters())
        seconds = time_forward_backward(model, x)
        err = model.invariance_error(x[:8])
        print(f"{label:<15}{n:>12,}{seconds * 1e3:>14.1f}{err:>19.2e}")
    print("GCONV-only networks are exactly invariant; FC and CONV paths break the symmetry.")
    return 0


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
    run_dir: Path, epochs: int, drop_only: bool, data_dir, progress: bool = True
) -> None:
    """Select a learned run's paths (:func:`ella.selection.select`), print them and the
    files written."""
    from ella.selection import format_path_drops, format_path_selection, select

    record = select(
        run_dir, epochs=epochs, drop_only=drop_only, data_dir=data_dir, progress=progress
    )
    if drop_only:
        print(format_path_drops(record))
        print(f"written: {run_dir / PATH_DROPS}")
    else:
        print(format_path_selection(record))
        print(f"written: {run_dir / PATH_SELECTION}, {run_dir / PATH_SELECTION_STATE}")


@reports_errors
def cmd_select(args: argparse.Namespace) -> int:
    """Choose the paths of a finished learned run by the Laplace evidence."""
    if distributed.launched():
        raise ConfigError("ella select runs in one process: run it without torchrun")
    print_selection(Path(args.run_dir), args.epochs, args.drop_only, args.data_dir, args.progress)
    return 0


@reports_errors
def cmd_export(args: argparse.Namespace) -> int:
    """Export a learned run's network without the paths its priors switched off."""
    from ella.export import export_run, save_export

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / EXPORTED
    if out.exists():  # checked before the run is loaded and measured
        raise RunDirectoryError(f"{out} exists; choose another --out (nothing was written)")
    export = export_run(run_dir, args.threshold, args.data_dir)
    print(export.format())
    print(f"written: {save_export(export, out)}")
    return 0


@reports_errors
def cmd_report(args: argparse.Namespace) -> int:
    """Reprint the table and redraw the figure of a finished run."""
    from ella.ensembles.cli import format_results
    from ella.report import format_table, save_eta_figure, save_figure

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
    if args.path_outputs and not results["effective_parameters"]:
        raise ConfigError(
            f"--path-outputs measures relaxed layers (FC/CONV/GCONV paths), and this run's "
            f"model ({results.get('config', {}).get('model', '?')}) has none"
        )
    print_answer(run_dir, results)
    try:
        print(format_table(results))
        if results.get("effective_parameters"):
            print(f"figure: {save_figure(results, run_dir / 'effective_parameters.png')}")
        if results.get("eta_history"):
            print(f"figure: {save_eta_figure(results, run_dir / 'eta.png')}")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise CheckpointError(
            f"{path} is incomplete, changed or from another version ({type(err).__name__}: "
            f"{err}); move it away and run ella train --out RUN --resume to write it again"
        ) from None
    if args.path_outputs or args.symmetry is not None:
        from ella.train.runs import load_run

        run = load_run(args.run_dir, args.data_dir)  # once for both measurements
        x = run.data.test.tensors[0][: args.symmetry_images]
        if args.path_outputs:
            report_path_outputs(args, run, x)
        if args.symmetry is not None:
            report_symmetry(args, run, x)
    if (run_dir / PATH_SELECTION).is_file():  # the last ella select, shown again
        from ella.selection import format_path_selection

        record = read_json(run_dir / PATH_SELECTION, "path selection")
        if record.get("finished"):
            print(f"\n{format_path_selection(record)}")
    return 0


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


@reports_errors
def cmd_download(args: argparse.Namespace) -> int:
    """Fetch original data files from their usual public sources (needs a network)."""
    from ella.data.files import SOURCES, DataFileError, data_root, download

    prefixes = {"mnist": "MNIST/", "fashion_mnist": "FashionMNIST/", "cifar10": "cifar-10"}
    root = data_root(args.data_dir)
    for name in args.names:
        if name not in prefixes:
            choices = ", ".join(sorted(prefixes))
            print(f"error: cannot download {name!r}; choose from {choices}", file=sys.stderr)
            return 2
        for relative in (r for r in SOURCES if r.startswith(prefixes[name])):
            try:
                print(f"{download(relative, root)} verified")
            except DataFileError as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
    return 0


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
        parser.error(
            f"{option_string} moved to its own command: ella report only reports, and "
            f"selecting paths by the evidence trains candidate networks; use `{self.moved}`"
        )


def add_select_parser(sub: argparse._SubParsersAction) -> None:
    """``ella select RUN_DIR [--drop-only] [--epochs N] [--data-dir DIR] [--no-progress]``."""
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
        "--epochs goes on where the first stopped. ella report RUN shows the selection again.",
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
        "--epochs",
        type=int,
        default=SELECT_EPOCHS,
        help=f"epochs of training on per candidate network (default {SELECT_EPOCHS})",
    )
    select.add_argument("--data-dir", default=None, help="data files, if moved since the run")
    select.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a progress bar per candidate (default: on)",
    )
    select.set_defaults(func=cmd_select)


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    """``ella export RUN_DIR [--threshold T] [--out FILE] [--data-dir DIR]``."""
    export = sub.add_parser(
        "export",
        help="a learned run's network without the paths its priors switched off",
        description="Drop from every relaxed layer of a finished learned run the paths whose "
        "prior variance is below --threshold times the largest of the layer's paths (with "
        "--paths gconv residual: a layer whose residual is off is exactly equivariant), and "
        "compare the exported network with the run's: test accuracy, NLL, parameters, "
        f"forward time. Writes the weights and the dropped paths to RUN/{EXPORTED} (or "
        "--out); ella.export.load_exported reads them back.",
    )
    export.add_argument(
        "run_dir", help="a finished run directory of ella train with learned priors"
    )
    export.add_argument(
        "--threshold",
        type=float,
        default=EXPORT_THRESHOLD,
        help=f"fraction of a layer's largest prior variance below which a path is off "
        f"(default {EXPORT_THRESHOLD})",
    )
    export.add_argument("--out", default=None, help=f"the file to write (default RUN/{EXPORTED})")
    export.add_argument("--data-dir", default=None, help="data files, if moved since the run")
    export.set_defaults(func=cmd_export)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ella",
        description="Learn layer-wise symmetry with relaxed-equivariant layers.",
        epilog=THREADS_NOTE,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="train with learned layer-wise priors (the main job)",
        description="Train a relaxed-equivariant mixer, alternating MAP steps on the weights "
        "with marginal-likelihood steps on one prior precision per layer and path, and "
        "report the effective parameters per layer and path.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_run_options(train, "run")
    add_config_options(train, TrainConfig, HELP)
    train.set_defaults(func=cmd_train)
    add_ensemble_parser(sub)
    dl = sub.add_parser(
        "download", help="download mnist, fashion_mnist or cifar10 (original files, verified)"
    )
    dl.add_argument("names", nargs="+", help="mnist, fashion_mnist and/or cifar10")
    dl.add_argument("--data-dir", default=None, help="target; unset: $ELLA_DATA or ~/.cache/ella")
    dl.set_defaults(func=cmd_download)
    report = sub.add_parser("report", help="reprint the table and redraw the figure of a run")
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
    add_select_parser(sub)
    add_export_parser(sub)
    demo = sub.add_parser("demo", help="tour of the relaxed-equivariant layers")
    demo.add_argument("--image-size", type=int, default=32, help="image side (default 32)")
    demo.add_argument("--channels", type=int, default=1, help="image channels (default 1)")
    demo.add_argument(
        "--group",
        default="C4",
        choices=LayerGroup.values(),
        help="group of the layers (default C4)",
    )
    demo.add_argument("--width", type=int, default=2, help="channel multiplier (default 2)")
    demo.add_argument("--batch-size", type=int, default=128, help="batch size (default 128)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_threads()
    return distributed.end_process(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
