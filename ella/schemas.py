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

from ella.choices import PathName
from ella.errors import CheckpointError

__all__ = [
    "EXPORTED_FILE",
    "FIT_RESULTS_FILE",
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
    "results_schema",
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
        found = None if value is None else mismatch(value, spec.spec, where)
        inner = f"{where or 'the whole file'} should be {_describe(spec.spec)},"
        return wrong() if found is not None and found.startswith(inner) else found
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


#: one seed's training of a replicated candidate (``ella select --seeds``)
_REPLICATE = Record({"seed": int, "log_evidence": NUMBER})
#: a candidate network of ``ella select --drop-only``: trained on alike, then scored
_DROP_ROW = Record(
    {"dropped": str, "test_accuracy": NUMBER, "log_evidence": NUMBER},
    {
        "kept": ListOf(str),
        "log_likelihood": NUMBER,
        "shares": MapOf(NUMBER),
        "test_nll": NUMBER,
        "replicates": ListOf(_REPLICATE),
    },
)
#: a candidate of a selection round, whose fit and kept paths the selection reads as well
_ROW = Record(
    {**_DROP_ROW.required, "kept": ListOf(str), "log_likelihood": NUMBER, "shares": MapOf(NUMBER)},
    {"test_nll": NUMBER, "replicates": ListOf(_REPLICATE)},
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
    {"null": _NULL, "per_layer": bool, "criterion": str, "seeds": int},
)
#: ``path_drops.json``
PATH_DROPS_FILE = Record(
    {"epochs": int, "rows": ListOf(_DROP_ROW)}, {"criterion": str, "seeds": int}
)
#: the selected network (``path_selection.pt``) or a round's best candidate
SELECTION_STATE_FILE = Record(
    {"model": MapOf(TENSOR), "log_prior": TENSOR, "kept": ListOf(str)}, {"dropped": str}
)
#: ``exported.pt`` (``ella export``)
EXPORTED_FILE = Record(
    {"dropped": MapOf(ListOf(str)), "threshold": NUMBER, "model": MapOf(TENSOR)},
)
#: a row of a results file's per-layer table (:func:`ella.learner.report.format_table`)
_LAYER_ROW = Record(
    {
        "layer": str,
        "effective": MapOf(NUMBER),
        "parameters": MapOf(int),
        "prior_variance": MapOf(NUMBER),
    },
    {
        "relative": MapOf(NUMBER),
        "total_effective": NUMBER,
        **{path.value: NUMBER for path in PathName},  # each path's share, in %
    },
)
#: what ``ella.fit`` and ``ella train`` both write into ``results.json``
_LEARNED = {
    "prior_precision": MapOf(NUMBER),
    "prior_variance": MapOf(NUMBER),
    "effective_parameters": ListOf(_LAYER_ROW),
    "effective_parameters_other": list,
    "log_marglik": ListOf(NUMBER),
    "log_marglik_epochs": ListOf(int),
}
#: keys written by later versions, read where present
_LATER = {
    "prior_convergence": Maybe(Record({"rounds": int})),
    "shares_history": ListOf(MapOf(NUMBER)),
    "training_collapse": Maybe(dict),
    "class_frequency_log_evidence": NUMBER,
    "eta": MapOf(NUMBER),
    "eta_history": ListOf(MapOf(NUMBER)),
    "invariance": str,
    "validation_size": int,
    "processes": int,
}
#: ``results.json`` of ``ella train``: every version wrote the required keys
RESULTS_FILE = Record(
    {
        **_LEARNED,
        "test_accuracy": NUMBER,
        "test_nll": NUMBER,
        "reported_state": str,
        "reported_epoch": int,
        "final_test_accuracy": NUMBER,
        "final_test_nll": NUMBER,
        "log_marglik_reported_state": NUMBER,
        "parameters": int,
        "train_size": int,
        "test_size": int,
        "epochs": int,
        "train_time_s": NUMBER,
        "config": Record({"dataset": str}, {"learn_priors": bool, "model": str}),
    },
    _LATER,
)
#: ``results.json`` of ``ella.fit`` (``FitResult.as_dict`` and its configuration)
FIT_RESULTS_FILE = Record({**_LEARNED, "config": dict}, {**_LATER, "metrics": list})


def results_schema(results: dict) -> Record:
    """The schema of a ``results.json``: ``ella train``'s (its configuration names a data
    set, or it has none) or ``ella.fit``'s."""
    config = results.get("config")
    fitted = isinstance(config, dict) and "dataset" not in config and "likelihood" in config
    return FIT_RESULTS_FILE if fitted else RESULTS_FILE
