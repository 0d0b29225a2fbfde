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

The package: :mod:`~ella.rundir.files` (the files by name), :mod:`~ella.rundir.claim`
(claiming a directory), :mod:`~ella.rundir.reading` (reading its files back),
:mod:`~ella.rundir.locks` (one owner at a time), :mod:`~ella.rundir.refusals` (their
wording).
"""

from __future__ import annotations

from ella.rundir.claim import (
    begin_run,
    check_run_directory,
    checkpoint_note,
    clear_run_outputs,
    foreign_entries,
    holds_run,
    new_run_directory,
    refuse_unusable_name,
    remove_orphan_temporaries,
    resume_note,
    stopped_before_checkpoint,
)
from ella.rundir.files import (
    CHECKPOINT,
    CONFIG,
    EXPORT_THRESHOLD,
    EXPORTED,
    LOCK,
    METRICS,
    PATH_DROPS,
    PATH_OUTPUTS,
    PATH_SELECTION,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_CANDIDATE,
    PATH_SELECTION_PER_LAYER_FIGURE,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_STATE,
    RESULTS,
    RESULTS_FIX,
    SELECT_EPOCHS,
)
from ella.rundir.locks import (
    lock_holder,
    remove_if_unused,
    run_lock,
)
from ella.rundir.reading import (
    config_differences,
    invalid_config,
    load_checkpoint,
    read_json,
    saved_run_dict,
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
