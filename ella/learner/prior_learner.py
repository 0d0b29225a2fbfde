"""Learned layer-wise priors for your own training loop.

:class:`PriorLearner` owns the prior precisions of a model's parameter groups
(one per path of every :class:`~ella.nn.RelaxedLayer`, one per other module,
see :class:`~ella.marglik.PriorStructure`) and learns them by the linearised
Laplace evidence, when and on what data the caller decides, as an
:class:`~ella.engine.recipe.EvidenceRecipe` says. It is what ``ella train`` and
:func:`ella.fit` use inside their loop::

    priors = PriorLearner(model, n_data=len(train_set))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, epochs + 1):
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y) + priors.penalty()
            optimiser.zero_grad(); loss.backward(); optimiser.step()
        if epoch >= burn_in:
            priors.evidence_round(train_set, epoch)  # fit the GGN, move the precisions
    print(format_table(priors.report()))

It composes three parts: the prior's state (:class:`~ella.learner.prior.LearnedPrior`:
the log precisions and the MAP term), the round's data (:mod:`ella.learner.rounds`:
subset, control variate, batches) and the evidence call (:meth:`PriorLearner.fit`, a
:class:`~ella.marglik.LaplaceEvidence` of the model, and :meth:`PriorLearner.hyper_steps`,
the update of the precisions).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from ella.choices import GGN, Backend, HessianStructure, Likelihood, PriorUpdate, WeightResponse
from ella.distributed import World, current
from ella.engine.recipe import EvidenceRecipe
from ella.errors import ConfigError, TrainingDivergedError
from ella.evidence_rules import check_evidence_settings
from ella.learner.prior import LearnedPrior
from ella.learner.report import effective_parameter_report, mean_shares
from ella.learner.rounds import Batches, control_ratio, evidence_loader, round_subset
from ella.marglik import LaplaceEvidence, PriorStructure, check_supported, laplace_response
from ella.marglik.backends import check_n_data
from ella.marglik.kron_terms import at_bound
from ella.runtime.timing import section

__all__ = ["PriorLearner"]


class PriorLearner:
    """Prior precisions of a model's parameter groups, learned by the Laplace evidence.

    Args:
        model: the network whose priors are learned (ella's relaxed layers and/or
            ``nn.Linear``/``nn.Conv2d``; every trainable parameter belongs to one group).
        n_data: size ``N`` of the training set (the penalty's and the evidence's scale):
            an ``int`` from 1 to :data:`~ella.marglik.backends.MAX_N_DATA` (``10**12``;
            floats and bools are refused).
        recipe: how the precisions are learned (an
            :class:`~ella.engine.recipe.EvidenceRecipe`, whose fields state every
            default). Defaults to ``EvidenceRecipe()``.
        likelihood: ``classification`` or ``regression``.
        sigma_noise: observation noise of the regression likelihood.
        data_parallel: whether the evidence fit sums its Kronecker factors over the
            processes of a ``torch.distributed`` job (each process passing its shard of
            the data, as with a ``DistributedSampler``; see :mod:`ella.distributed`).
            Default ``None``: whenever torch's default process group has more than one
            process. The precisions are then checked to be identical on every process.
        **changes: fields of the recipe to change, e.g. ``prior_precision=1.0,
            ggn="exact", update="adam"`` (:meth:`EvidenceRecipe.replace`).

    Attributes:
        recipe: the recipe in force: the rounds read it when they run (change it with
            ``learner.recipe = learner.recipe.replace(...)``); ``hessian``, ``backend``,
            ``ggn``, ``update`` and ``step`` are its settings, resolved.
        state: the :class:`~ella.learner.prior.LearnedPrior` (log precisions, mean,
            penalty); ``prior``, ``log_prior``, ``optimizer``, ``prior_mean`` and the
            penalty methods are its.
        evidence: the :class:`~ella.marglik.LaplaceEvidence` of the last fit.
        history: log evidence after each evidence step.
        gaps: after each evidence step, the largest ``|log delta - log delta*|`` over the
            groups, ``delta*`` the round's optimum (how far the step left the precisions
            from the maximum of that round's evidence; Kronecker Hessian only, else NaN).
    """

    def __init__(
        self,
        model: nn.Module,
        n_data: int,
        recipe: EvidenceRecipe | None = None,
        *,
        likelihood: Likelihood | str = Likelihood.CLASSIFICATION,
        sigma_noise: float = 1.0,
        data_parallel: bool | None = None,
        **changes: object,
    ):
        n_data = check_n_data(n_data)
        recipe = (recipe or EvidenceRecipe()).replace(**changes)
        self.recipe = recipe
        self.model = model
        self.n_data = n_data
        self.likelihood = Likelihood.parse(likelihood, "likelihood")
        self.check_rules()
        self.sigma_noise = sigma_noise
        self.data_parallel = data_parallel
        if recipe.hessian == HessianStructure.KRON:
            check_supported(model)  # before any training step, not at the first round
        self.state = LearnedPrior(
            model, n_data, recipe.structure, recipe.prior_precision, recipe.mean, recipe.lr
        )
        #: the control variate's factor on the last round's curvature (1: none)
        self.last_curvature_ratio = 1.0
        self.evidence: LaplaceEvidence | None = None
        self.history: list[float] = []
        self.gaps: list[float] = []

    @classmethod
    def from_config(cls, model: nn.Module, n_data: int, config, **options) -> PriorLearner:
        """A learner with the evidence recipe of a
        :class:`~ella.engine.schedule.ScheduleConfig`
        (:meth:`~ella.engine.recipe.EvidenceRecipe.from_config`); ``options`` adds
        ``likelihood``, ``sigma_noise`` and ``data_parallel``."""
        return cls(model, n_data, EvidenceRecipe.from_config(config), **options)

    # ------------------------------------------------------------------ the recipe in force
    @property
    def hessian(self) -> HessianStructure:
        """The GGN's structure (the recipe's)."""
        return self.recipe.hessian

    @property
    def backend(self) -> Backend | None:
        """The curvature backend the recipe names (``None``: the one for the Hessian)."""
        return self.recipe.backend

    @property
    def ggn(self) -> GGN:
        """The recipe's GGN with ``auto`` resolved: ``exact`` for regression (a Gaussian's
        GGN is one pass), else for the backend in force."""
        if self.recipe.ggn == GGN.AUTO and self.likelihood == Likelihood.REGRESSION:
            return GGN.EXACT
        return self.recipe.ggn.for_backend(self.recipe.backend_in_force())

    @property
    def update(self) -> PriorUpdate:
        """The update in force (:meth:`EvidenceRecipe.update_rule`)."""
        return self.recipe.update_rule()

    @property
    def step(self) -> float:
        """The step towards the optimum in force (:meth:`EvidenceRecipe.step_in_force`)."""
        return self.recipe.step_in_force()

    # ------------------------------------------------------------------ the prior's state
    @property
    def prior(self) -> PriorStructure:
        """The groups (:attr:`LearnedPrior.prior`)."""
        return self.state.prior

    @property
    def log_prior(self) -> torch.Tensor:
        """The learned log precisions, (n_groups,), a leaf tensor."""
        return self.state.log_prior

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """Adam on :attr:`log_prior`."""
        return self.state.optimizer

    @property
    def prior_mean(self) -> torch.Tensor | None:
        """The prior's mean of every trainable parameter (n_params,), or None (zero)."""
        return self.state.prior_mean

    def penalty(self) -> torch.Tensor:
        """:meth:`LearnedPrior.penalty`: add it to a mean cross-entropy loss."""
        return self.state.penalty()

    @property
    def prior_precision(self) -> dict[str, float]:
        """``{group: delta}``."""
        return self.state.prior_precision

    @property
    def prior_variance(self) -> dict[str, float]:
        """``{group: 1 / delta}``."""
        return self.state.prior_variance

    # ------------------------------------------------------------------ the evidence call
    @property
    def world(self) -> World:
        """The processes whose evidence fits are summed (just this one unless data-parallel)."""
        if self.data_parallel is False:
            return World()
        world = current()
        if self.data_parallel and not world.distributed:
            raise ConfigError(
                "data_parallel=True needs torch.distributed's default process group with "
                "several processes (start the script with torchrun)"
            )
        return world

    def make_evidence(self) -> LaplaceEvidence:
        """A new, unfitted :class:`~ella.marglik.LaplaceEvidence` of the model with this
        learner's prior structure, likelihood, Hessian, backend and GGN."""
        return LaplaceEvidence(
            self.model,
            self.prior,
            likelihood=self.likelihood,
            structure=self.hessian,
            backend=self.backend,
            sigma_noise=self.sigma_noise,
            ggn=self.ggn,
            prior_mean=self.prior_mean,
        )

    @section("learner fit (fit, step)")
    def fit(
        self, batches: Iterable, progress: bool = False, curvature_ratio: float = 1.0
    ) -> LaplaceEvidence:
        """Fit the GGN at the model's current weights on ``batches`` (a loader or a list of
        ``(x, y)``); with fewer than ``n_data`` examples, the subset estimator of
        :meth:`~ella.marglik.LaplaceEvidence.fit` scales it to ``n_data``, its curvature
        further by ``curvature_ratio`` (the control variate of
        :func:`ella.marglik.control.curvature_ratio`; 1: none).

        In a data-parallel job (see ``data_parallel``) every process passes its own
        shard in a loader whose ``dataset`` is the whole set (a ``DataLoader`` with a
        ``DistributedSampler``, or an :class:`ella.distributed.ShardLoader`)."""
        loader = batches if hasattr(batches, "dataset") else Batches(batches)
        evidence = self.make_evidence()
        m = len(loader.dataset)
        evidence.fit(
            loader,
            progress=progress,
            n_data=None if m == self.n_data else self.n_data,
            world=self.world,
            curvature_ratio=1.0 if m == self.n_data else curvature_ratio,
        )
        self.evidence = evidence
        return evidence

    def log_marginal_likelihood(self) -> float:
        """The log evidence of the last fit at the current precisions."""
        if self.evidence is None:
            raise RuntimeError("call evidence_step (or fit) first")
        with torch.no_grad():
            value = self.evidence.log_marginal_likelihood(self.log_prior)
        _check_finite(value)
        return float(value)

    def hyper_steps(self, n_hypersteps: int) -> float:
        """Move the precisions with the last fit's factors: ``n_hypersteps`` Adam steps on
        ``-log p(D|delta) / N`` (``update="adam"``), or ``step`` of the way to the round's
        optimum (``update="optimum"``, ``n_hypersteps`` unused); returns the log evidence
        after."""
        if self.evidence is None:
            raise RuntimeError("call evidence_step (or fit) first")
        optimum = (
            self.evidence.optimal_log_prior() if self.hessian == HessianStructure.KRON else None
        )
        before = self.log_prior.detach().clone()
        if self.update == PriorUpdate.OPTIMUM:
            with torch.no_grad():
                self.log_prior.add_(self.step * (optimum - self.log_prior))
        else:
            for _ in range(n_hypersteps):
                self.optimizer.zero_grad(set_to_none=True)
                neg = -self.evidence.log_marginal_likelihood(self.log_prior) / self.n_data
                _check_finite(neg)
                neg.backward()
                self.optimizer.step()
        self.world.check_identical(self.log_prior.detach(), "prior precisions")
        if self.recipe.response == WeightResponse.LAPLACE:
            laplace_response(
                self.evidence, before.exp(), self.log_prior.detach().exp(), self.prior_mean
            )
        self.gaps.append(_gap(self.log_prior.detach(), optimum))
        value = self.log_marginal_likelihood()
        self.history.append(value)
        return value

    def evidence_step(
        self, batches: Iterable, n_hypersteps: int | None = None, progress: bool = False
    ) -> float:
        """Fit the GGN on ``batches`` and move the precisions (:meth:`hyper_steps`).

        Args:
            batches: a ``DataLoader`` or any iterable of ``(x, y)`` batches (all of the
                training data, or a subset: then the evidence is scaled to ``n_data``).
            n_hypersteps: Adam's steps on the log precisions where the update is Adam's;
                ``None``: the recipe's.
            progress: a progress bar over the batches of the fit.

        Returns:
            The log marginal likelihood after the update.
        """
        if n_hypersteps is None:
            n_hypersteps = self.recipe.n_hypersteps
        if n_hypersteps < 0:
            raise ConfigError(f"n_hypersteps must be >= 0, got {n_hypersteps}")
        self.fit(batches, progress=progress)
        return self.hyper_steps(n_hypersteps)

    @section("round")
    def evidence_round(
        self,
        data: Dataset,
        epoch: int,
        *,
        labels: torch.Tensor | None = None,
        traces: torch.Tensor | None = None,
        progress: bool = False,
    ) -> float:
        """One evidence round on the training set ``data`` after (1-based) ``epoch``, as
        :attr:`recipe` says: draw the round's subset, fit the GGN on it with the control
        variate's factor, move the precisions (:meth:`hyper_steps`).

        Call it where :meth:`evidence_step` would be called, with the whole training set:
        ``ella train`` and :func:`ella.fit` call it after their epochs.

        Args:
            data: the ``N = n_data`` training examples, a map-style data set of
                ``(x, y)`` (the round draws its own subset of it).
            epoch: the epoch just trained (with the recipe's ``seed``, it seeds the subset).
            labels: the (N,) class labels of ``data`` (read from it where not given);
                unused for regression.
            traces: the (N,) auxiliary variable of the ``training`` control (``1 - sum p^2``
                of each example in the training passes); NaN entries (no pass yet) turn the
                control off for the round.
            progress: one transient bar over the fit's batches.

        Returns:
            The log marginal likelihood after the update.
        """
        self.fit_round(data, epoch, labels=labels, traces=traces, progress=progress)
        return self.hyper_steps(self.recipe.n_hypersteps)

    def round_subset(
        self, data: Dataset, epoch: int, labels: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """The indices of the round after ``epoch`` (:func:`~ella.learner.rounds.round_subset`);
        ``None``: every example."""
        return round_subset(self.recipe, data, epoch, self.likelihood, labels)

    def check_rules(self) -> None:
        """Refuse the recipe in force where it breaks a rule that the recipe alone cannot
        ask, since it reads the data and the likelihood (a subset of the ``n_data``
        examples needs the Kronecker Hessian; the stratified GGN, classification): asked
        when the learner is built and at every round, as the recipe may be replaced."""
        check_evidence_settings(
            context=f"{self.n_data} training examples",
            hessian=self.recipe.hessian,
            backend=self.recipe.backend,
            ggn=self.recipe.ggn,
            subset_size=self.recipe.subset_size,
            n_data=self.n_data,
            likelihood=self.likelihood,
        )

    def fit_round(
        self,
        data: Dataset,
        epoch: int,
        *,
        labels: torch.Tensor | None = None,
        traces: torch.Tensor | None = None,
        progress: bool = False,
    ) -> LaplaceEvidence:
        """The fit of :meth:`evidence_round` without the update (same arguments): the
        round's evidence, also kept as :attr:`evidence`."""
        if len(data) != self.n_data:
            raise ConfigError(
                f"evidence_round needs the whole training set: got {len(data)} examples, "
                f"n_data is {self.n_data}"
            )
        self.check_rules()
        index = self.round_subset(data, epoch, labels)
        ratio = 1.0
        if index is not None:
            ratio = self.curvature_ratio(data, index, traces)
            data = Subset(data, index)
        self.last_curvature_ratio = ratio
        loader = evidence_loader(data, self.recipe.batch_size, self.world)
        return self.fit(loader, progress, ratio)

    def curvature_ratio(
        self, data: Dataset, index: torch.Tensor, traces: torch.Tensor | None = None
    ) -> float:
        """The control variate's factor on the curvature of the subset ``index`` of
        ``data`` (:func:`~ella.learner.rounds.control_ratio`; 1: none)."""
        return control_ratio(
            self.recipe, self.model, data, index, self.likelihood, self.world, traces
        )

    # ------------------------------------------------------------------ reading out
    def report(self) -> dict:
        """Effective parameters per relaxed layer and path, from the last fit.

        Returns:
            ``{"effective_parameters": [...], "effective_parameters_other": [...],
            "prior_precision": {...}, "prior_variance": {...}, "log_marglik": [...]}``;
            ``ella.learner.report.format_table`` prints it.
        """
        if self.evidence is None:
            raise RuntimeError("call evidence_step (or fit) first")
        report = effective_parameter_report(
            self.model, self.evidence, self.log_prior.detach().exp()
        )
        return {
            "effective_parameters": report["layers"],
            "effective_parameters_other": report["others"],
            "prior_precision": self.prior_precision,
            "prior_variance": self.prior_variance,
            "log_marglik": list(self.history),
        }

    def shares(self) -> dict[str, float]:
        """Mean FC / CONV / GCONV share over the relaxed layers at the last evidence and
        the current priors (:func:`ella.learner.report.mean_shares`; empty without relaxed
        layers)."""
        if self.evidence is None:
            raise RuntimeError("call evidence_step (or fit) first")
        return mean_shares(self.model, self.evidence, self.log_prior.detach().exp())

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict:
        """Tensors and plain values only (loads with ``torch.load(weights_only=True)``)."""
        return {**self.state.state_dict(), "history": list(self.history), "gaps": list(self.gaps)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` saved; a state that does not fit changes nothing
        (:meth:`LearnedPrior.load_state_dict` says what it refuses)."""
        self.state.load_state_dict(state)
        self.history = list(state["history"])
        self.gaps = list(state.get("gaps", []))


def _gap(log_prior: torch.Tensor, optimum: torch.Tensor | None) -> float:
    """Largest ``|log delta - log delta*|`` over the groups whose optimum is finite (not at
    the bisection's bounds); NaN without an optimum."""
    if optimum is None:
        return float("nan")
    interior = ~at_bound(optimum)
    if not interior.any():
        return 0.0
    return float((log_prior.to(optimum) - optimum)[interior].abs().max())


def _check_finite(value: torch.Tensor) -> None:
    if not torch.isfinite(value):
        raise TrainingDivergedError(
            f"the log marginal likelihood became {value.item()}; the weights or the priors "
            "diverged: try a smaller learning rate for the priors or more burn-in"
        )
