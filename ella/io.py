"""Atomic file writes: a crash never leaves a half-written checkpoint, result or figure."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ella.errors import CheckpointError, FileWriteError

#: what a failed write means, by errno, and what to do about it
_WRITE_CAUSES: dict[int, str] = {
    errno.ENOSPC: "the disk is full (no space left on the device); free some space",
    errno.EDQUOT: "the disk quota is used up; free some space",
    errno.EFBIG: (
        "the file is larger than this process may write (a file-size limit: ulimit -f); "
        "raise the limit"
    ),
    errno.ENAMETOOLONG: "a name in the path is too long for the file system; choose a shorter one",
    errno.EACCES: "permission denied; fix the directory's permissions or write elsewhere",
    errno.EPERM: "the operation is not permitted; fix the directory's permissions",
    errno.EROFS: "the file system is read-only; write elsewhere",
}


def _write_failed(path: Path, err: OSError) -> FileWriteError:
    cause = _WRITE_CAUSES.get(err.errno, f"{err.strerror or err}; check the file system")
    failed = FileWriteError(
        f"could not write {path}: {cause}. Nothing was replaced: the file is as it was"
    )
    failed.errno = err.errno  # the cause, for a caller that tells them apart
    return failed


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(f)`` on a temporary file next to ``path``, then rename it to ``path``.

    Raises:
        FileWriteError: the directory, the temporary file or the rename failed (no space,
            a file-size limit, a name too long, no permission), named with its cause;
            ``path`` is as it was.
    """
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, FileWriteError):
            raise _write_failed(path, err) from None
        raise
    return path


#: the entry that :func:`save_torch` adds to a saved dict: :func:`values_digest` of the rest
DIGEST_KEY = "ella_sha256"


def values_digest(obj: Any) -> str:
    """SHA-256 of every tensor (name, dtype, shape and bytes) and plain value in ``obj``,
    visited in a fixed order (a dict's keys sorted), so that a value changed after
    writing, by a flipped bit or a cast, changes it.

    A loaded object gives the digest of the saved one: ``torch.load`` returns the same
    tensors, containers and plain values that ``torch.save`` was given.
    """
    digest = hashlib.sha256()

    def visit(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            flat = value.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{name}|{flat.dtype}|{tuple(value.shape)}|".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            digest.update(f"{name}|dict{len(value)}|".encode())
            for key in sorted(value, key=repr):
                visit(f"{name}/{key!r}", value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(f"{name}|{type(value).__name__}{len(value)}|".encode())
            for i, item in enumerate(value):
                visit(f"{name}/{i}", item)
        else:
            digest.update(f"{name}={type(value).__name__}:{value!r}|".encode())

    visit("", obj)
    return digest.hexdigest()


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file and an atomic rename (serialised in memory
    first, so that a failed write is the file system's error, which
    :func:`atomic_write` names, not the serialiser's).

    A dict is saved with :data:`DIGEST_KEY`, the :func:`values_digest` of its values,
    which :func:`load_torch` checks and removes.
    """
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k != DIGEST_KEY}
        obj[DIGEST_KEY] = values_digest(obj)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def save_text(text: str, path: Path) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text.encode()))


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, infinities) replaced by ``None``, so that it
    is written as strict JSON (``null``), which every JSON reader accepts."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def save_json(obj: Any, path: Path) -> None:
    """``obj`` as indented strict JSON (:func:`strict_json`), written atomically."""
    save_text(json.dumps(strict_json(obj), indent=2, allow_nan=False) + "\n", path)


def save_jsonl(rows: list[dict], path: Path) -> None:
    """One strict JSON object per line (:func:`strict_json`), written atomically."""
    save_text("".join(json.dumps(strict_json(r), allow_nan=False) + "\n" for r in rows), path)


#: what torch's weights-only unpickler says of a file that pickles a class or function
#: (a crafted pickle, or a checkpoint of another program), as opposed to one whose bytes
#: are no pickle at all ("Unsupported operand", "String is too long"...): random bytes,
#: JSON text, a truncated file
_PICKLED_OBJECT = re.compile(
    r"GLOBAL |allowlisted|add_safe_globals|unrecognized function|must be imported to load"
)


def _unpickler_detail(text: str) -> str:
    """The line of torch's error that says what the unpickler met (without torch's advice
    to load the file with its code)."""
    detail = text.rpartition("WeightsUnpickler error:")[2] if "WeightsUnpickler" in text else ""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    if not lines:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0].split(". ")[0][:200] if lines else ""


def load_torch(path: Path, fix: str = "restore it from a copy") -> Any:
    """Load a checkpoint without executing code from it (``weights_only=True``: tensors,
    and plain Python containers and numbers only).

    Args:
        path: the file.
        fix: what to do about a corrupt file, for the message.

    Raises:
        CheckpointError: the file cannot be read (permissions: the message says to fix
            them, not that the file is bad), is missing, truncated or corrupt (random
            bytes, text), holds objects other than tensors and plain types (e.g. a
            crafted pickle), or holds values that differ from those written (its
            :data:`DIGEST_KEY` does not match: a flipped bit, a tensor cast or replaced).
    """
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:
        raise CheckpointError(
            f"cannot read checkpoint {path}: permission denied; the file may be good: fix its "
            f"permissions (e.g. chmod u+r {path}) or run as its owner"
        ) from None
    except OSError as err:  # an unreadable file or disk; not a verdict on its contents
        if _readable(path):  # torch's reader met damage it words as a system error
            raise CheckpointError(
                f"cannot read checkpoint {path}: it is corrupt, truncated or not a checkpoint "
                f"({err.strerror or err} while reading it); {fix}"
            ) from None
        raise CheckpointError(
            f"cannot read checkpoint {path}: {err.strerror or err}; check the file system "
            "and the file's permissions"
        ) from None
    except Exception as err:  # torch raises several types for corrupt or unsafe files
        text = str(err).strip()
        if _PICKLED_OBJECT.search(text):
            # torch's own hint (load with weights_only=False) would run the file's code
            reason = (
                "it holds Python objects besides tensors and plain values, which ella never "
                "loads (unpickling them could run code from the file)"
            )
        else:
            first = _unpickler_detail(text) or type(err).__name__
            reason = f"it is corrupt, truncated or not a checkpoint ({first}); {fix}"
        raise CheckpointError(f"cannot read checkpoint {path}: {reason}") from None
    return _checked_digest(loaded, path, fix)


def _readable(path: Path) -> bool:
    """Whether the bytes of ``path`` can be read from beginning to end."""
    try:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    except OSError:
        return False
    return True


def _checked_digest(loaded: Any, path: Path, fix: str) -> Any:
    """``loaded`` without its :data:`DIGEST_KEY`, once the digest matches its values (a
    file written before ella stored digests has none, and is returned as it is)."""
    if not isinstance(loaded, dict) or DIGEST_KEY not in loaded:
        return loaded
    stored = loaded.pop(DIGEST_KEY)
    if stored != values_digest(loaded):
        raise CheckpointError(
            f"cannot read checkpoint {path}: its values differ from those that were written "
            f"(the checksum of its tensors, {DIGEST_KEY}, does not match: the file was "
            f"damaged or edited after writing); {fix}"
        )
    return loaded


def load_state(module: torch.nn.Module, state: Any) -> None:
    """``module.load_state_dict(state)`` once every entry of ``state`` has the dtype and
    shape of the module's own (``load_state_dict`` would cast an int32 tensor silently).

    Raises:
        TypeError: ``state`` is not a mapping, or an entry is not a tensor or has another
            dtype; the message names the entry. Callers word it with their file and fix.
        RuntimeError: entries missing, unexpected or of another shape (``load_state_dict``'s
            own message).
    """
    if not isinstance(state, dict):
        raise TypeError(f"the weights are a {type(state).__name__}, not a dict of tensors")
    for name, own in module.state_dict().items():
        if name not in state:
            continue  # load_state_dict names every missing entry at once
        value = state[name]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} is a {type(value).__name__}, not a tensor")
        if value.dtype != own.dtype:
            raise TypeError(
                f"{name} is {value.dtype} where the network has {own.dtype} {tuple(own.shape)}"
            )
    module.load_state_dict(state)
