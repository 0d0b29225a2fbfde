"""Claiming a run directory: a new run, a resumed one or one started again, refused
before any work where it cannot be used as asked."""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from ella.errors import CheckpointError, RunDirectoryError
from ella.io import save_json
from ella.rundir.files import CHECKPOINT, CONFIG, LOCK, RUN_OUTPUTS
from ella.rundir.reading import config_differences, read_json
from ella.rundir.refusals import refusal, refuse_a_file, unwritable

if TYPE_CHECKING:
    pass


def begin_run(
    out: Path | None, config, *, resume: bool, overwrite: bool, load: Callable[[], None]
) -> None:
    """Claim a run directory as :func:`check_run_directory` allows, remove orphan
    temporaries, then ``load()`` the checkpoint when resuming, else clear an old run's
    outputs (``overwrite``) and write ``config.json``. Nothing happens for ``out=None``.

    Resuming a run that stopped before its first checkpoint
    (:func:`stopped_before_checkpoint`) starts it from the beginning, as the same command
    would have, after checking that ``config`` is the one its ``config.json`` holds.

    Raises:
        CheckpointError: resuming from nothing with another configuration than the saved
            one (naming the options).
    """
    if out is None:
        return
    out = Path(out)
    check_run_directory(out, resume=resume, overwrite=overwrite)
    remove_orphan_temporaries(out)
    if resume and not (out / CHECKPOINT).is_file():  # stopped before its first checkpoint
        changed = config_differences(read_json(out / CONFIG, "run's configuration"), config)
        if changed:
            raise refusal(
                CheckpointError,
                "{resume}: the configuration differs from {config} in {changed}, and there is "
                "no checkpoint yet; resume with the same options, or start again with "
                "{overwrite}",
                config=out / CONFIG, changed=changed,
            )  # fmt: skip
        print(
            f"--resume: {out} has no checkpoint yet (the run stopped before its first epoch "
            "ended); starting it from the beginning",
            file=sys.stderr,
        )
        resume = False
    if resume:
        load()
    else:
        clear_run_outputs(out)
        save_json(config.to_dict(), out / CONFIG)


def checkpoint_note(out: Path | None) -> str:
    """What a failed run leaves behind, for its error message."""
    if out is None:
        return "nothing was written (no run directory)"
    path = Path(out) / CHECKPOINT
    if path.is_file():
        return f"the last good checkpoint is kept at {path}"
    return f"there is no checkpoint yet in {out} (one is written after every epoch)"


def resume_note(out: Path | None) -> str:
    """What a stopped run leaves to resume from, and how to go on, for its message."""
    note = checkpoint_note(out)
    if out is not None and (Path(out) / CHECKPOINT).is_file():
        note += "; run the same command with --resume to go on"
    return note


def _is_run_file(name: str) -> bool:
    """Whether a file of this name is one a run writes (or an atomic write's temporary)."""
    if name == LOCK:
        return True
    if name.startswith(".") and name.endswith(".tmp"):
        name = name[1:].removesuffix(".tmp").rpartition(".")[0]
    return any(fnmatch(name, pattern) for pattern in (CONFIG, *RUN_OUTPUTS))


def foreign_entries(path: Path) -> list[str]:
    """Names in ``path`` that no ella run writes (a user's files, subdirectories)."""
    return sorted(
        entry.name
        for entry in Path(path).iterdir()
        if not (entry.is_file() and _is_run_file(entry.name))
    )


def holds_run(path: Path) -> bool:
    """Whether ``path`` is a run directory of ella: it has a config or a checkpoint (or the
    temporary of one being written) and nothing that a run does not write."""
    path = Path(path)
    started = (path / CONFIG).is_file() or (path / CHECKPOINT).is_file()
    started = (
        started or any(path.glob(f".{CONFIG}.*.tmp")) or any(path.glob(f".{CHECKPOINT}.*.tmp"))
    )
    return started and not foreign_entries(path)


def new_run_directory(prefix: str, root: str | Path = "runs") -> Path:
    """Create and return a new, unique ``root/<prefix>-YYYYmmdd-HHMMSS[-k]`` directory."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise refusal(
            RunDirectoryError, "cannot create {root}/ for the run: {err}; {pass_out}",
            root=root, err=err,
        ) from err  # fmt: skip
    stamp = time.strftime(f"{prefix}-%Y%m%d-%H%M%S")
    for k in range(1, 10_000):
        path = root / (stamp if k == 1 else f"{stamp}-{k}")
        try:
            path.mkdir()  # atomic: fails if another run took the name
            return path
        except FileExistsError:
            continue
        except OSError as err:
            raise refusal(
                RunDirectoryError, "cannot create {path}: {err}; {pass_out}", path=path, err=err
            ) from err
    raise refusal(
        RunDirectoryError, "no free run directory name under {root}/; {pass_out}", root=root
    )


def refuse_unusable_name(path: Path, option: str = "--out") -> None:
    """Refuse a ``path`` that the file system cannot name (a part too long for it), before
    any work starts.

    Raises:
        RunDirectoryError: naming the option, the limit and the fix.
    """
    try:
        os.stat(path)
    except OSError as err:
        if err.errno != errno.ENAMETOOLONG:
            return  # missing, or a problem that the directory's own checks name
        longest = max(len(os.fsencode(part)) for part in Path(path).parts)
        shown = str(path) if len(str(path)) <= 80 else f"{str(path)[:77]}..."
        raise RunDirectoryError(
            f"{option} {shown}: a name in it is too long for the file system (its longest "
            f"part has {longest} bytes, the whole {len(os.fsencode(str(path)))}); choose a "
            f"shorter {option}"
        ) from None


def stopped_before_checkpoint(out: Path) -> bool:
    """Whether ``out`` holds a run stopped before its first checkpoint: its ``config.json``
    and nothing else a run writes (the lock, an interrupted write's temporaries aside), so
    that starting it again from its configuration loses nothing."""
    out = Path(out)
    if not (out / CONFIG).is_file() or (out / CHECKPOINT).exists():
        return False
    rest = [
        entry.name
        for entry in out.iterdir()
        if entry.name not in (CONFIG, LOCK)
        and not (entry.name.startswith(".") and entry.name.endswith(".tmp"))
    ]
    return not rest


def check_run_directory(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse a run directory that cannot be used as asked, before any work starts.

    Raises:
        RunDirectoryError: ``out`` is a file, not writable, holds a run (without
            ``resume`` or ``overwrite``) or holds files that are not a run.
        CheckpointError: ``resume`` without a checkpoint in ``out``.
    """
    out = Path(out)
    refuse_a_file(out)
    for name in (n for n in (CONFIG, *RUN_OUTPUTS) if "*" not in n):
        if (out / name).exists() and not (out / name).is_file():
            raise refusal(
                RunDirectoryError,
                "{path} is not a file, and ella writes its {name} there: move it away or "
                "choose {another}",
                path=out / name, name=name,
            )  # fmt: skip
    if resume:
        if not (out / CHECKPOINT).is_file() and not stopped_before_checkpoint(out):
            if holds_run(out):
                raise refusal(
                    CheckpointError,
                    "{resume}: no checkpoint at {path}, so there is nothing to continue; "
                    "start the run again with {overwrite}, or choose {another}",
                    path=out / CHECKPOINT,
                )  # fmt: skip
            raise refusal(
                CheckpointError,
                "{resume}: no checkpoint at {path} (no run to continue); leave out {resume} "
                "to start a run there",
                path=out / CHECKPOINT,
            )  # fmt: skip
    elif out.is_dir() and any(entry.name != LOCK for entry in out.iterdir()):
        if not holds_run(out):
            foreign = foreign_entries(out)
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            if (out / CONFIG).is_file() or (out / CHECKPOINT).is_file():
                raise refusal(
                    RunDirectoryError,
                    "{where} {out} holds an ella run beside files ella did not write: {shown}; "
                    "move them out of it to use the run, or choose {another}",
                    out=out, shown=shown,
                )  # fmt: skip
            raise refusal(
                RunDirectoryError,
                "{where} {out} is not empty and holds no ella run (files ella did not write: "
                "{shown}); ella never writes over files it did not create: choose a new or "
                "empty directory",
                out=out, shown=shown,
            )  # fmt: skip
        if not overwrite and stopped_before_checkpoint(out):
            raise refusal(
                RunDirectoryError,
                "{out} already holds a run that stopped before its first checkpoint (only "
                "{config}); use {resume} to start it again with its configuration, "
                "{overwrite} to start again with these options, or {another}",
                out=out, config=CONFIG,
            )  # fmt: skip
        if not overwrite:
            raise refusal(
                RunDirectoryError,
                "{out} already holds a run; use {resume} to continue it, {overwrite} to start "
                "again, or {another}",
                out=out,
            )  # fmt: skip
    _check_writable(out)


def _check_writable(out: Path) -> None:
    """Create ``out`` if needed and check that files can be created in it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".ella-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise unwritable(out, err) from err


def clear_run_outputs(out: Path) -> list[Path]:
    """Remove what a run writes (checkpoint, metrics, results, figures) from ``out``."""
    removed = []
    for pattern in RUN_OUTPUTS:
        for path in sorted(Path(out).glob(pattern)):
            if path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def remove_orphan_temporaries(out: Path) -> list[Path]:
    """Remove ``.<name>.*.tmp`` files left by an atomic write that was killed midway
    (:func:`ella.io.atomic_write`); only for names a run writes."""
    removed = []
    for path in sorted(Path(out).glob(".*.tmp")):
        name = path.name[1:].removesuffix(".tmp").rpartition(".")[0]  # drop the random part
        if path.is_file() and any(fnmatch(name, p) for p in (CONFIG, *RUN_OUTPUTS)):
            path.unlink()
            removed.append(path)
    return removed
