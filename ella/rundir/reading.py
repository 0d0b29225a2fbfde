"""Reading a run directory's files back: JSON checked against its schema, a checkpoint
only under the configuration it was saved with, each refusal naming its fix."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ella.errors import CheckpointError
from ella.io import load_torch
from ella.options.migrations import upgrade
from ella.rundir.files import CONFIG, RESULTS, RESULTS_FIX
from ella.rundir.refusals import refusal
from ella.schemas import check

if TYPE_CHECKING:
    from ella.options import Config


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
        raise refusal(
            CheckpointError,
            "{resume}: {path} was written by ella 0.2 or earlier, and its run is finished "
            "({results} is beside it): there is nothing to resume. ella report, select and "
            "export read it as it is; keep it ({overwrite} would discard its results)",
            path=path, results=RESULTS,
        )  # fmt: skip
    raise refusal(
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
        raise refusal(CheckpointError, "{resume}: no checkpoint at {path}", path=path)
    ckpt = load_torch(path, fix="restore it from a copy, or start the run again with --overwrite")
    saved = ckpt.get("config") if isinstance(ckpt, dict) else None
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path} is not a checkpoint of ella (it has no configuration)")
    check_fc_layout(ckpt, path)
    changed = config_differences(saved, config)
    if changed:
        raise refusal(
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
