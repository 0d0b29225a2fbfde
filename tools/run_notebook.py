"""Execute a notebook top to bottom into a copy, never over the committed one unasked.

    python tools/run_notebook.py notebooks/learned_symmetry.ipynb
    python tools/run_notebook.py NOTEBOOK --out NOTEBOOK --overwrite

The first writes ``runs/notebooks/learned_symmetry.ipynb``; the second, with the same
path twice, re-renders the committed notebook in place (what a change to the notebook
commits). The notebook runs with its outputs cleared, from its own folder, with no
wall-clock limit per cell; an existing file at ``--out`` is refused unless
``--overwrite``, and the file is written atomically once every cell has run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: where a notebook's executed copy goes by default
DEFAULT_DIR = Path("runs/notebooks")


def execute(notebook: Path, out: Path, overwrite: bool = False) -> Path:
    """Run ``notebook`` with cleared outputs and write the executed copy to ``out``.

    Raises:
        FileExistsError: ``out`` exists and not ``overwrite`` (nothing was run).
        nbclient.exceptions.CellExecutionError: a cell failed (nothing was written).
    """
    import nbformat
    from nbclient import NotebookClient

    from ella.io import save_text

    if out.exists() and not overwrite:
        raise FileExistsError(
            f"{out} exists; add --overwrite to replace it, or choose another --out"
        )
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        nb, timeout=None, kernel_name="python3",
        resources={"metadata": {"path": str(notebook.resolve().parent)}},
    )  # fmt: skip
    client.execute()
    save_text(nbformat.writes(nb), out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the executed copy (default: {DEFAULT_DIR}/NAME)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        parser.error(f"{args.notebook}: no such notebook")
    out = args.out if args.out is not None else DEFAULT_DIR / args.notebook.name
    from nbclient.exceptions import CellExecutionError

    try:
        written = execute(args.notebook, out, args.overwrite)
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except CellExecutionError as err:  # the cell's own traceback, then one line
        print(err, file=sys.stderr)
        failed = f"error: a cell of {args.notebook} failed (above); nothing was written"
        print(failed, file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
