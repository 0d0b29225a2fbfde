"""Run directories: created uniquely, never overwriting a user's files, cleaned on restart.

A run directory is what ``ella train`` and ``ella ensemble`` write: ``config.json``
first, then ``checkpoint.pt`` and ``metrics.jsonl`` after every epoch, and
``results.json`` with figures at the end. The rules:

* a new run goes into a new or empty directory; a directory that holds a run
  is refused unless the user asks for ``--resume`` or ``--overwrite``; a
  non-empty directory that holds no run is always refused (its files are the
  user's, not ours);
* ``--overwrite`` removes the old run's outputs before the new run starts, so
  a failed new run never leaves an old ``results.json`` beside a new config;
* default directories (``runs/<prefix>-<date>-<time>``) are created with
  ``mkdir``, which fails if the name is taken, so two runs started in the same
  second get different directories;
* temporary files of an interrupted atomic write are removed on the next start;
* a run directory has one owner at a time: a process that writes into it holds an
  exclusive ``flock`` on its ``.ella.lock`` (:func:`run_lock`), which the kernel
  releases when the process ends, so a killed run never leaves a stale lock; a
  second process is refused at once, with the holder's pid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ella.errors import CheckpointError, EllaError, RunDirectoryError
from ella.io import load_torch, save_json
from ella.options.migrations import upgrade
from ella.schemas import check

if TYPE_CHECKING:
    from ella.options import Config

CONFIG = "config.json"
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
RESULTS = "results.json"
#: what to do about a results.json that cannot be read: the checkpoint writes it again
RESULTS_FIX = "move it away and run ella train --out RUN --resume to write it again"
#: the lock file of a run directory (:func:`run_lock`); present only while a process holds it
LOCK = ".ella.lock"
#: what ``ella report RUN --path-outputs`` writes into the run directory
PATH_OUTPUTS = "path_outputs.json"
#: what ``ella select RUN --drop-only`` writes into the run directory
PATH_DROPS = "path_drops.json"
#: what ``ella select RUN`` writes: its rounds, and the selected network's
#: weights and log prior precisions (the winner of its last finished round)
PATH_SELECTION = "path_selection.json"
PATH_SELECTION_STATE = "path_selection.pt"
#: the best candidate so far of a selection round in progress (removed when it finishes)
PATH_SELECTION_CANDIDATE = "path_selection_candidate.pt"
#: what ``ella select RUN --per-layer`` writes: its rounds, the selected network, and the
#: best candidate of a round in progress (as the three files above)
PATH_SELECTION_PER_LAYER = "path_selection_per_layer.json"
PATH_SELECTION_PER_LAYER_STATE = "path_selection_per_layer.pt"
PATH_SELECTION_PER_LAYER_CANDIDATE = "path_selection_per_layer_candidate.pt"
#: the figure of a finished per-layer selection (``ella select --per-layer``, ``ella report``)
PATH_SELECTION_PER_LAYER_FIGURE = "path_selection_per_layer.png"
#: ``ella select``: epochs of training on per candidate network
SELECT_EPOCHS = 20
#: ``ella export``'s file: the network without the paths its priors switched off
EXPORTED = "exported.pt"
#: ``ella export``: a path is off below this fraction of its layer's largest prior variance
EXPORT_THRESHOLD = 0.01
#: outputs a run, ``ella report``, ``ella select`` and ``ella export`` write besides
#: config.json (removed by --overwrite); globs. A file not matched here counts as the
#: user's, and --overwrite refuses the folder.
RUN_OUTPUTS = (
    CHECKPOINT,
    METRICS,
    RESULTS,
    PATH_OUTPUTS,
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_STATE,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_PER_LAYER_CANDIDATE,
    EXPORTED,
    "*.png",
    "symmetry_*.json",
    "path_*_replicates.json",  # a selection's replicates at other seeds (ella select --seeds)
)

__all__ = [
    "CHECKPOINT",
    "CONFIG",
    "EXPORTED",
    "EXPORT_THRESHOLD",
    "LOCK",
    "METRICS",
    "PATH_DROPS",
    "PATH_OUTPUTS",
    "PATH_SELECTION",
    "PATH_SELECTION_CANDIDATE",
    "PATH_SELECTION_PER_LAYER",
    "PATH_SELECTION_PER_LAYER_CANDIDATE",
    "PATH_SELECTION_PER_LAYER_FIGURE",
    "PATH_SELECTION_PER_LAYER_STATE",
    "PATH_SELECTION_STATE",
    "RESULTS",
    "RESULTS_FIX",
    "SELECT_EPOCHS",
    "begin_run",
    "config_differences",
    "checkpoint_note",
    "check_run_directory",
    "clear_run_outputs",
    "foreign_entries",
    "holds_run",
    "invalid_config",
    "lock_holder",
    "load_checkpoint",
    "new_run_directory",
    "read_json",
    "refuse_unusable_name",
    "remove_if_unused",
    "remove_orphan_temporaries",
    "resume_note",
    "run_lock",
    "saved_run_dict",
    "stopped_before_checkpoint",
]


#: how a refusal names the run directory's options: Python's keywords (``ella.fit``'s, and
#: ``train``'s), and the command line's flags (:meth:`ella.errors.EllaError.on_command_line`)
_WORDS = {
    "python": {"resume": "resume=True", "overwrite": "overwrite=True",
               "where": "the run directory", "another": "another run directory (out)",
               "pass_out": "pass a run directory (out)"},
    "command_line": {"resume": "--resume", "overwrite": "--overwrite", "where": "--out",
                     "another": "another --out", "pass_out": "pass --out"},
}  # fmt: skip


def _refusal(cls: type[EllaError], template: str, **values: object) -> EllaError:
    """``cls`` with ``template`` worded for Python (its message) and for the command line
    (:meth:`~ella.errors.EllaError.on_command_line`): ``{resume}``, ``{overwrite}``,
    ``{where}``, ``{another}`` and ``{pass_out}`` name the options in each."""
    python = template.format(**_WORDS["python"], **values)
    return cls(python, command_line=template.format(**_WORDS["command_line"], **values))


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
            raise _refusal(
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
        raise _refusal(
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
            raise _refusal(
                RunDirectoryError, "cannot create {path}: {err}; {pass_out}", path=path, err=err
            ) from err
    raise _refusal(
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


def _refuse_a_file(out: Path) -> None:
    """Refuse an ``--out`` that names a file, or a symbolic link to nothing."""
    if out.is_symlink() and not out.exists():
        raise _refusal(
            RunDirectoryError,
            "{where} {out} is a symbolic link to {target}, which does not exist; create the "
            "directory it points to, or choose {another}",
            out=out, target=os.readlink(out),
        )  # fmt: skip
    if out.exists() and not out.is_dir():
        raise _refusal(
            RunDirectoryError, "{where} {out} is a file, not a directory; choose {another}",
            out=out,
        )  # fmt: skip


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


def _unwritable(out: Path, err: OSError) -> RunDirectoryError:
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


def check_run_directory(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse a run directory that cannot be used as asked, before any work starts.

    Raises:
        RunDirectoryError: ``out`` is a file, not writable, holds a run (without
            ``resume`` or ``overwrite``) or holds files that are not a run.
        CheckpointError: ``resume`` without a checkpoint in ``out``.
    """
    out = Path(out)
    _refuse_a_file(out)
    for name in (n for n in (CONFIG, *RUN_OUTPUTS) if "*" not in n):
        if (out / name).exists() and not (out / name).is_file():
            raise _refusal(
                RunDirectoryError,
                "{path} is not a file, and ella writes its {name} there: move it away or "
                "choose {another}",
                path=out / name, name=name,
            )  # fmt: skip
    if resume:
        if not (out / CHECKPOINT).is_file() and not stopped_before_checkpoint(out):
            if holds_run(out):
                raise _refusal(
                    CheckpointError,
                    "{resume}: no checkpoint at {path}, so there is nothing to continue; "
                    "start the run again with {overwrite}, or choose {another}",
                    path=out / CHECKPOINT,
                )  # fmt: skip
            raise _refusal(
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
                raise _refusal(
                    RunDirectoryError,
                    "{where} {out} holds an ella run beside files ella did not write: {shown}; "
                    "move them out of it to use the run, or choose {another}",
                    out=out, shown=shown,
                )  # fmt: skip
            raise _refusal(
                RunDirectoryError,
                "{where} {out} is not empty and holds no ella run (files ella did not write: "
                "{shown}); ella never writes over files it did not create: choose a new or "
                "empty directory",
                out=out, shown=shown,
            )  # fmt: skip
        if not overwrite and stopped_before_checkpoint(out):
            raise _refusal(
                RunDirectoryError,
                "{out} already holds a run that stopped before its first checkpoint (only "
                "{config}); use {resume} to start it again with its configuration, "
                "{overwrite} to start again with these options, or {another}",
                out=out, config=CONFIG,
            )  # fmt: skip
        if not overwrite:
            raise _refusal(
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
        raise _unwritable(out, err) from err


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


def config_differences(saved: dict, config: Config) -> list[str]:
    """The options that define the run (:meth:`~ella.options.Config.run_dict`) on which the
    ``saved`` configuration (a dict) differs from ``config``, sorted. An option added after
    it was saved counts as what ella did before the option existed
    (:func:`ella.options.migrations.upgrade`): its default, unless
    :data:`ella.options.migrations.ABSENT_MEANS` says otherwise."""
    want, theirs = config.run_dict(), saved_run_dict(saved, type(config))
    return sorted(k for k in want if theirs.get(k) != want[k])


def saved_run_dict(saved: dict, config_cls: type[Config]) -> dict:
    """The options that define the run (:meth:`~ella.options.Config.run_dict`) of a saved
    configuration, an option it lacks as what it meant then
    (:func:`ella.options.migrations.upgrade`, else its default)."""
    saved = upgrade(saved, config_cls)
    return {k: saved.get(k, default) for k, default in config_cls().run_dict().items()}


#: a parameter of an FC path in the layout of one tensor per channel (ella 0.2 and earlier)
_PER_CHANNEL_FC = re.compile(r"\.(pixel_maps|channel_maps)\.\d+\.(weight|bias)$")


def check_fc_layout(ckpt: dict, path: Path) -> None:
    """Refuse to resume a checkpoint whose FC paths hold one tensor per channel (ella 0.2 and
    earlier): its weights load (``ella report``, ``select`` and ``export`` read them), but
    its optimiser's state is per channel and cannot continue the stacked tensors.

    Raises:
        CheckpointError: naming the version that resumes it.
    """
    states = [v for v in ckpt.values() if isinstance(v, dict)]
    states += [
        s for v in ckpt.values() if isinstance(v, list | tuple) for s in v if isinstance(s, dict)
    ]
    if not any(isinstance(k, str) and _PER_CHANNEL_FC.search(k) for s in states for k in s):
        return
    if (Path(path).parent / RESULTS).is_file():  # finished: --overwrite would discard it
        raise _refusal(
            CheckpointError,
            "{resume}: {path} was written by ella 0.2 or earlier, and its run is finished "
            "({results} is beside it): there is nothing to resume. ella report, select and "
            "export read it as it is; keep it ({overwrite} would discard its results)",
            path=path, results=RESULTS,
        )  # fmt: skip
    raise _refusal(
        CheckpointError,
        "{resume}: {path} was written by ella 0.2 or earlier, whose FC paths held one "
        "tensor per channel; this version stacks them, and the optimiser's state "
        "cannot be carried over. Finish the run with ella 0.2 (pip install "
        "'ella-torch==0.2.*'), or start it again with {overwrite}; ella report, select "
        "and export read it as it is",
        path=path,
    )  # fmt: skip


def load_checkpoint(path: Path, config: Config) -> dict:
    """Read a run's checkpoint for ``--resume``, refusing one saved with another configuration.

    Args:
        path: the checkpoint file (a dict with a ``"config"`` entry).
        config: the resuming run's configuration (a :class:`~ella.options.Config`); only
            the options that define the run are compared (``data_dir``, ``device`` and
            ``progress`` may differ); an option the saved configuration lacks (added
            to ella later) is compared as what it meant then (:func:`config_differences`).

    Raises:
        CheckpointError: no checkpoint at ``path``, a corrupt one, or one whose saved
            configuration differs; the message names the keys.
    """
    path = Path(path)
    if not path.is_file():
        raise _refusal(CheckpointError, "{resume}: no checkpoint at {path}", path=path)
    ckpt = load_torch(path, fix="restore it from a copy, or start the run again with --overwrite")
    saved = ckpt.get("config") if isinstance(ckpt, dict) else None
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path} is not a checkpoint of ella (it has no configuration)")
    check_fc_layout(ckpt, path)
    changed = config_differences(saved, config)
    if changed:
        raise _refusal(
            CheckpointError,
            "{resume}: the configuration ({config}) differs from the checkpoint's ({path}) "
            "in {changed}; resume with the same options, restore {name} if it was edited, "
            "or start a new run directory",
            config=path.parent / CONFIG, path=path, changed=changed, name=CONFIG,
        )  # fmt: skip
    return ckpt


#: what to do about a run directory's file that cannot be read, by name (the default:
#: restore it from a copy)
_READ_FIXES = {
    CONFIG: "restore it from a copy (the run's checkpoint holds its configuration too)",
    RESULTS: RESULTS_FIX,
}


def invalid_config(path: Path, err: Exception) -> CheckpointError:
    """The refusal of a saved configuration that does not build (``err``, the options'
    own check), with what to do where ``err`` does not say it."""
    message = f"{path} is not a valid configuration: {err}"
    if "restore it" not in message:
        message += f"; {_READ_FIXES[CONFIG]}"
    return CheckpointError(message)


def read_json(path: Path, what: str, schema: Any = None, fix: str = "") -> dict:
    """A JSON object from ``path``; a CheckpointError naming the file if it is missing,
    empty, truncated or not an object, or (with a ``schema`` of :mod:`ella.schemas`) not
    of that shape, with ``fix`` (what to do about it; by default from the file's name, or
    "restore it from a copy") in the message."""
    path = Path(path)
    fix = fix or _READ_FIXES.get(path.name, "restore it from a copy")
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"no {path.name} in {path.parent} ({what})") from None
    except PermissionError:  # the file may be good: never call it corrupt
        raise CheckpointError(
            f"cannot read {path}: permission denied; the file may be good: fix its "
            f"permissions (e.g. chmod u+r {path}) or run as its owner"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(
            f"{path} is empty, truncated or not JSON ({err}); the {what} cannot be read: {fix}"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{path} does not hold a JSON object; the {what} cannot be read: {fix}"
        )
    if schema is not None:
        check(data, schema, path, fix)
    return data


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
            raise _unwritable(out, err) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refusal(
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
    _refuse_a_file(out)
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
        raise _unwritable(out, err) from err
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
