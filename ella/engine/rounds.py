"""The evidence rounds' policy: on which examples a round fits the evidence, and how.

:class:`EvidenceRounds` is the one statement of each round default (the examples of a
round, its control variate, its batch size, Adam's steps on the precisions): the
options of :class:`~ella.engine.schedule.ScheduleConfig` (``ella train``, :func:`ella.fit`)
take their defaults from its fields, and :class:`~ella.learner.PriorLearner` takes it
whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ella.choices import SubsetControl
from ella.data.subsets import balanced_subset
from ella.engine.streams import Stream, epoch_generator
from ella.errors import ConfigError

__all__ = ["LOOP_CONTROL", "EvidenceRounds"]

#: the control variate of a loop that records every training example's trace in its
#: training passes (``ella train``'s and :func:`ella.fit`'s): free, where ``forward``
#: costs a pass over the training set at each round
LOOP_CONTROL = SubsetControl.TRAINING


@dataclass(frozen=True)
class EvidenceRounds:
    """What an evidence round fits the evidence on (the round policy of
    :meth:`ella.learner.PriorLearner.evidence_round`): by default a class-balanced subset
    with the ``forward`` control variate, which needs nothing from the caller's training
    loop (``ella train`` and :func:`ella.fit` pass :data:`LOOP_CONTROL`).

    A round draws a fresh class-balanced subset of ``subset_size`` training examples (a
    function of ``seed`` and the epoch; all of them where ``subset_size`` is ``None`` or
    at least ``N``), fits the GGN on it in batches of ``batch_size``, scales its
    likelihood to ``N`` and its curvature by the control variate of ``control``
    (:func:`ella.marglik.control.curvature_ratio`), and moves the precisions
    (:meth:`ella.learner.PriorLearner.hyper_steps`; ``n_hypersteps`` Adam steps where the
    update is Adam's).

    Attributes:
        subset_size: ``M``, the examples of one round, or ``None`` for all.
        control: ``none``, ``forward`` (a pass without gradients over all ``N`` examples
            at the round) or ``training`` (traces the caller recorded in its training
            passes, passed to the round).
        batch_size: batch size of the evidence fit (and of the forward pass).
        n_hypersteps: Adam steps on the log precisions per round (Adam's update only).
        seed: the seed of the rounds' subsets (with the epoch, as every stream of a run).
    """

    subset_size: int | None = 500
    control: SubsetControl = SubsetControl.FORWARD
    batch_size: int = 500
    n_hypersteps: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "control", SubsetControl.parse(self.control, "control"))
        if self.subset_size is not None and not (
            isinstance(self.subset_size, int) and self.subset_size >= 1
        ):
            raise ConfigError(f"subset_size must be a positive int or None, got {self.subset_size}")
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ConfigError(f"batch_size must be a positive int, got {self.batch_size}")
        if not (isinstance(self.n_hypersteps, int) and self.n_hypersteps >= 0):
            raise ConfigError(f"n_hypersteps must be an int >= 0, got {self.n_hypersteps}")

    @classmethod
    def from_config(cls, config) -> EvidenceRounds:
        """The rounds of a :class:`~ella.engine.schedule.ScheduleConfig`
        (``marglik_subset_size``, ``subset_control``, ``marglik_batch_size``,
        ``n_hypersteps``, ``seed``)."""
        return cls(
            subset_size=config.marglik_subset_size,
            control=config.subset_control,
            batch_size=config.marglik_batch_size,
            n_hypersteps=config.n_hypersteps,
            seed=config.seed,
        )

    def draws_subset(self, n: int) -> bool:
        """Whether a round on ``n`` examples fits a subset of them (``subset_size < n``)."""
        return self.subset_size is not None and self.subset_size < n

    def subset(self, labels: torch.Tensor | None, n: int, epoch: int) -> torch.Tensor | None:
        """The (M,) sorted indices of the round after (1-based) ``epoch``, class-balanced
        by ``labels`` (uniform where they are ``None``: regression); ``None``: all ``n``."""
        m = self.subset_size
        if not self.draws_subset(n):
            return None
        generator = epoch_generator(self.seed, epoch, Stream.EVIDENCE_SUBSET)
        if labels is None:
            return torch.randperm(n, generator=generator)[:m].sort().values
        return balanced_subset(labels, m, generator)
