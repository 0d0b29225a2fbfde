"""How a results row's answer is read: whether the evidence's choice of paths follows the
data's symmetry (one rule per pair of data sets), that answer over the seeds, and the paths
of an answer as the tables write them. ``benchmarks.claims`` writes the guide's reliability
table by these rules, and ``experiments.reliability`` gives its verdicts by them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def follows_rotation(upright: Iterable[str], rotated: Iterable[str]) -> bool:
    """The rule for MNIST against rotated MNIST: the evidence follows the data's symmetry
    where it keeps CONV on the upright digits and drops it on the rotated ones, keeping
    GCONV there (``upright``, ``rotated``: the paths kept, or the winner of two)."""
    upright, rotated = set(upright), set(rotated)
    return "conv" in upright and "conv" not in rotated and "gconv" in rotated


def follows_position(digit: Iterable[str], quadrant: Iterable[str]) -> bool:
    """The rule for Table 1's tasks: FC, which sees where a digit is, kept on (digit,
    quadrant), whose label needs the position, and dropped on digit alone."""
    return "fc" in set(quadrant) and "fc" not in set(digit)


def over_seeds(follows: Sequence[bool]) -> str:
    """A row's answer from each seed's: "yes, both seeds", "no, at either seed", or how many."""
    n, k = len(follows), sum(follows)
    if k == n:
        return "yes, both seeds" if n == 2 else f"yes, all {n} seeds"
    if k == 0:
        return "no, at either seed" if n == 2 else f"no, at none of {n} seeds"
    return f"mixed: at {k} seed{'s' if k > 1 else ''} of {n}"


def as_paths(kept: str | Sequence[str]) -> list[str]:
    """The paths of a results row's answer: a list of kept paths, or one winner's name."""
    return [kept] if isinstance(kept, str) else list(kept)


def paths_upper(kept: str | Sequence[str]) -> str:
    """``["conv", "gconv"]`` (or ``"gconv"``) as the tables write it: ``CONV+GCONV``."""
    return "+".join(as_paths(kept)).upper()


__all__ = ["as_paths", "follows_position", "follows_rotation", "over_seeds", "paths_upper"]
