"""``ella download NAME ...``: original data files from their public sources, verified."""

from __future__ import annotations

import argparse
import sys

from ella.cli.common import reports_errors
from ella.data.files import DataFileError, data_root, download
from ella.data.registry import DATASETS, downloadable, listed


@reports_errors
def cmd_download(args: argparse.Namespace) -> int:
    """Fetch original data files from their usual public sources (needs a network)."""
    root = data_root(args.data_dir)
    for name in args.names:
        if name not in downloadable():
            choices = ", ".join(sorted(downloadable()))
            print(f"error: cannot download {name!r}; choose from {choices}", file=sys.stderr)
            return 2
        for relative in (f.path for f in DATASETS[name].files if f.url):
            try:
                print(f"{download(relative, root)} verified")
            except DataFileError as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella download NAME ... [--data-dir DIR]`` (the names: the registry's downloadable
    data sets)."""
    names = downloadable()
    dl = sub.add_parser("download", help=f"download {listed(names)} (original files, verified)")
    dl.add_argument("names", nargs="+", help=listed(names, "and/or"))
    dl.add_argument("--data-dir", default=None, help="target; unset: $ELLA_DATA or ~/.cache/ella")
    dl.set_defaults(func=cmd_download)
