"""The shape of each file ella writes into a run directory, checked whenever it is read back.

A file that was cut, edited or written by another program must be refused with its name,
the key that is wrong and what to do, never read into a wrong answer or a raw
``TypeError`` further on. A schema describes JSON (or the plain values of a checkpoint)
with a few constructors: a Python type (``str``, ``int``, ``bool``, :data:`NUMBER`),
:class:`ListOf`, :class:`MapOf`, :class:`Record` (required and optional keys; other keys
are allowed, so that a later version's additions can be read) and :class:`Maybe`. A
:class:`Domain` states what a value of a type can be: :data:`FINITE` (a finite number,
where the writer never writes anything else or the reader cannot read null),
:func:`at_least` and :func:`between` (counts, fractions), :func:`one_of`, :data:`PATH` (a
registered path kind, :data:`ella.nn.PATH_KINDS`) and :data:`UNIT` (a path kind or a
layer's path, ``"layer3.conv"``: what a selection drops). :func:`check` walks a value
against one and raises :class:`~ella.errors.CheckpointError` at the first mismatch; what
one file's fields must say of each other (a selection's kept paths among its own paths)
is checked by its reader (:mod:`ella.selection.record`).

The configuration (``config.json`` and a checkpoint's copy) is checked by the
configuration classes themselves (:meth:`ella.options.Config.from_dict`: every option's
type and range, and the keys every version wrote).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ella.choices import PathName
from ella.errors import CheckpointError

__all__ = [
    "EXPORTED_FILE",
    "FINITE",
    "FIT_RESULTS_FILE",
    "PATH",
    "PATH_DROPS_FILE",
    "RESULTS_FILE",
    "SELECTION_FILE",
    "SELECTION_STATE_FILE",
    "UNIT",
    "Domain",
    "ListOf",
    "MapOf",
    "Maybe",
    "NUMBER",
    "Record",
    "TENSOR",
    "at_least",
    "between",
    "check",
    "is_unit",
    "mismatch",
    "one_of",
    "path_kinds",
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


@dataclasses.dataclass(frozen=True)
class Domain:
    """A value of ``base`` (a schema: ``str``, ``int``, :data:`NUMBER`) for which
    ``test(value)`` holds; ``words`` say which (a callable: worded when a value fails, for a
    registry that grows). A list of them is described by its ``base``; a value outside
    the domain by ``words``."""

    base: Any
    test: Callable[[Any], bool]
    words: str | Callable[[], str]

    def describe(self) -> str:
        """The words of the domain."""
        return self.words() if callable(self.words) else self.words


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(value)


#: a finite number (an int or a float, never a bool, null, NaN or an infinity)
FINITE = Domain(NUMBER, _finite, "a finite number")


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"from {low:g} to {high:g}"
    return f"of at least {low:g}" if low is not None else f"of at most {high:g}"


def between(low: float | None, high: float | None, integer: bool = False) -> Domain:
    """A finite number (``integer``: an integer) from ``low`` to ``high`` (None: unbounded)."""
    base, what = (int, "an integer") if integer else (NUMBER, "a finite number")

    def test(value: Any) -> bool:
        ok = integer or _finite(value)
        return ok and (low is None or value >= low) and (high is None or value <= high)

    return Domain(base, test, f"{what} {_bounds(low, high)}")


def at_least(low: float, integer: bool = True) -> Domain:
    """An integer (not ``integer``: a finite number) of at least ``low``: a count."""
    return between(low, None, integer)


def one_of(*values: str) -> Domain:
    """One of the strings ``values``."""
    return Domain(str, lambda value: value in values, "one of " + ", ".join(map(repr, values)))


def path_kinds() -> tuple[str, ...]:
    """The registered path kinds (:data:`ella.nn.PATH_KINDS`, read when asked: a kind
    registered later counts)."""
    from ella.nn.kinds import PATH_KINDS

    return tuple(PATH_KINDS)


def is_unit(name: str, per_layer: bool | None = None) -> bool:
    """Whether ``name`` is what a selection drops: a path kind (``"conv"``) or, per layer,
    a layer's path (``"layer3.conv"``: a layer's name, a dot, a path kind); ``per_layer``
    (None: either) says which."""
    if per_layer is None:
        return is_unit(name, False) or is_unit(name, True)
    if not per_layer:
        return name in path_kinds()
    layer, _, path = name.rpartition(".")
    return bool(layer) and path in path_kinds()


#: a registered path kind (``"conv"``)
PATH = Domain(str, lambda value: value in path_kinds(),
              lambda: f"a path name (one of {', '.join(path_kinds())})")  # fmt: skip
#: what a selection drops: a path kind, or a layer's path (``"layer3.conv"``)
UNIT = Domain(
    str, is_unit,
    lambda: f"a path name (one of {', '.join(path_kinds())}) or a layer's path (layer3.conv)",
)  # fmt: skip

_NAMES = {str: "a string", int: "an integer", bool: "true or false", dict: "an object"}


def _describe(spec: Any) -> str:
    if isinstance(spec, Domain):
        return spec.describe()
    if isinstance(spec, ListOf):
        if isinstance(spec.item, Domain):  # "a list of strings", its items' domain when wrong
            return _describe(ListOf(spec.item.base))
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
    if isinstance(spec, Domain):
        return None if mismatch(value, spec.base) is None and spec.test(value) else wrong()
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


#: counts: an epoch, a number of seeds, of parameters, of images
_COUNT, _POSITIVE = at_least(0), at_least(1)
#: an accuracy, as a fraction
_FRACTION = between(0, 1)
#: a negative log likelihood per example (of classes), seconds
_NON_NEGATIVE = between(0, None)
#: one seed's training of a replicated candidate (``ella select --seeds``); a criterion
#: other than the evidence adds its key (checked by :mod:`ella.selection.record`)
_REPLICATE = Record(
    {"seed": int, "log_evidence": FINITE},
    {"log_likelihood": FINITE, "test_accuracy": _FRACTION},
)
#: a candidate network of ``ella select --drop-only``: trained on alike, then scored
_DROP_ROW = Record(
    {"dropped": str, "test_accuracy": _FRACTION, "log_evidence": FINITE},
    {
        "kept": ListOf(PATH),
        "log_likelihood": FINITE,
        "shares": MapOf(FINITE),
        "test_nll": _NON_NEGATIVE,
        "seconds": _NON_NEGATIVE,
        "replicates": ListOf(_REPLICATE),
    },
)
#: a candidate of a selection round, whose fit and kept paths the selection reads as well
_ROW = Record(
    {
        **_DROP_ROW.required,
        "kept": ListOf(UNIT),
        "log_likelihood": FINITE,
        "shares": MapOf(FINITE),
    },
    {"test_nll": _NON_NEGATIVE, "seconds": _NON_NEGATIVE, "replicates": ListOf(_REPLICATE)},
)
_NULL = Record({"log_likelihood": FINITE, "log_evidence": FINITE})
#: ``path_selection.json`` and ``path_selection_per_layer.json``; the names in ``kept``,
#: ``dropped`` and ``winner`` are among the record's own ``paths`` (its reader checks)
SELECTION_FILE = Record(
    {
        "epochs": _POSITIVE,
        "paths": ListOf(UNIT),
        "kept": ListOf(UNIT),
        "finished": bool,
        "rounds": ListOf(
            Record({"kept": ListOf(UNIT), "rows": ListOf(_ROW), "winner": Maybe(str)})
        ),
    },
    {"null": _NULL, "per_layer": bool, "criterion": str, "seeds": _POSITIVE},
)
#: ``path_drops.json``
PATH_DROPS_FILE = Record(
    {"epochs": _POSITIVE, "rows": ListOf(_DROP_ROW)}, {"criterion": str, "seeds": _POSITIVE}
)
#: the selected network (``path_selection.pt``) or a round's best candidate
SELECTION_STATE_FILE = Record(
    {"model": MapOf(TENSOR), "log_prior": TENSOR, "kept": ListOf(UNIT)}, {"dropped": str}
)
#: ``exported.pt`` (``ella export``)
EXPORTED_FILE = Record(
    {"dropped": MapOf(ListOf(PATH)), "threshold": between(0, 1), "model": MapOf(TENSOR)},
)
#: a row of a results file's per-layer table (:func:`ella.learner.report.format_table`,
#: which formats every number of it)
_LAYER_ROW = Record(
    {
        "layer": str,
        "effective": MapOf(_NON_NEGATIVE),
        "parameters": MapOf(_COUNT),
        "prior_variance": MapOf(_NON_NEGATIVE),
    },
    {
        "relative": MapOf(FINITE),
        "total_effective": _NON_NEGATIVE,
        **{path.value: FINITE for path in PathName},  # each path's share, in %
    },
)
#: what ``ella.fit`` and ``ella train`` both write into ``results.json``; the prior
#: precisions may hold null (a precision past float's range), which nothing formats
_LEARNED = {
    "prior_precision": MapOf(NUMBER),
    "prior_variance": MapOf(_NON_NEGATIVE),
    "effective_parameters": ListOf(_LAYER_ROW),
    "effective_parameters_other": list,
    "log_marglik": ListOf(NUMBER),
    "log_marglik_epochs": ListOf(_POSITIVE),
}
#: keys written by later versions, read where present
_LATER = {
    "prior_convergence": Maybe(
        Record(
            {"rounds": _COUNT},
            {
                "last_change": NUMBER,  # null before a second round
                "converged": bool,
                "tolerance": FINITE,
                "group": Maybe(str),
                "rising": Maybe(bool),
            },
        )
    ),
    "shares_history": ListOf(MapOf(FINITE)),
    "training_collapse": Maybe(dict),
    "class_frequency_log_evidence": NUMBER,
    "eta": MapOf(FINITE),
    "eta_history": ListOf(MapOf(NUMBER)),
    "invariance": str,
    "validation_size": _COUNT,
    "processes": _POSITIVE,
}
#: ``results.json`` of ``ella train``: every version wrote the required keys
RESULTS_FILE = Record(
    {
        **_LEARNED,
        "test_accuracy": _FRACTION,
        "test_nll": _NON_NEGATIVE,
        "reported_state": one_of("final", "best_evidence"),
        "reported_epoch": _COUNT,
        "final_test_accuracy": _FRACTION,
        "final_test_nll": _NON_NEGATIVE,
        "log_marglik_reported_state": FINITE,
        "parameters": _COUNT,
        "train_size": _POSITIVE,
        "test_size": _POSITIVE,
        "epochs": _COUNT,
        "train_time_s": _NON_NEGATIVE,
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
