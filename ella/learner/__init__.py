"""Learned layer-wise priors and their report.

:class:`PriorLearner` gives any training loop the prior term and the evidence rounds of
an :class:`~ella.engine.recipe.EvidenceRecipe`; it composes the prior's state
(:mod:`ella.learner.prior`) and a round's data (:mod:`ella.learner.rounds`).
:mod:`ella.learner.report` turns a fitted evidence into effective parameters per layer
and path, and prints, plots and summarises them.
"""

from ella.engine.recipe import EvidenceRecipe
from ella.learner.prior import LearnedPrior
from ella.learner.prior_learner import PriorLearner
from ella.learner.report import prior_convergence, shares_history
from ella.learner.rounds import dataset_labels, forward_traces

__all__ = [
    "EvidenceRecipe",
    "LearnedPrior",
    "PriorLearner",
    "dataset_labels",
    "forward_traces",
    "prior_convergence",
    "shares_history",
]
