"""The evidence recipe: how the priors are learned, each default stated once.

:class:`EvidenceRecipe` holds every setting of the evidence rounds: the prior (its
groups, initial precision and mean), the curvature (Hessian, backend, GGN), the update
of the precisions (the round's closed-form optimum or Adam steps, and the weights'
response), and the data of a round (subset, control variate, batch size). Its field
docs are the one statement of each default: :class:`~ella.learner.PriorLearner` takes a
recipe, and the options of :class:`~ella.engine.schedule.ScheduleConfig` (``ella train``,
:func:`ella.fit`) take their defaults from its fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ella.choices import (
    GGN,
    Backend,
    HessianStructure,
    PriorMean,
    PriorMode,
    PriorUpdate,
    SubsetControl,
    WeightResponse,
)
from ella.data.subsets import balanced_subset
from ella.engine.streams import Stream, epoch_generator
from ella.errors import ConfigError
from ella.evidence_rules import check_evidence_settings, resolved_update
from ella.options import MAX_SEED, Config, option

__all__ = ["LOOP_CONTROL", "OPTIMUM_STEP", "EvidenceRecipe", "resolved_update"]

#: the control variate of a loop that records every training example's trace in its
#: training passes (``ella train``'s and :func:`ella.fit`'s): free, where ``forward``
#: costs a pass over the training set at each round
LOOP_CONTROL = SubsetControl.TRAINING

#: the fraction of the way to a round's optimum that a round moves the log precisions
#: where no step is given: damps the fixed-point iteration of training and rounds
OPTIMUM_STEP = 0.5


@dataclass(frozen=True)
class EvidenceRecipe(Config):
    """How the evidence rounds learn the prior precisions.

    A round draws a fresh class-balanced subset of ``subset_size`` training examples (a
    function of ``seed`` and the epoch; all of them where ``subset_size`` is ``None`` or
    at least ``N``), fits the GGN on it in batches of ``batch_size``, scales its
    likelihood to ``N`` and its curvature by the control variate of ``control``
    (:func:`ella.marglik.control.curvature_ratio`), and moves the log precisions by
    ``update`` (:meth:`ella.learner.PriorLearner.hyper_steps`).

    Attributes:
        structure: which tensors share a precision: ``layer_path`` (one per relaxed
            layer and path, one per other module), ``tensor`` or ``scalar``.
        prior_precision: the initial precision ``delta`` of every group. Small: a
            strong initial prior erases small weights before they learn.
        mean: where the prior is centred: ``zero`` or ``init`` (the trainable
            parameters when the learner is made).
        hessian: ``kron``, ``diag`` or ``full`` GGN structure.
        backend: the curvature backend; ``None``: ``native`` for ``kron``, ``asdl``
            otherwise.
        ggn: ``exact``, ``mc``, ``stratified`` (native backend) or ``auto``:
            ``stratified`` with the native backend, ``mc`` with a stock one, ``exact``
            for regression.
        update: ``optimum`` (``step`` of the way to the round's closed-form maximum;
            Kronecker Hessian), ``adam`` (``n_hypersteps`` Adam steps at rate ``lr``) or
            ``auto`` (``optimum`` where it applies, :func:`resolved_update`).
        step: the fraction of the way to the optimum, in (0, 1]; ``None``:
            :data:`OPTIMUM_STEP` with the optimum, 1 with Adam (which does not use it).
        lr: Adam's learning rate on the log precisions.
        n_hypersteps: Adam's steps per round.
        response: what the weights do when a round moves the precisions: ``none`` (left
            to the training steps) or ``laplace`` (to the new prior's MAP as the round's
            GGN predicts; Kronecker Hessian).
        subset_size: ``M``, the examples of one round, or ``None`` for all.
        control: the subset's control variate: ``none``, ``forward`` (a pass without
            gradients over all ``N`` examples at the round: needs nothing from the
            caller's loop) or ``training`` (traces recorded in the training passes and
            passed to the round; :data:`LOOP_CONTROL`, ``ella train``'s and
            :func:`ella.fit`'s).
        batch_size: batch size of the evidence fit and of the forward pass.
        seed: the seed of the rounds' subsets (with the epoch, as every stream of a run).
    """

    structure: PriorMode = PriorMode.LAYER_PATH
    prior_precision: float = 0.01
    mean: PriorMean = PriorMean.ZERO
    hessian: HessianStructure = HessianStructure.KRON
    backend: Backend | None = None
    ggn: GGN = GGN.AUTO
    update: PriorUpdate = PriorUpdate.AUTO
    step: float | None = None
    lr: float = 0.1
    n_hypersteps: int = option(20, minimum=0)
    response: WeightResponse = WeightResponse.NONE
    subset_size: int | None = option(500, minimum=1)
    control: SubsetControl = SubsetControl.FORWARD
    batch_size: int = option(500, minimum=1)
    seed: int = option(0, minimum=0, maximum=MAX_SEED)

    def check(self) -> None:
        """The evidence's rules (:func:`~ella.evidence_rules.evidence_problems`: the closed
        form and the weights' response need the Kronecker Hessian, a step the optimum, the
        native backend and the stratified GGN go together) and the positive and (0, 1]
        ranges; choices, finiteness and the integer ranges are
        :class:`~ella.options.Config`'s."""
        for name in ("prior_precision", "lr"):  # finite: Config's check
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.step is not None and not (0 < self.step <= 1):
            raise ConfigError(f"step must be in (0, 1], got {self.step}")
        check_evidence_settings(
            hessian=self.hessian,
            backend=self.backend,
            ggn=self.ggn,
            update=self.update,
            step=self.step,
            response=self.response,
        )

    @classmethod
    def from_config(cls, config) -> EvidenceRecipe:
        """The recipe of a :class:`~ella.engine.schedule.ScheduleConfig`: its options
        under their recipe names, the update rule in force (``config.prior_update_rule()``)
        and its step where the rule is the optimum."""
        update = config.prior_update_rule()
        return cls(
            structure=config.prior_structure,
            prior_precision=config.prior_precision,
            mean=config.prior_mean,
            hessian=config.hessian,
            backend=config.backend,
            ggn=config.ggn,
            update=update,
            # the damping of the optimum; Adam's rounds have none (auto may resolve to adam)
            step=config.prior_step if update == PriorUpdate.OPTIMUM else None,
            lr=config.lr_hyp,
            n_hypersteps=config.n_hypersteps,
            response=config.weight_response,
            subset_size=config.marglik_subset_size,
            control=config.subset_control,
            batch_size=config.marglik_batch_size,
            seed=config.seed,
        )

    def replace(self, **changes) -> EvidenceRecipe:
        """This recipe with the fields ``changes`` names set (checked as a new recipe)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(
                f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a setting of "
                f"the evidence recipe; its fields are "
                f"{', '.join(f.name for f in dataclasses.fields(self))}"
            )
        return dataclasses.replace(self, **changes)

    def update_rule(self) -> PriorUpdate:
        """The update in force (:func:`resolved_update`)."""
        return resolved_update(self.update, self.hessian)

    def step_in_force(self) -> float:
        """The step towards the optimum: ``step``, or its default for the rule in force."""
        if self.step is not None:
            return float(self.step)
        return OPTIMUM_STEP if self.update_rule() == PriorUpdate.OPTIMUM else 1.0

    def backend_in_force(self) -> Backend:
        """The curvature backend: ``backend``, or the one for ``hessian``."""
        return self.backend or Backend.default_for(self.hessian)

    def resolved(self) -> EvidenceRecipe:
        """This recipe with ``update``, ``step`` and ``backend`` as they are in force."""
        return dataclasses.replace(
            self,
            update=self.update_rule(),
            step=self.step_in_force(),
            backend=self.backend_in_force(),
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
