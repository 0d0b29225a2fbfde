"""The ``ella`` command line, one module per command.

``ella train`` (:mod:`ella.cli.train`), ``ella ensemble`` (:mod:`ella.cli.ensemble`),
``ella download`` (:mod:`ella.cli.download`), ``ella report`` (:mod:`ella.cli.report`),
``ella select`` (:mod:`ella.cli.select`), ``ella export`` (:mod:`ella.cli.export`) and
``ella demo`` (:mod:`ella.cli.demo`). Each module has an ``add_parser(sub)`` that
registers its command; what they share (options generated from a configuration,
claiming a run directory, one error line per failure) is :mod:`ella.cli.common`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ella import distributed
from ella.cli import demo, download, ensemble, export, report, select, train
from ella.cli.common import THREADS_NOTE
from ella.runtime.system import configure_threads

__all__ = ["COMMANDS", "build_parser", "main"]

#: the commands, in the order ``ella --help`` lists them
COMMANDS = (train, ensemble, download, report, select, export, demo)


def build_parser() -> argparse.ArgumentParser:
    """The ``ella`` parser with every command of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="ella",
        description="Learn layer-wise symmetry with relaxed-equivariant layers.",
        epilog=THREADS_NOTE,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ella`` command with ``argv`` (the process's arguments by default);
    returns the exit status."""
    args = build_parser().parse_args(argv)
    configure_threads()
    return distributed.end_process(args.func(args))
