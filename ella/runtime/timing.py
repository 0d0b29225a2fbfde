"""Wall-clock sections of ella's own work, for the studies that ask where time goes.

A function marked ``@section("label")`` adds its wall seconds to ``seconds[label]`` while a
:func:`sections` block collects, and costs one check otherwise. The marked functions are
the parts of an evidence round (``experiments/round_parts.py`` reads them): timers rather
than a profiler, whose per-call overhead moves Python-heavy parts.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["SECTIONS", "section", "sections"]

F = TypeVar("F", bound=Callable)

#: every label a marked function adds to, in the order they are marked
SECTIONS: list[str] = []
_collecting: list[dict[str, float]] = []


def section(label: str) -> Callable[[F], F]:
    """Mark a function as the section ``label`` (a decorator)."""
    if label not in SECTIONS:
        SECTIONS.append(label)

    def mark(function: F) -> F:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            if not _collecting:
                return function(*args, **kwargs)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                _collecting[-1][label] += time.perf_counter() - start

        return timed  # type: ignore[return-value]

    return mark


@contextmanager
def sections() -> Iterator[dict[str, float]]:
    """Collect the marked sections' wall seconds, ``{label: seconds}``, inside the block."""
    seconds: dict[str, float] = defaultdict(float)
    _collecting.append(seconds)
    try:
        yield seconds
    finally:
        _collecting.pop()
