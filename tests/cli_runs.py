"""What the command-line tests share: tiny runs' options, running ``ella`` in-process
and expecting a refusal, and a snapshot of a directory to show nothing changed."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ella.cli import main

TINY = [
    "--model", "mlp", "--train-size", "64", "--test-size", "32", "--width", "1",
    "--epochs", "1", "--n-epochs-burnin", "1", "--marglik-frequency", "1",
    "--n-hypersteps", "2", "--batch-size", "32", "--no-progress",
]  # fmt: skip
#: a tiny learned mixer of the default paths
TINY_LEARNED = [
    "--train-size", "48", "--test-size", "32", "--width", "1", "--epochs", "2",
    "--batch-size", "16", "--n-epochs-burnin", "1", "--marglik-frequency", "1",
    "--n-hypersteps", "2", "--no-progress",
]  # fmt: skip
#: a tiny learned CONV+GCONV mixer
TINY_MIXER = [*TINY_LEARNED, "--paths", "conv", "gconv"]


def snapshot(directory: Path) -> dict[str, str]:
    """md5 of every file under ``directory`` (to check that nothing changed)."""
    return {
        str(p.relative_to(directory)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def refused(capsys, argv: list[str], status: int, *needles: str) -> str:
    """Run ``ella argv``; assert the exit status, that stderr names every needle, and that
    no traceback was printed; return stderr."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == status, err
    for needle in needles:
        assert needle in err, err
    assert "Traceback" not in err
    return err
