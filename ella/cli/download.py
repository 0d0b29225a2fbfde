"""``ella download NAME ...``: original data files from their public sources, verified."""

from __future__ import annotations

import argparse
import sys

from ella.cli.common import reports_errors


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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``ella download NAME ... [--data-dir DIR]``."""
    dl = sub.add_parser(
        "download", help="download mnist, fashion_mnist or cifar10 (original files, verified)"
    )
    dl.add_argument("names", nargs="+", help="mnist, fashion_mnist and/or cifar10")
    dl.add_argument("--data-dir", default=None, help="target; unset: $ELLA_DATA or ~/.cache/ella")
    dl.set_defaults(func=cmd_download)
