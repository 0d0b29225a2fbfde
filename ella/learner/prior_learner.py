"""Learned layer-wise priors for your own training loop.

:class:`PriorLearner` owns the prior precisions of a model's parameter groups
(one per path of every :class:`~ella.nn.RelaxedLayer`, one per other module,
see :class:`~ella.marglik.PriorStructure`) and learns them by the linearised
Laplace evidence, when and on what data the caller decides. It is what
``ella train`` uses inside its own loop (:class:`ella.train.Trainer`)::

    priors = PriorLearner(model, n_data=len(train_set))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y) + priors.penalty()
            optimiser.zero_grad(); loss.backward(); optimiser.step()
        if epoch >= burn_in:
            priors.evidence_step(train_loader)  # fit the GGN, Adam steps on the priors
    print(format_table(priors.report()))

The MAP objective per example is ``CE + 1/2 sum_i delta_i theta_i^2 / N``
(MacKay 1992; Immer et al., ICML 2021, Eq. 3), and an evidence step takes
``n_hypersteps`` Adam steps on ``-log p(D | delta) / N`` in the log precisions
with the Kronecker factors of one fit (the ELLA reference's schedule).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset, default_collate

from ella.choices import (
    GGN,
    Backend,
    HessianStructure,
    Likelihood,
    PriorMean,
    PriorMode,
    PriorUpdate,
    SubsetControl,
    WeightResponse,
)
from ella.distributed import ShardLoader, World, current
from ella.engine.rounds import EvidenceRounds
from ella.errors import CheckpointError, ConfigError, TrainingDivergedError
from ella.learner.report import effective_parameter_report, mean_shares
from ella.marglik import LaplaceEvidence, PriorStructure, check_supported, laplace_response
from ella.marglik.control import curvature_ratio, output_hessian_trace
from ella.marglik.evidence import at_bound, check_n_data

__all__ = ["EvidenceRounds", "PriorLearner", "dataset_labels", "forward_traces"]


class _Batches:
    """A list of ``(x, y)`` batches shaped like a loader for laplace-torch: iterable, with
    a ``dataset`` whose length is the number of examples."""

    def __init__(self, batches: Iterable):
        self.batches = [(x, y) for x, y in batches]
        if not self.batches:
            raise ConfigError("the evidence step got no batches; pass a loader with data")
        self.dataset = range(sum(len(y) for _, y in self.batches))

    def __iter__(self) -> Iterator:
        return iter(self.batches)


def dataset_labels(data: Dataset) -> torch.Tensor:
    """The (N,) integer labels of a map-style classification data set (read from its
    tensors where it is a ``TensorDataset``, or a ``Subset`` of one; else item by item)."""
    if isinstance(data, TensorDataset):
        return data.tensors[1]
    if isinstance(data, Subset) and isinstance(data.dataset, TensorDataset):
        return data.dataset.tensors[1][torch.as_tensor(data.indices)]
    return torch.as_tensor([int(data[i][1]) for i in range(len(data))])


@torch.no_grad()
def forward_traces(model: nn.Module, data: Dataset, batch_size: int, world: World) -> torch.Tensor:
    """``1 - sum_c p_c^2`` of every example of ``data`` at the model's current weights
    (evaluation mode), (N,) float64: the auxiliary variable of the ``forward`` control. In
    a data-parallel job each process passes its shard and the traces are summed."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    trace = torch.zeros(len(data), dtype=torch.float64)
    shard = torch.as_tensor(list(world.shard(len(data))), dtype=torch.long)
    images = data.tensors[0] if isinstance(data, TensorDataset) else None
    for index in shard.split(batch_size):
        if images is not None:
            x = images[index]
        else:  # collated by hand: a DataLoader's iterator draws from the global generator
            x = default_collate([data[i] for i in index.tolist()])[0]
        trace[index] = output_hessian_trace(model(x.to(device))).cpu()
    model.train(was_training)
    return world.sum_(trace.to(device)).cpu()


def evidence_loader(data: Dataset, batch_size: int, world: World):
    """A round's batches: a ``DataLoader`` over ``data`` in one process; in a data-parallel
    job this process's contiguous shard, presented as the whole set (``ShardLoader``)."""
    if not world.distributed:
        return DataLoader(data, batch_size=batch_size)
    return ShardLoader(DataLoader(world.subset(data), batch_size=batch_size), total=len(data))


class PriorLearner:
    """Prior precisions of a model's parameter groups, learned by the Laplace evidence.

    Args:
        model: the network whose priors are learned (ella's relaxed layers and/or
            ``nn.Linear``/``nn.Conv2d``; every trainable parameter belongs to one group).
        n_data: size ``N`` of the training set (the penalty's and the evidence's scale):
            an ``int`` from 1 to :data:`~ella.marglik.evidence.MAX_N_DATA` (``10**12``;
            floats and bools are refused).
        structure: which tensors share a precision (``layer_path``, ``tensor``, ``scalar``).
        prior_precision: initial precision ``delta`` of every group.
        lr: Adam learning rate of the log precisions.
        hessian: ``kron`` (default), ``diag`` or ``full`` GGN structure.
        backend: curvature backend (default: ``native`` for ``kron``).
        ggn: ``exact`` (one backward pass per class), ``mc`` (one sampled label),
            ``stratified`` (the most probable class and one sampled label; native backend)
            or ``auto`` (stratified with the native backend, mc with a stock one).
        likelihood: ``classification`` or ``regression``.
        sigma_noise: observation noise of the regression likelihood.
        update: ``adam`` (``n_hypersteps`` Adam steps per evidence round) or ``optimum``
            (the round's maximum in closed form; see
            :meth:`~ella.marglik.LaplaceEvidence.optimal_log_prior`).
        data_parallel: whether the evidence fit sums its Kronecker factors over the
            processes of a ``torch.distributed`` job (each process passing its shard of
            the data, as with a ``DistributedSampler``; see :mod:`ella.distributed`).
            Default ``None``: whenever torch's default process group has more than one
            process. The precisions are then checked to be identical on every process.
        mean: where the prior is centred: ``zero`` (default, the reference) or ``init``,
            the model's trainable parameters when the learner is made (call it before
            training); kept in :meth:`state_dict`.
        step: with ``update="optimum"``, the fraction of the way from the current log
            precisions to the round's optimum that a round moves them, in (0, 1]:
            ``log delta <- log delta + step (log delta* - log delta)``. 1 (default) sets
            them to the optimum; a smaller step damps the fixed-point iteration that the
            alternation of training and rounds is.
        rounds: the data of :meth:`evidence_round` (an :class:`EvidenceRounds`; defaults
            to ``EvidenceRounds()``, ``ella train``'s subset and control variate).
        response: what the weights do when a round moves the precisions: ``none``
            (default) or ``laplace``, to the new prior's MAP as the round's GGN predicts
            (:class:`~ella.choices.WeightResponse`; Kronecker Hessian only).

    Attributes:
        prior: the :class:`~ella.marglik.PriorStructure` (group names, tensor index).
        log_prior: the learned log precisions, (n_groups,), a leaf tensor.
        evidence: the :class:`~ella.marglik.LaplaceEvidence` of the last evidence step.
        history: log evidence after each evidence step.
        gaps: after each evidence step, the largest ``|log delta - log delta*|`` over the
            groups, ``delta*`` the round's optimum (how far the step left the precisions
            from the maximum of that round's evidence; Kronecker Hessian only, else NaN).
    """

    def __init__(
        self,
        model: nn.Module,
        n_data: int,
        *,
        structure: PriorMode | str = PriorMode.LAYER_PATH,
        prior_precision: float = 1.0,
        lr: float = 0.1,
        hessian: HessianStructure | str = HessianStructure.KRON,
        backend: Backend | str | None = None,
        ggn: GGN | str = GGN.EXACT,
        likelihood: str = "classification",
        sigma_noise: float = 1.0,
        update: PriorUpdate | str = PriorUpdate.ADAM,
        data_parallel: bool | None = None,
        mean: PriorMean | str = PriorMean.ZERO,
        step: float = 1.0,
        rounds: EvidenceRounds | None = None,
        response: WeightResponse | str = WeightResponse.NONE,
    ):
        n_data = check_n_data(n_data)
        if not (math.isfinite(prior_precision) and prior_precision > 0):
            raise ConfigError(f"prior_precision must be positive, got {prior_precision}")
        if not (math.isfinite(lr) and lr > 0):
            raise ConfigError(f"lr must be positive, got {lr}")
        if not (0 < step <= 1):
            raise ConfigError(f"step must be in (0, 1], got {step}")
        self.model = model
        self.n_data = n_data
        self.prior = PriorStructure(model, structure)
        self.hessian = HessianStructure.parse(hessian, "Hessian structure")
        if self.hessian == HessianStructure.KRON:
            check_supported(model)  # before any training step, not at the first round
        self.backend = backend
        # auto resolved for the backend the evidence will use
        used = backend or Backend.default_for(self.hessian)
        ggn = GGN.parse(ggn, "GGN type")
        if ggn == GGN.AUTO and likelihood == Likelihood.REGRESSION:  # a Gaussian's GGN is one pass
            ggn = GGN.EXACT
        self.ggn = ggn.for_backend(used)
        self.likelihood = likelihood
        #: how :meth:`evidence_round` chooses its data (ella train's recipe by default)
        self.rounds = EvidenceRounds() if rounds is None else rounds
        #: the control variate's factor on the last round's curvature (1: none)
        self.last_curvature_ratio = 1.0
        self.sigma_noise = sigma_noise
        self.update = PriorUpdate.parse(update, "prior update")
        self.data_parallel = data_parallel
        self.mean = PriorMean.parse(mean, "prior mean")
        #: the prior's mean of every trainable parameter (n_params,), or None (zero)
        self._params: list[nn.Parameter] | None = None  # _trainable()
        self.prior_mean: torch.Tensor | None = (
            self._trainable_vector().detach().clone() if self.mean == PriorMean.INIT else None
        )
        if self.update == PriorUpdate.AUTO:
            raise ConfigError(
                "update='auto' is a configuration's choice; pass the rule it resolves to "
                "(ScheduleConfig.prior_update_rule(): 'optimum' or 'adam')"
            )
        if self.update == PriorUpdate.OPTIMUM and self.hessian != HessianStructure.KRON:
            raise ConfigError("the closed-form prior update needs the Kronecker Hessian (kron)")
        if step != 1 and self.update != PriorUpdate.OPTIMUM:
            raise ConfigError(
                f"a step of {step} towards the optimum needs update='optimum' "
                "(--prior-update optimum); Adam steps are set by lr and n_hypersteps"
            )
        self.step = float(step)
        self.response = WeightResponse.parse(response, "weight response")
        if self.response == WeightResponse.LAPLACE and self.hessian != HessianStructure.KRON:
            raise ConfigError(
                "the weights' Laplace response needs the Kronecker Hessian (hessian='kron'); "
                "use response='none' with a diagonal or full Hessian"
            )
        device = next(model.parameters()).device
        self.log_prior = torch.full(
            (self.prior.n_groups,), math.log(prior_precision), device=device
        ).requires_grad_()
        self.optimizer = torch.optim.Adam([self.log_prior], lr=lr)
        self.evidence: LaplaceEvidence | None = None
        self.history: list[float] = []
        self.gaps: list[float] = []
        self._diagonal: tuple[int, torch.Tensor] | None = None  # (version of log_prior, diag)
        #: (version of log_prior, per-tensor precisions, per-tensor delta / N as floats)
        self._scales: tuple[int, torch.Tensor, list[float]] | None = None

    @classmethod
    def from_config(cls, model: nn.Module, n_data: int, config, **options) -> PriorLearner:
        """A learner with the evidence options of a :class:`~ella.engine.schedule.ScheduleConfig`
        (prior structure and initial precision, ``lr_hyp``, Hessian, backend, GGN, the
        update rule and step, the rounds' data: :meth:`EvidenceRounds.from_config`);
        ``options`` adds ``likelihood`` and ``sigma_noise``."""
        update = config.prior_update_rule()  # auto resolved
        return cls(
            model,
            n_data,
            structure=config.prior_structure,
            prior_precision=config.prior_precision,
            lr=config.lr_hyp,
            hessian=config.hessian,
            backend=config.backend,
            ggn=config.ggn,
            update=update,
            mean=config.prior_mean,
            # the damping of the optimum; Adam's rounds have none (auto may resolve to adam)
            step=config.prior_step if update == PriorUpdate.OPTIMUM else 1.0,
            rounds=EvidenceRounds.from_config(config),
            response=config.weight_response,
            **options,
        )

    # ------------------------------------------------------------------ the MAP side
    def precision_diagonal(self) -> torch.Tensor:
        """The current prior precision of every parameter, (n_params,), detached.

        Cached until ``log_prior`` changes (any in-place update bumps its version)."""
        version = self.log_prior._version
        if self._diagonal is None or self._diagonal[0] != version:
            diagonal = self.prior.expand_diagonal(self.log_prior.detach().exp())
            self._diagonal = (version, diagonal)
        return self._diagonal[1]

    def _trainable_vector(self) -> torch.Tensor:
        return parameters_to_vector(self._trainable())

    def penalty(self) -> torch.Tensor:
        """``1/2 sum_i delta_i (theta_i - mu_i)^2 / N`` (``mu`` the prior mean, zero by
        default): add it to a mean cross-entropy loss."""
        theta = self._trainable_vector()
        if self.prior_mean is not None:
            theta = theta - self.prior_mean
        return 0.5 * (self.precision_diagonal() * theta.square()).sum() / self.n_data

    def _tensor_scales(self) -> tuple[torch.Tensor, list[float]]:
        """The prior precision of every trainable tensor, (n_tensors,), and ``delta_t / N``
        of each as a float, rounded as backpropagating :meth:`penalty` rounds it (the float32
        ``1 / N`` times ``delta_t``); cached until ``log_prior`` changes."""
        version = self.log_prior._version
        if self._scales is None or self._scales[0] != version:
            delta = self.prior.expand(self.log_prior.detach().exp())
            inverse_n = torch.ones((), dtype=delta.dtype, device=delta.device) / self.n_data
            self._scales = (version, delta, (inverse_n * delta).tolist())
        return self._scales[1], self._scales[2]

    def _trainable(self) -> list[nn.Parameter]:
        """The trainable tensors, in the order of :attr:`prior` (listed once)."""
        if self._params is None:
            self._params = [p for p in self.model.parameters() if p.requires_grad]
        return self._params

    @torch.no_grad()
    def penalty_value(self) -> torch.Tensor:
        """The value of :meth:`penalty` without a graph (0-dim, on the parameters' device),
        from one norm per tensor: pair it with :meth:`add_penalty_gradient`."""
        if self.prior_mean is not None:
            return self.penalty()
        delta, _ = self._tensor_scales()
        norms = torch.stack(torch._foreach_norm(self._trainable()))
        return 0.5 * (delta * norms.square()).sum() / self.n_data

    @torch.no_grad()
    def add_penalty_gradient(self) -> None:
        """Add the gradient of :meth:`penalty`, ``delta_t (theta_t - mu_t) / N``, to every
        trainable tensor's ``.grad`` (a tensor without one gets it as its gradient).

        Equal to backpropagating :meth:`penalty` with the data's loss (bit for bit with the
        prior centred at zero), in a few multi-tensor operations where autograd runs
        several per tensor.
        """
        params = self._trainable()
        if self.prior_mean is not None:
            diff = self._trainable_vector() - self.prior_mean
            flat = self.precision_diagonal() * diff / self.n_data
            terms = list(flat.split([p.numel() for p in params]))
            terms = [t.view_as(p) for t, p in zip(terms, params, strict=True)]
        else:
            _, scales = self._tensor_scales()
            terms = torch._foreach_mul(params, scales)
        have = [i for i, p in enumerate(params) if p.grad is not None]
        if have:
            torch._foreach_add_([params[i].grad for i in have], [terms[i] for i in have])
        for i, p in enumerate(params):
            if p.grad is None:
                p.grad = terms[i].clone() if self.prior_mean is not None else terms[i]

    # ------------------------------------------------------------------ the evidence side
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
        loader = batches if hasattr(batches, "dataset") else _Batches(batches)
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
        if self.response == WeightResponse.LAPLACE:
            laplace_response(
                self.evidence,
                self._trainable(),
                self.prior.expand(before.exp()),
                self.prior.expand(self.log_prior.detach().exp()),
                self.prior_mean,
            )
        self.gaps.append(_gap(self.log_prior.detach(), optimum))
        value = self.log_marginal_likelihood()
        self.history.append(value)
        return value

    def evidence_step(
        self, batches: Iterable, n_hypersteps: int = 20, progress: bool = False
    ) -> float:
        """Fit the GGN on ``batches`` and take ``n_hypersteps`` steps on the priors.

        Args:
            batches: a ``DataLoader`` or any iterable of ``(x, y)`` batches (all of the
                training data, or a subset: then the evidence is scaled to ``n_data``).
            n_hypersteps: Adam steps on the log precisions (the reference takes 20).
            progress: a progress bar over the batches of the fit.

        Returns:
            The log marginal likelihood after the steps.
        """
        if n_hypersteps < 0:
            raise ConfigError(f"n_hypersteps must be >= 0, got {n_hypersteps}")
        self.fit(batches, progress=progress)
        return self.hyper_steps(n_hypersteps)

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
        :attr:`rounds` says: draw the round's subset, fit the GGN on it with the control
        variate's factor, move the precisions (:meth:`hyper_steps`).

        Call it where :meth:`evidence_step` would be called, with the whole training set:
        ``ella train`` and :func:`ella.fit` call it after their epochs.

        Args:
            data: the ``N = n_data`` training examples, a map-style data set of
                ``(x, y)`` (the round draws its own subset of it).
            epoch: the epoch just trained (with ``rounds.seed``, it seeds the subset).
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
        return self.hyper_steps(self.rounds.n_hypersteps)

    def round_subset(
        self, data: Dataset, epoch: int, labels: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """The indices of the round after ``epoch`` (:meth:`EvidenceRounds.subset`, balanced
        by ``labels`` or the labels read from ``data``); ``None``: every example."""
        classification = self.likelihood == Likelihood.CLASSIFICATION
        if labels is None and classification and self.rounds.draws_subset(len(data)):
            labels = dataset_labels(data)
        return self.rounds.subset(labels if classification else None, len(data), epoch)

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
        index = self.round_subset(data, epoch, labels)
        ratio = 1.0
        if index is not None:
            if self.hessian != HessianStructure.KRON:
                raise ConfigError(
                    f"a round on {len(index)} of {len(data)} examples (the subset estimator) "
                    f"needs the Kronecker Hessian; with hessian={self.hessian} use "
                    "subset_size=None (marglik_subset_size=None), which fits every example"
                )
            ratio = self.curvature_ratio(data, index, traces)
            data = Subset(data, index)
        self.last_curvature_ratio = ratio
        return self.fit(evidence_loader(data, self.rounds.batch_size, self.world), progress, ratio)

    def curvature_ratio(
        self, data: Dataset, index: torch.Tensor, traces: torch.Tensor | None = None
    ) -> float:
        """The control variate's factor (:attr:`rounds`' ``control``) on the curvature of
        the subset ``index`` of ``data`` (1: none; see :meth:`evidence_round`)."""
        control = self.rounds.control
        if control == SubsetControl.NONE or self.likelihood != Likelihood.CLASSIFICATION:
            return 1.0
        if control == SubsetControl.FORWARD:
            traces = forward_traces(self.model, data, self.rounds.batch_size, self.world)
        elif traces is None:
            raise ConfigError(
                "the training control variate needs the traces of the training passes: "
                "pass traces=... (ella.marglik.control.output_hessian_trace of each "
                "example's logits), or use control='forward'"
            )
        elif traces.isnan().any():  # no training pass recorded yet
            return 1.0
        return curvature_ratio(traces, index)

    # ------------------------------------------------------------------ reading out
    @property
    def prior_precision(self) -> dict[str, float]:
        """``{group: delta}``."""
        return self.prior.as_dict(self.log_prior.exp())

    @property
    def prior_variance(self) -> dict[str, float]:
        """``{group: 1 / delta}``."""
        return self.prior.as_dict(self.log_prior.neg().exp())

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
        return {
            "groups": list(self.prior.names),
            "log_prior": self.log_prior.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "history": list(self.history),
            "gaps": list(self.gaps),
            "prior_mean": None if self.prior_mean is None else self.prior_mean.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` saved; a state that does not fit changes nothing.

        Raises:
            CheckpointError: ``state`` is not a learner's state (an entry missing, a tensor
                of another shape than this model's groups, an optimizer state that does
                not fit).
            ConfigError: the state is of priors for other groups, or centred elsewhere.
        """
        _check_entries(state)
        if list(state["groups"]) != self.prior.names:
            raise ConfigError(
                f"these priors are for the groups {state['groups']}, not this model's "
                f"{self.prior.names}"
            )
        _check_shapes(state, self.prior.n_groups)
        mean = state.get("prior_mean")  # absent before the option existed: zero
        if (mean is None) != (self.prior_mean is None):
            saved = "zero" if mean is None else "init"
            raise ConfigError(
                f"these priors are centred at {saved}, not at {self.mean.value}: "
                f"set prior_mean (--prior-mean) to {saved}"
            )
        if mean is not None and mean.shape != self.prior_mean.shape:
            raise ConfigError(
                f"the saved prior mean has {mean.numel()} values, this model "
                f"{self.prior_mean.numel()} trainable parameters"
            )
        try:  # torch checks the state before it changes the optimizer
            self.optimizer.load_state_dict(state["optimizer"])
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"the saved optimizer state of the priors does not fit this learner "
                f"({type(error).__name__}: {error}); {_STATE_FIX}"
            ) from error
        with torch.no_grad():
            self.log_prior.copy_(state["log_prior"])
        if mean is not None:
            self.prior_mean = mean.to(self.prior_mean)
        self.history = list(state["history"])
        self.gaps = list(state.get("gaps", []))


#: the entries that every :meth:`PriorLearner.state_dict` has
_STATE_KEYS = ("groups", "log_prior", "optimizer", "history")
_STATE_FIX = (
    "the state is damaged or not from PriorLearner.state_dict() of this model: load the "
    "priors saved with this model (ckpt['priors'] of its run), or start without them"
)


def _check_entries(state) -> None:
    """Refuse a saved learner state without the entries of :meth:`PriorLearner.state_dict`."""
    if not isinstance(state, dict):
        raise CheckpointError(f"the saved priors must be a dict, got {type(state).__name__}")
    missing = [key for key in _STATE_KEYS if key not in state]
    if missing:
        raise CheckpointError(
            f"the saved priors lack the entries {missing} (they have {sorted(state)}); "
            + _STATE_FIX
        )


def _check_shapes(state: dict, n_groups: int) -> None:
    """Refuse saved precisions (or Adam moments of them) of another length than the
    model's ``n_groups`` prior groups."""
    tensors = {"log_prior": state["log_prior"]}
    optimizer = state["optimizer"]
    slots = optimizer.get("state", {}) if isinstance(optimizer, dict) else {}
    for slot in slots.values() if isinstance(slots, dict) else ():
        if isinstance(slot, dict):
            tensors.update({f"optimizer {k}": v for k, v in slot.items() if k != "step"})
    for name, value in tensors.items():
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
        if shape != (n_groups,):
            given = f"has shape {shape}" if shape is not None else f"is a {type(value).__name__}"
            raise CheckpointError(
                f"the saved priors' {name} {given}, expected a tensor of shape "
                f"({n_groups},), one value per prior group of this model; {_STATE_FIX}"
            )


def _gap(log_prior: torch.Tensor, optimum: torch.Tensor | None) -> float:
    """Largest ``|log delta - log delta*|`` over the groups whose optimum is finite (not at
    the bisection's bounds); NaN without an optimum."""
    if optimum is None:
        return float("nan")
    interior = ~at_bound(optimum)
    if not interior.any():
        return 0.0
    return float((log_prior.to(optimum) - optimum)[interior].abs().max())


def prior_convergence(rounds: list[dict[str, float]], tolerance: float = 0.05) -> dict:
    """Whether the prior precisions had settled by the last evidence round.

    Args:
        rounds: ``{group: precision}`` after each evidence round, in order.
        tolerance: the largest change of a log precision between the last two rounds
            that counts as converged (0.05: every precision within about 5%).

    Returns:
        ``{"rounds", "last_change", "converged", "tolerance", "group", "rising"}``;
        ``last_change`` is ``max_g |log delta_g(last) - log delta_g(previous)|``,
        ``group`` the group it belongs to and ``rising`` whether that precision grew (a
        path the evidence is switching off keeps rising); None with fewer than two
        rounds, which never counts as converged.
    """
    change = group = rising = None
    if len(rounds) >= 2:
        last, previous = rounds[-1], rounds[-2]
        steps = {g: math.log(last[g]) - math.log(previous[g]) for g in last}
        group = max(steps, key=lambda g: abs(steps[g]))
        change, rising = abs(steps[group]), steps[group] > 0
    return {
        "rounds": len(rounds),
        "last_change": change,
        "converged": change is not None and change < tolerance,
        "tolerance": tolerance,
        "group": group,
        "rising": rising,
    }


def shares_history(metrics: list[dict]) -> list[dict]:
    """The mean shares recorded at each evidence round of a run's epoch rows:
    ``[{"epoch": e, "fc": ..., "conv": ..., "gconv": ...}]`` (rows without ``"shares"``
    are skipped)."""
    return [{"epoch": row["epoch"], **row["shares"]} for row in metrics if "shares" in row]


def _check_finite(value: torch.Tensor) -> None:
    if not torch.isfinite(value):
        raise TrainingDivergedError(
            f"the log marginal likelihood became {value.item()}; the weights or the priors "
            "diverged: try a smaller learning rate for the priors or more burn-in"
        )
