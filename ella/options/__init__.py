"""Configuration dataclasses whose options are typed once and checked when they are built.

A configuration (``TrainConfig``, ``EnsembleConfig``) is a dataclass deriving
from :class:`Config`. Its fields say everything the command line and the
checks need:

* a choice-valued option has a :class:`Choice` enum as its type; a string is
  turned into the enum member when the config is built, and an unknown value
  is refused with the list of choices (the command line passes the same list
  to argparse as ``choices=``);
* a numeric option carries its valid range in the field's metadata
  (:func:`option`); every float must be finite;
* options that do not change what a run computes (where the data files are,
  the device, progress bars) are marked ``defines_run=False``: a resumed run
  may change them, and the checkpoint check ignores them.

``Config.__post_init__`` runs the checks, so ``TrainConfig(lr=-1)`` raises a
:class:`~ella.errors.ConfigError` before any data is read or model built.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from ella.errors import ConfigError
from ella.options.migrations import missing_keys, upgrade

__all__ = ["MAX_SEED", "Choice", "Config", "choice_type", "option"]

#: the largest seed: every random stream's seed, ``seed * stream + epoch``
#: (:func:`ella.engine.streams.epoch_seed`), then fits torch's 64-bit generators
MAX_SEED = 2**32 - 1


class Choice(str, enum.Enum):
    """A string-valued option with a fixed set of values.

    Members compare equal to their strings (``Backend.ASDL == "asdl"``) and
    print as them, so they can be used wherever the plain string was.
    """

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The strings of the choice's members, in their order."""
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls, value: Any, what: str | None = None) -> Choice:
        """The member for ``value`` (a member or its string), or a ConfigError listing them."""
        try:
            return cls(value)
        except ValueError:
            name = what or cls.__name__
            raise ConfigError(
                f"unknown {name} {value!r}; choose from {', '.join(cls.values())}"
            ) from None


def option(
    default: Any = dataclasses.MISSING,
    *,
    minimum: float | None = None,
    greater_than: float | None = None,
    maximum: float | None = None,
    defines_run: bool = True,
    nargs: str | None = None,
    path: bool = False,
) -> Any:
    """A configuration field with its checks.

    Args:
        default: the default value.
        minimum: smallest valid value (inclusive).
        greater_than: the value must be larger than this.
        maximum: largest valid value (inclusive).
        defines_run: False for options that do not change the results (a resumed
            run may change them).
        nargs: argparse ``nargs`` for tuple fields (default ``"+"``).
        path: a file-system path, stored absolute (so that a run can be resumed or
            reported from another working directory).
    """
    metadata = {
        "minimum": minimum,
        "greater_than": greater_than,
        "maximum": maximum,
        "defines_run": defines_run,
        "path": path,
    }
    if nargs is not None:
        metadata["nargs"] = nargs
    return dataclasses.field(default=default, metadata=metadata)


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(hint, False)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def choice_type(hint: Any) -> type[Choice] | None:
    """The :class:`Choice` enum of a field's type hint (``C``, ``C | None``,
    ``tuple[C, ...]``), or None."""
    hint, _ = _unwrap_optional(hint)
    if typing.get_origin(hint) is tuple:
        hint = typing.get_args(hint)[0]
    if isinstance(hint, type) and issubclass(hint, Choice):
        return hint
    return None


class Config:
    """Base of the configuration dataclasses: typed options, checks, JSON round trip.

    Subclasses are ``@dataclass`` classes; they may add cross-field checks in
    :meth:`check`. ``to_dict`` gives plain JSON types (enums become strings,
    tuples lists); ``from_dict`` refuses unknown keys (a run directory written
    by another version of ella says so).
    """

    #: what makes and resumes runs of this configuration, for messages: a command
    #: (``"ella train"``) or a function (``"ella.fit"``); None for a base class
    COMMAND: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def maker_of(cls, d: dict) -> type[Config] | None:
        """The configuration class, among those of a command (``COMMAND``) that are
        imported, whose options hold every key of ``d`` (``cls`` if it does; else the one
        with the fewest options ``d`` lacks), or None: which command wrote a saved
        configuration."""
        found: list[type[Config]] = []
        todo = [Config]
        while todo:
            klass = todo.pop()
            todo.extend(klass.__subclasses__())
            if klass.COMMAND is not None and klass not in found:
                found.append(klass)
        names = {klass: {f.name for f in dataclasses.fields(klass)} for klass in found}
        fits = [klass for klass in found if set(d) <= names[klass]]
        if cls in fits:
            return cls
        return min(fits, key=lambda klass: len(names[klass] - set(d)), default=None)

    def check_given(self, given: Iterable[str]) -> None:
        """Refuse options the user gave (``given``: their names) that this configuration
        would ignore, naming what makes them count. A default is never refused: only the
        caller knows what was typed (the command line's options, :func:`ella.fit`'s
        keywords). Nothing by default."""

    # ------------------------------------------------------------------ fields
    @classmethod
    def hints(cls) -> dict[str, Any]:
        """The resolved type of every field (annotations evaluated)."""
        return typing.get_type_hints(cls)

    @classmethod
    def run_fields(cls) -> tuple[str, ...]:
        """Names of the options that define a run (all but data paths, device, progress)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("defines_run", True))

    # ------------------------------------------------------------------ checks
    def _normalise(self) -> None:
        """Strings of choice fields become enum members, lists tuples, paths absolute."""
        hints = self.hints()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            choice = choice_type(hints[f.name])
            what = f.name.replace("_", "-")
            if isinstance(value, list):
                value = tuple(value)
            if choice is not None and value is not None:
                if isinstance(value, tuple):
                    value = tuple(choice.parse(v, what) for v in value)
                else:
                    value = choice.parse(value, what)
            if f.metadata.get("path") and value is not None:
                if not isinstance(value, (str, os.PathLike)):
                    raise ConfigError(
                        f"{what} must be a path (a string), got {type(value).__name__} {value!r}"
                    )
                value = os.path.abspath(Path(value).expanduser())
            object.__setattr__(self, f.name, value)

    def _check_numbers(self) -> None:
        hints = self.hints()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind, optional = _unwrap_optional(hints[f.name])
            if value is None:
                if not optional:
                    raise ConfigError(f"{f.name} must be set")
                continue
            if kind in (int, float):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ConfigError(f"{f.name} must be a number, got {value!r}")
                if kind is int and not isinstance(value, int):
                    if not float(value).is_integer():
                        raise ConfigError(f"{f.name} must be an integer, got {value!r}")
                    object.__setattr__(self, f.name, int(value))
                if not math.isfinite(value):
                    raise ConfigError(f"{f.name} must be a finite number, got {value}")
                meta = f.metadata
                if meta.get("minimum") is not None and value < meta["minimum"]:
                    raise ConfigError(f"{f.name} must be at least {meta['minimum']}, got {value}")
                if meta.get("greater_than") is not None and not value > meta["greater_than"]:
                    raise ConfigError(
                        f"{f.name} must be greater than {meta['greater_than']}, got {value}"
                    )
                if meta.get("maximum") is not None and value > meta["maximum"]:
                    raise ConfigError(f"{f.name} must be at most {meta['maximum']}, got {value}")
            elif kind is bool and not isinstance(value, bool):
                raise ConfigError(f"{f.name} must be true or false, got {value!r}")
            elif kind is str and not isinstance(value, str):
                raise ConfigError(f"{f.name} must be a string, got {value!r}")
            elif typing.get_origin(kind) is tuple and not isinstance(value, tuple):
                raise ConfigError(f"{f.name} must be a list, got {value!r}")

    def check(self) -> None:
        """Cross-field checks of a subclass (raise ConfigError)."""

    def validate(self) -> None:
        """Raise :class:`~ella.errors.ConfigError` for settings that cannot work, naming them."""
        self._normalise()
        self._check_numbers()
        self.check()

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """Every field as plain JSON values: members as their strings, tuples as lists."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = [v.value if isinstance(v, Choice) else v for v in value]
            elif isinstance(value, Choice):
                value = value.value
            out[f.name] = value
        return out

    def run_dict(self) -> dict:
        """:meth:`to_dict` restricted to the options that define the run."""
        d = self.to_dict()
        return {k: d[k] for k in self.run_fields()}

    @classmethod
    def from_dict(cls, d: dict):
        """The configuration a dict holds (``config.json``), options it lacks read as they
        meant when it was written (:func:`ella.options.migrations.upgrade`); unknown keys, missing
        keys that every version wrote (:func:`ella.options.migrations.missing_keys`), or another
        command's configuration, are refused with a :class:`~ella.errors.ConfigError`."""
        if not isinstance(d, dict):
            raise ConfigError(f"a configuration must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            maker = cls.maker_of(d)
            if maker is not None and maker is not cls and cls.COMMAND is not None:
                raise ConfigError(
                    f"it is a configuration of {maker.COMMAND}, not of {cls.COMMAND} "
                    f"({len(unknown)} of its keys are not options of {cls.COMMAND})"
                )
            raise ConfigError(f"unknown configuration keys: {sorted(unknown)}")
        missing = missing_keys(d, cls)
        if missing:
            raise ConfigError(
                f"it lacks {missing}, which every version of ella writes: it was cut or "
                "edited; restore it from a copy (ella rebuilds a run from it, so no default "
                "can stand in)"
            )
        return cls(**upgrade(d, cls))
