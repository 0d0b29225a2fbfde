"""``ella export RUN``: a learned run's network without the paths its priors switched off."""

from __future__ import annotations

import argparse
from pathlib import Path

from ella.cli.common import reports_errors
from ella.errors import RunDirectoryError
from ella.rundir import EXPORT_THRESHOLD, EXPORTED, refuse_unusable_name, run_lock


@reports_errors
def cmd_export(args: argparse.Namespace) -> int:
    """Export a learned run's network without the paths its priors switched off."""
    from ella.export import export_run, save_export

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / EXPORTED
    refuse_unusable_name(out)
    if out.exists():  # checked before the run is loaded and measured
        raise RunDirectoryError(f"{out} exists; choose another --out (nothing was written)")
    into_run = out.absolute().parent.resolve() == run_dir.resolve()
    with run_lock(run_dir, take=into_run):  # refused while another process writes there
        export = export_run(run_dir, args.threshold, args.data_dir)
        print(export.format())
        print(f"written: {save_export(export, out)}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
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
