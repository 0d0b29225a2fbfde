"""One owner per run directory: an exclusive ``flock`` on its lock file, released by the
kernel when the process ends."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ella.errors import RunDirectoryError
from ella.rundir.files import LOCK
from ella.rundir.refusals import refusal, refuse_a_file, unwritable

if TYPE_CHECKING:
    pass


#: run directories this process holds the lock of: resolved path -> [descriptor, depth]
_HELD: dict[str, list[int]] = {}


def _lock_holder(path: Path) -> str:
    """The pid written into a lock file by its holder, as text ("unknown" if unreadable)."""
    try:
        pid = path.read_text().strip()
    except OSError:
        return "unknown"
    return pid if pid.isdigit() else "unknown"


def lock_holder(out: Path) -> str | None:
    """The pid (as text, "unknown" where unreadable) of the process that holds the lock of
    the run directory ``out`` (:func:`run_lock`) now, or None where none does (this
    process's own lock counts as none). Takes no lock and creates nothing."""
    path = Path(out) / LOCK
    if str(Path(out).resolve()) in _HELD:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _lock_holder(path)
    finally:
        os.close(fd)  # closing releases a lock taken here
    return None


def _acquire(out: Path) -> int:
    """Open ``out/.ella.lock`` and take its exclusive lock without waiting; write our pid.

    Raises:
        RunDirectoryError: another process holds it (named by its pid).
    """
    path = out / LOCK
    for _ in range(100):  # the holder may remove the file between our open and our lock
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise unwritable(out, err) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise refusal(
                RunDirectoryError,
                "{out} is in use by another ella process (pid {pid}, which holds {path}); wait "
                "for it to end, or choose {another}",
                out=out, pid=_lock_holder(path), path=path,
            ) from None  # fmt: skip
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)  # we locked a file its holder had just removed: take the new one
    raise RunDirectoryError(f"could not take the lock {path}; try again")


def _release(out: Path, fd: int) -> None:
    """Remove the lock file, then release the lock (closing its descriptor)."""
    with contextlib.suppress(OSError):
        (out / LOCK).unlink()
    os.close(fd)


@contextlib.contextmanager
def run_lock(out: Path | None, *, take: bool = True) -> Iterator[None]:
    """Hold the lock of the run directory ``out`` for the block.

    The lock is an exclusive ``flock`` on ``out/.ella.lock`` (created with ``out``):
    the kernel releases it when the process ends, however it ends, so a killed run
    never leaves a stale lock. A process that holds it already may take it again
    (the blocks nest). Nothing happens for ``out=None`` or ``take=False`` (the other
    processes of a data-parallel job, whose process 0 holds it).

    Raises:
        RunDirectoryError: another process holds the lock (the message names its pid),
            or ``out`` cannot be created.
    """
    if out is None or not take:
        yield
        return
    out = Path(out)
    refuse_a_file(out)
    key = str(out.resolve())
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise unwritable(out, err) from err
    fd = _acquire(out)
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        _release(out, fd)


def remove_if_unused(out: Path) -> bool:
    """Remove the directory ``out`` if it holds nothing (a default run directory of a run
    refused before it wrote anything); return whether it was removed."""
    try:
        out.rmdir()  # only succeeds for an empty directory
    except OSError:
        return False
    return True
