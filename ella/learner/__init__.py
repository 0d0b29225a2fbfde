"""Learned layer-wise priors and their report.

:class:`PriorLearner` gives any training loop the prior term and the evidence rounds;
:mod:`ella.learner.report` turns a fitted evidence into effective parameters per layer
and path and prints, plots and summarises them.
"""

from ella.engine.rounds import EvidenceRounds
from ella.learner.prior_learner import (
    PriorLearner,
    dataset_labels,
    forward_traces,
    prior_convergence,
    shares_history,
)

__all__ = [
    "EvidenceRounds",
    "PriorLearner",
    "dataset_labels",
    "forward_traces",
    "prior_convergence",
    "shares_history",
]
