"""The kinds of path a relaxed layer holds, in one registry, and the one check of a choice.

Each path class states its own facts (:class:`~ella.nn.paths.Path`'s class attributes: its
``kind``, the paths it ``needs`` beside it or ``excludes``, whether it ``needs_group``,
the learning-rate rules that apply to it) and builds itself from a layer's options
(:meth:`~ella.nn.paths.Path.for_layer`). From the registry follow a layer's factory
(:class:`~ella.nn.RelaxedLayer`), the names (:data:`ALL_PATH_NAMES`), the columns of a
table of shares (:func:`path_columns`) and the legality of a choice of paths
(:func:`path_problems`), which the layer and the command line both ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ella.nn.paths import ConvPath, FCPath, GConvPath, Path, ResidualConvPath

__all__ = [
    "ALL_PATH_NAMES",
    "PATH_KINDS",
    "PATH_NAMES",
    "PathProblem",
    "check_path_names",
    "check_zero_init",
    "declared_options",
    "in_layer_order",
    "known_path_names",
    "path_columns",
    "path_problems",
    "zero_init_problem",
]

#: Every kind of path, by name, in the order a layer holds (and sums) them.
PATH_KINDS: dict[str, type[Path]] = {
    kind.kind: kind for kind in (FCPath, ConvPath, GConvPath, ResidualConvPath)
}
#: The paper's paths, in the order a layer holds them: a layer's default.
PATH_NAMES: tuple[str, ...] = ("fc", "conv", "gconv")
#: Every path name, in the order a layer holds them: the paper's, then the residual (the
#: package reads :data:`PATH_KINDS`, which a new kind joins).
ALL_PATH_NAMES: tuple[str, ...] = tuple(PATH_KINDS)


def declared_options() -> dict[str, Any]:
    """The options kinds of path declare for themselves
    (:attr:`~ella.nn.paths.Path.own_options`), name -> default, over :data:`PATH_KINDS`.

    Raises:
        ValueError: two kinds declaring one name with different defaults.
    """
    declared: dict[str, Any] = {}
    for kind in PATH_KINDS.values():
        for name, default in kind.own_options.items():
            if name in declared and declared[name] != default:
                raise ValueError(
                    f"the kinds of path declare option {name!r} with defaults "
                    f"{declared[name]!r} and {default!r}; give one default or two names"
                )
            declared[name] = default
    return declared


def path_columns(present: Iterable[str]) -> tuple[str, ...]:
    """The paths a table of shares shows: the paper's three always, and any other kind
    where ``present`` names it."""
    present = set(present)
    return PATH_NAMES + tuple(p for p in PATH_KINDS if p not in PATH_NAMES and p in present)


def in_layer_order(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` in the order a layer holds them (:data:`PATH_KINDS`')."""
    paths = set(paths)
    return tuple(p for p in PATH_KINDS if p in paths)


@dataclass(frozen=True)
class PathProblem:
    """Why a choice of paths cannot be a layer's, and the nearest choice that can.

    Attributes:
        reason: the rule broken, in words that name no option (the caller names them).
        fix: the paths to use instead; ``None`` where the fix is a group, not paths.
    """

    reason: str
    fix: tuple[str, ...] | None


def path_problems(paths: Sequence[str], trivial_group: bool = False) -> list[PathProblem]:
    """Every rule of the path kinds that ``paths`` (known names) breaks: a name given twice,
    a kind that ``excludes`` another present, a kind whose ``needs`` are absent, a kind that
    ``needs_group`` on the trivial group. Empty where the choice is legal."""
    problems = []
    repeated = sorted({p for p in paths if list(paths).count(p) > 1})
    if repeated:
        problems.append(
            PathProblem(f"names {', '.join(repeated)} more than once", in_layer_order(paths))
        )
    chosen = set(paths)
    for name in in_layer_order(chosen):
        kind = PATH_KINDS[name]
        for other, reason in kind.excludes.items():
            if other in chosen:
                fix = (chosen - {other}) | set(kind.needs)
                problems.append(PathProblem(reason, in_layer_order(fix)))
        for other, reason in kind.needs.items():
            if other not in chosen:
                fix = (chosen - set(kind.excludes)) | {other}
                problems.append(PathProblem(reason, in_layer_order(fix)))
        if kind.needs_group and trivial_group:
            problems.append(PathProblem(kind.needs_group, None))
    return problems


def known_path_names(paths: Sequence[str], what: str = "paths") -> tuple[str, ...]:
    """``paths`` as a tuple of known names, none twice (ValueError naming ``what``)."""
    paths = (paths,) if isinstance(paths, str) else tuple(paths)
    unknown = [p for p in paths if p not in PATH_KINDS]
    if unknown:
        raise ValueError(f"unknown path name(s) {unknown}; choose from {tuple(PATH_KINDS)}")
    if len(set(paths)) != len(paths):
        raise ValueError(f"{what}={paths}: path names must not repeat")
    return paths


def check_path_names(paths: Sequence[str]) -> tuple[str, ...]:
    """Validate and normalise a layer's path names (ValueError naming the fix as
    ``paths=...``; :func:`path_problems`); returns them in the order a layer holds them."""
    paths = known_path_names(paths)
    if not paths:
        raise ValueError(f"a layer needs at least one path; choose from {tuple(PATH_KINDS)}")
    for problem in path_problems(paths):
        if problem.fix is not None:
            raise ValueError(f"paths={paths}: {problem.reason}; use paths={problem.fix}")
    return in_layer_order(paths)


def zero_init_problem(zero_init: Sequence[str], paths: Sequence[str]) -> str | None:
    """The rule of starting paths at zero: a mixed layer must keep one path at its random
    start, or it would output zero and nothing before it would get a gradient. Its reason
    where ``zero_init`` names every one of ``paths``, else ``None``."""
    if len(set(paths)) > 1 and set(paths) <= set(zero_init):
        return (
            "it starts every path of a mixed layer at zero, so the layer would output zero "
            "and nothing before it would get a gradient; leave at least one path out"
        )
    return None


def check_zero_init(zero_init: Sequence[str], paths: Sequence[str]) -> tuple[str, ...]:
    """The paths of a layer with ``paths`` that start at zero under ``zero_init``.

    Names of paths the layer lacks are skipped, and a single-path layer never starts
    at zero (it is the whole layer), so one setting serves FC-only, CONV-only and mixed
    networks alike. A mixed layer must keep at least one path at its random start
    (:func:`zero_init_problem`).
    """
    names = known_path_names(zero_init, "zero_init")
    if len(paths) < 2:
        return ()
    if reason := zero_init_problem(names, paths):
        raise ValueError(f"zero_init={names} with paths={tuple(paths)}: {reason}")
    return tuple(n for n in names if n in paths)
