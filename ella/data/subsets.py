"""Random subsets of a training set, class-balanced where the labels allow."""

from __future__ import annotations

import torch

__all__ = ["balanced_subset"]


def balanced_subset(labels: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """Indices of ``size`` distinct examples drawn at random, as class-balanced as possible.

    Every class gets ``size // K`` examples (all of them if it has fewer); the
    remaining places are filled uniformly from the examples not yet drawn.

    Args:
        labels: (N,) integer labels.
        size: ``M``, at most ``N``.
        generator: the source of randomness (a subset is a function of its state).

    Returns:
        (M,) long tensor of sorted indices.
    """
    n = len(labels)
    if not 0 < size <= n:
        raise ValueError(f"subset size must be between 1 and {n}, got {size}")
    classes = torch.unique(labels)
    share = size // len(classes)
    chosen = []
    for c in classes:
        members = torch.nonzero(labels == c).squeeze(1)
        order = torch.randperm(len(members), generator=generator)
        chosen.append(members[order[:share]])
    picked = torch.cat(chosen)
    if len(picked) < size:
        rest = torch.ones(n, dtype=torch.bool)
        rest[picked] = False
        pool = torch.nonzero(rest).squeeze(1)
        extra = pool[torch.randperm(len(pool), generator=generator)[: size - len(picked)]]
        picked = torch.cat([picked, extra])
    return picked.sort().values
