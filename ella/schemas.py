"""The shape of each file ella writes into a run directory, checked whenever it is read back.

A file that was cut, edited or written by another program must be refused with its name,
the key that is wrong and what to do, never read into a wrong answer or a raw
``TypeError`` further on. A schema describes JSON (or the plain values of a checkpoint)
with a few constructors: a Python type (``str``, ``int``, ``bool``, :data:`NUMBER`),
:class:`ListOf`, :class:`MapOf`, :class:`Record` (required and optional keys; other keys
are allowed, so that a later version's additions can be read) and :class:`Maybe`.
:func:`check` walks a value against one and raises
:class:`~ella.errors.CheckpointError` at the first mismatch.

The configuration (``config.json`` and a checkpoint's copy) is checked by the
configuration classes themselves (:meth:`ella.options.Config.from_dict`: every option's
type and range, and the keys every version wrote).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ella.errors import CheckpointError

__all__ = [
    "EXPORTED_FILE",
    "PATH_DROPS_FILE",
    "RESULTS_FILE",
    "SELECTION_FILE",
    "SELECTION_STATE_FILE",
    "ListOf",
    "MapOf",
    "Maybe",
    "NUMBER",
    "Record",
    "TENSOR",
    "check",
    "mismatch",
]


class _Number:
    """A JSON number: an int or a float, never a bool; ``null`` where the value was not
    finite (:func:`ella.io.strict_json` writes NaN and infinities as ``null``)."""

    def __repr__(self) -> str:
        return "a number"


class _Tensor:
    """A ``torch.Tensor`` (in a checkpoint)."""

    def __repr__(self) -> str:
        return "a tensor"


NUMBER = _Number()
TENSOR = _Tensor()


@dataclasses.dataclass(frozen=True)
class ListOf:
    """A list whose every item matches ``item``."""

    item: Any


@dataclasses.dataclass(frozen=True)
class MapOf:
    """An object (dict) with string keys whose every value matches ``value``."""

    value: Any


@dataclasses.dataclass(frozen=True)
class Maybe:
    """``None`` (JSON ``null``), or a value matching ``spec``."""

    spec: Any


@dataclasses.dataclass(frozen=True)
class Record:
    """An object with the ``required`` keys and, where present, the ``optional`` ones, each
    matching its spec; other keys are allowed."""

    required: dict[str, Any]
    optional: dict[str, Any] = dataclasses.field(default_factory=dict)


_NAMES = {str: "a string", int: "an integer", bool: "true or false", dict: "an object"}


def _describe(spec: Any) -> str:
    if isinstance(spec, ListOf):
        return f"a list of {_describe(spec.item).removeprefix('a ').removeprefix('an ')}s"
    if isinstance(spec, (MapOf, Record)):
        return "an object"
    if isinstance(spec, Maybe):
        return f"{_describe(spec.spec)} or null"
    return _NAMES.get(spec, repr(spec))


def _found(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def mismatch(value: Any, spec: Any, where: str = "") -> str | None:
    """Where ``value`` first fails ``spec`` and how (``"rounds[0].winner should be a string
    or null, found the number 3"``); None where it matches."""

    def wrong() -> str:
        return f"{where or 'the whole file'} should be {_describe(spec)}, found {_found(value)}"

    if isinstance(spec, Maybe):
        return None if value is None else mismatch(value, spec.spec, where)
    if spec is NUMBER:
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        return None if ok else wrong()
    if spec is TENSOR:
        return None if isinstance(value, torch.Tensor) else wrong()
    if spec is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else wrong()
    if isinstance(spec, type):
        return None if isinstance(value, spec) else wrong()
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return wrong()
        for i, item in enumerate(value):
            found = mismatch(item, spec.item, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(spec, MapOf):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return wrong()
        for key, item in value.items():
            found = mismatch(item, spec.value, f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if isinstance(spec, Record):
        if not isinstance(value, dict):
            return wrong()
        for key, item_spec in [*spec.required.items(), *spec.optional.items()]:
            at = f"{where}.{key}" if where else key
            if key not in value:
                if key in spec.required:
                    return f"{at} is missing"
                continue
            found = mismatch(value[key], item_spec, at)
            if found:
                return found
        return None
    raise TypeError(f"not a schema: {spec!r}")


def check(value: Any, spec: Any, path: Path, fix: str) -> Any:
    """``value`` (read from ``path``) if it matches ``spec``; otherwise a CheckpointError
    that names the file, the key and ``fix``."""
    found = mismatch(value, spec)
    if found:
        raise CheckpointError(f"{path} is not as ella writes it: {found}; {fix}")
    return value


#: a candidate network of ``ella select --drop-only``: trained on alike, then scored
_DROP_ROW = Record(
    {"dropped": str, "test_accuracy": NUMBER, "log_evidence": NUMBER},
    {
        "kept": ListOf(str),
        "log_likelihood": NUMBER,
        "shares": MapOf(NUMBER),
        "test_nll": NUMBER,
    },
)
#: a candidate of a selection round, whose fit and kept paths the selection reads as well
_ROW = Record(
    {**_DROP_ROW.required, "kept": ListOf(str), "log_likelihood": NUMBER, "shares": MapOf(NUMBER)},
    {"test_nll": NUMBER},
)
_NULL = Record({"log_likelihood": NUMBER, "log_evidence": NUMBER})
#: ``path_selection.json`` and ``path_selection_per_layer.json``
SELECTION_FILE = Record(
    {
        "epochs": int,
        "paths": ListOf(str),
        "kept": ListOf(str),
        "finished": bool,
        "rounds": ListOf(Record({"kept": ListOf(str), "rows": ListOf(_ROW), "winner": Maybe(str)})),
    },
    {"null": _NULL, "per_layer": bool},
)
#: ``path_drops.json``
PATH_DROPS_FILE = Record({"epochs": int, "rows": ListOf(_DROP_ROW)})
#: the selected network (``path_selection.pt``) or a round's best candidate
SELECTION_STATE_FILE = Record(
    {"model": MapOf(TENSOR), "log_prior": TENSOR, "kept": ListOf(str)}, {"dropped": str}
)
#: ``exported.pt`` (``ella export``)
EXPORTED_FILE = Record(
    {"dropped": MapOf(ListOf(str)), "threshold": NUMBER, "model": MapOf(TENSOR)},
)
#: ``results.json`` of ``ella train``: what ``ella report``, ``select`` and ``export`` read
RESULTS_FILE = Record(
    {"effective_parameters": ListOf(Record({"layer": str}, {"prior_variance": MapOf(NUMBER)}))},
    {
        "test_accuracy": NUMBER,
        "epochs": int,
        "train_time_s": NUMBER,
        "prior_variance": MapOf(NUMBER),
        "eta_history": list,
    },
)
