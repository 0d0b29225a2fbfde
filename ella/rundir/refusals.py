"""How a run directory's refusals are worded: once, for Python's keywords and for the
command line's flags (:meth:`ella.errors.EllaError.on_command_line`)."""

from __future__ import annotations

import os
from pathlib import Path

from ella.errors import EllaError, RunDirectoryError
from ella.rundir.files import RESULTS

#: how a refusal names the run directory's options: Python's keywords (``ella.fit``'s, and
#: ``train``'s), and the command line's flags (:meth:`ella.errors.EllaError.on_command_line`)
WORDS = {
    "python": {"resume": "resume=True", "overwrite": "overwrite=True",
               "where": "the run directory", "another": "another run directory (out)",
               "pass_out": "pass a run directory (out)"},
    "command_line": {"resume": "--resume", "overwrite": "--overwrite", "where": "--out",
                     "another": "another --out", "pass_out": "pass --out"},
}  # fmt: skip


def refusal(cls: type[EllaError], template: str, **values: object) -> EllaError:
    """``cls`` with ``template`` worded for Python (its message) and for the command line
    (:meth:`~ella.errors.EllaError.on_command_line`): ``{resume}``, ``{overwrite}``,
    ``{where}``, ``{another}`` and ``{pass_out}`` name the options in each."""
    python = template.format(**WORDS["python"], **values)
    return cls(python, command_line=template.format(**WORDS["command_line"], **values))


def refuse_a_file(out: Path) -> None:
    """Refuse an ``--out`` that names a file, or a symbolic link to nothing."""
    if out.is_symlink() and not out.exists():
        raise refusal(
            RunDirectoryError,
            "{where} {out} is a symbolic link to {target}, which does not exist; create the "
            "directory it points to, or choose {another}",
            out=out, target=os.readlink(out),
        )  # fmt: skip
    if out.exists() and not out.is_dir():
        raise refusal(
            RunDirectoryError, "{where} {out} is a file, not a directory; choose {another}",
            out=out,
        )  # fmt: skip


def unwritable(out: Path, err: OSError) -> RunDirectoryError:
    """The refusal of a run directory this process cannot write into, with what still
    works: a finished run is read without writing (``ella report`` on the command line,
    ``load_run`` and its ``results.json`` in Python)."""
    refusal = (
        f"cannot write to the run directory {out}: {err.strerror or err}; fix its "
        "permissions, or run as its owner"
    )
    if not (Path(out) / RESULTS).is_file():
        return RunDirectoryError(refusal)
    return RunDirectoryError(
        f"{refusal}; ella.train.runs.load_run({str(out)!r}) and its {RESULTS} read the "
        "finished run without writing",
        command_line=(
            f"{refusal}; ella report {out} reads the finished run (and its selections) "
            "without writing"
        ),
    )
