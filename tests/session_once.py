"""What a test session computes once, whichever of its pytest-xdist workers asks first.

Each worker is a process of its own, so a module- or session-scoped fixture, or a cache in
a module, is computed again in every worker whose tests use it. :func:`computed_once`
stores the value in a folder the workers share (``tests/conftest.py``'s
``session_folder``): the first to ask computes it while the others wait on its lock, then
every one reads it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def computed_once(folder: Path, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` (a JSON value), computed by one process of the session and kept in
    ``folder`` as ``NAME.json``; any other process asking for ``name`` waits for it and
    reads it. A ``compute`` that raises leaves nothing, so the next to ask tries again."""
    path = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if path.is_file():
            return json.loads(path.read_text())
        value = compute()
        part = path.with_suffix(".part")
        part.write_text(json.dumps(value))
        os.replace(part, path)
        return value


def made_once(folder: Path, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``folder / name``, filled by ``make(it)`` in one process of the session
    (:func:`computed_once`); a folder left by a ``make`` that raised is removed before the
    next one tries again."""
    where = folder / name

    def fill() -> str:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        make(where)
        return str(where)

    return Path(computed_once(folder, name, fill))
