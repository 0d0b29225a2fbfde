"""The random streams of a run: one seed per (run seed, epoch, purpose).

Every random draw of a run (data order, augmentation, the evidence rounds' subsets, ...)
comes from a generator of its own, seeded from the run's seed, the epoch and the
stream, so that a resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import enum

import torch

__all__ = ["Stream", "epoch_generator", "epoch_seed"]


class Stream(enum.IntEnum):
    """The random streams of an epoch, each with its own seed multiplier (distinct primes)."""

    DATA_ORDER = 1_000_003
    AUGMENTATION = 7_919
    TRANSFORMATIONS = 15_485_863
    EVIDENCE_SUBSET = 31_337
    INVARIANCE_EVIDENCE = 104_729


def epoch_seed(seed: int, epoch: int, stream: Stream) -> int:
    """``seed * stream + epoch``: the seed of ``stream`` in ``epoch`` of a run."""
    return seed * int(stream) + epoch


def epoch_generator(seed: int, epoch: int, stream: Stream) -> torch.Generator:
    """A CPU generator for ``stream`` in ``epoch`` (see :func:`epoch_seed`)."""
    return torch.Generator().manual_seed(epoch_seed(seed, epoch, stream))
