"""Run machinery shared by ``ella train``, ``ella ensemble`` and :func:`ella.fit`.

* :func:`epoch_generator`: every random stream of an epoch (data order,
  augmentation, transformation noise, evidence subsets) is a generator seeded
  by the run's seed, the epoch and the stream's own constant, so a resumed run
  draws exactly what the uninterrupted one drew;
* :func:`save_epoch`: the checkpoint (atomically) and the metrics file after
  every epoch;
* :func:`epoch_bar`: the progress bar over the epochs still to train.
"""

from __future__ import annotations

import enum
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ella.io import save_jsonl, save_torch
from ella.rundir import CHECKPOINT, METRICS

__all__ = ["Stream", "epoch_bar", "epoch_generator", "save_epoch"]


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


def save_epoch(out: Path | None, checkpoint: dict, metrics: list[dict]) -> None:
    """Write ``checkpoint.pt`` (atomically, plain types and tensors only) and
    ``metrics.jsonl`` into the run directory ``out``; nothing for ``out=None``."""
    if out is None:
        return
    save_torch(checkpoint, Path(out) / CHECKPOINT)
    save_jsonl(metrics, Path(out) / METRICS)


def epoch_bar(done: int, total: int, desc: str, progress: bool) -> tqdm:
    """Progress bar over the epochs still to train (``done`` of ``total`` completed)."""
    return tqdm(range(done, total), initial=done, total=total, desc=desc, disable=not progress)
