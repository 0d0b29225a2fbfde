"""Linearised Laplace log marginal likelihood, differentiable in group log precisions.

A thin layer over laplace-torch (Daxberger et al., "Laplace Redux", NeurIPS
2021): fit a GGN Laplace approximation once, then evaluate

    log p(D | delta) ~= log p(D | theta*) - 1/2 [ log det(H + P) - log det P
                        + theta*^T P theta* ]

(laplace-torch's ``log_marginal_likelihood``) for any prior precision
``P = diag(delta)`` built from the group values of a
:class:`~ella.marglik.priors.PriorStructure`, with gradients. With a
Kronecker-factored ``H`` the log determinant is
``sum log(lambda_A (x) lambda_B + delta)`` over eigendecomposed factors
(Immer et al., ICML 2021, Sec. 4); :class:`KronEvidenceTerms` gathers those
eigenvalues once after a fit, so each evaluation is a few vector operations over the
parameters' eigenvalues, with no Python loop over the blocks.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from contextlib import nullcontext

import torch
from torch import nn

from ella.choices import GGN, Backend, HessianStructure
from ella.distributed import World
from ella.errors import ConfigError
from ella.evidence_rules import check_evidence_settings
from ella.marglik.backends import (
    BACKENDS,
    FiniteBatches,
    check_finite_weights,
    check_memory,
    check_n_data,
    dependency_may_not_exit,
    require_finite,
)
from ella.marglik.hessians import HESSIANS
from ella.marglik.kron_terms import KronEvidenceTerms
from ella.marglik.laplace_internals import (
    parameter_dtype,
    scale_to_n_data,
)
from ella.marglik.per_channel import PerChannelView
from ella.marglik.priors import PriorStructure
from ella.nn.paths import per_module_calls
from ella.runtime.timing import section


class LaplaceEvidence:
    """The log marginal likelihood of ``model`` as a function of group log precisions.

    Args:
        model: the network, at (or near) a MAP estimate when :meth:`fit` is called.
        prior: the prior structure mapping groups to parameter tensors.
        likelihood: ``"classification"`` or ``"regression"``.
        structure: ``"kron"`` (default), or ``"full"``/``"diag"`` for tiny models.
        backend: ``"native"`` (ella's batched factors,
            :class:`~ella.marglik.native.NativeGGN`; the default for ``"kron"``), or
            the stock ``"asdl"`` (the default for ``"full"``/``"diag"``) and
            ``"curvlinops"`` backends, kept as references.
        sigma_noise: observation noise for regression.
        ggn: ``"exact"`` GGN (a backward pass per output), ``"mc"``, a
            one-sample Monte-Carlo estimate of it (about C times cheaper for C
            classes, stochastic), or ``"stratified"`` (classification with the native
            backend: two backward passes, unbiased, far less noisy than ``"mc"`` on
            confident predictions; :func:`ella.marglik.native.stratified_root`), or
            ``"auto"`` (stratified with the native backend, mc with a stock one).
            Defaults to ``"exact"``: this class is the evidence itself, deterministic, as
            the references compute it; the training recipe chooses an estimator for its
            rounds (:attr:`ella.engine.recipe.EvidenceRecipe.ggn`, ``auto``).
        prior_mean: the prior's mean ``mu`` of every trainable parameter, (n_params,), in
            the order of ``model.parameters()``; ``None`` (default): zero. It enters the
            scatter term ``sum_t delta_t ||theta_t - mu_t||^2`` (laplace-torch's
            ``prior_mean``); the curvature does not depend on it.

    Example:
        >>> evidence = LaplaceEvidence(model, PriorStructure(model))
        >>> evidence.fit(train_loader)
        >>> log_prec = torch.zeros(evidence.prior.n_groups, requires_grad=True)
        >>> (-evidence.log_marginal_likelihood(log_prec)).backward()
    """

    def __init__(
        self,
        model: nn.Module,
        prior: PriorStructure,
        likelihood: str = "classification",
        structure: HessianStructure | str = HessianStructure.KRON,
        backend: Backend | str | None = None,
        sigma_noise: float = 1.0,
        ggn: str = "exact",
        prior_mean: torch.Tensor | None = None,
    ):
        self.model = model
        #: the network as the curvature backends see it (per-channel FC maps)
        self.view = PerChannelView(model)
        #: ``prior`` over the view's tensors: the groups and their order are ``prior``'s
        self.prior = self.view.prior(prior)
        self.prior_mean = prior_mean  # (n_params,) or None: zero
        self.likelihood = likelihood
        self.structure = HessianStructure.parse(structure, "Hessian structure")
        if backend is None:
            backend = Backend.default_for(self.structure)
        self.backend = Backend.parse(backend, "curvature backend")
        check_evidence_settings(
            {"hessian": "structure"},
            hessian=self.structure,
            backend=self.backend,
            ggn=ggn,
            likelihood=likelihood,
        )
        self.sigma_noise = sigma_noise
        self.ggn = GGN.parse(ggn, "GGN type").for_backend(self.backend)
        #: the structure's part of the evidence (:data:`~ella.marglik.hessians.HESSIANS`)
        self.hessian = HESSIANS[self.structure]
        self._terms: KronEvidenceTerms | None = None
        self.hessian.check_model(self.view.network)
        check_memory(model, self.structure)
        self._la = None

    @property
    def laplace(self):
        """The fitted laplace-torch object."""
        if self._la is None:
            raise RuntimeError("call LaplaceEvidence.fit(loader) first")
        return self._la

    @property
    def n_data(self) -> int:
        """``N``, the examples the likelihood of the last fit was scaled to."""
        return int(self.laplace.n_data)

    @section("evidence fit")
    def fit(
        self,
        loader: Iterable,
        progress: bool = False,
        n_data: int | None = None,
        world: World | None = None,
        curvature_ratio: float = 1.0,
    ) -> None:
        """Fit the GGN over all batches of ``loader`` at the model's current weights.

        Args:
            loader: batches ``(x, y)``; ``loader.dataset`` has ``M`` examples.
            progress: show a progress bar.
            n_data: the training-set size ``N`` when ``loader`` holds a subset of
                ``M < N`` examples (stochastic subset evidence; Immer, van der Ouderaa,
                van der Wilk, Rätsch & Schölkopf, ICML 2023, as in
                ``aleximmer/ntk-marglik``): the log likelihood and every output factor
                ``B`` are scaled by ``N / M``, the input factors ``A`` are the subset's
                means, and the evidence is that of ``N`` points. Only for
                ``structure="kron"``. Default: no scaling (``N = M``).
            world: in a data-parallel job (:mod:`ella.distributed`), the processes whose
                fits are summed: each process passes its shard of the data in a loader
                whose ``dataset`` has the length of the whole (``M``), and the
                Kronecker factors and log likelihood are summed over the processes
                before they are decomposed (``structure="kron"`` only). Every process
                then holds the evidence of all ``M`` examples.
            curvature_ratio: with ``n_data``, a further factor on the subset's curvature
                (every ``B``), the ratio estimator's control variate
                (:func:`ella.marglik.control.curvature_ratio`); 1 (default): ``N / M``
                alone.

        Raises:
            ConfigError: ``n_data`` is not an int from 1 to :data:`MAX_N_DATA`
                (:func:`check_n_data`), or the options do not fit together.
            TrainingDivergedError: the weights are not finite.
            InputDataError: a batch holds NaN or infinite inputs.
            EvidenceError: the curvature is not finite or cannot be decomposed.
        """
        if n_data is not None:
            n_data = check_n_data(n_data)
        if not (math.isfinite(curvature_ratio) and curvature_ratio > 0):
            raise ConfigError(f"curvature_ratio must be positive, got {curvature_ratio}")
        if curvature_ratio != 1.0 and n_data is None:
            raise ConfigError(
                "curvature_ratio scales a subset's curvature: give n_data, the training-set "
                "size the subset stands for"
            )
        check_finite_weights(self.model)
        summed = world is not None and world.distributed
        if summed:
            self.hessian.check_factored(
                "a data-parallel evidence fit needs the Kronecker Hessian (kron)"
            )
        la = self.hessian.laplace_class(
            self.view.sync(),
            self.likelihood,
            sigma_noise=self.sigma_noise,
            prior_precision=torch.ones(self.prior.n_tensors),
            prior_mean=0.0 if self.prior_mean is None else self.view.vector(self.prior_mean),
            backend=BACKENDS[self.backend],
            backend_kwargs=self._backend_options(),
        )
        with warnings.catch_warnings():
            # ASDL registers non-full backward hooks; torch warns about them on every fit.
            warnings.filterwarnings("ignore", message=".*non-full backward hook.*")
            with dependency_may_not_exit("the Laplace fit"), self._layout():
                batches = FiniteBatches(loader, progress)
                self.hessian.fit(la, batches, world.sum_ if summed else None)
        require_finite(self.hessian.curvature(la))
        self.hessian.check_blocks(la, self.prior.n_tensors, self.backend.value)
        if n_data is not None and (n_data != la.n_data or curvature_ratio != 1.0):
            self._scale_to(la, n_data, curvature_ratio)
        self._la = la
        self._terms = self.hessian.terms(la)

    def _backend_options(self) -> dict[str, bool]:
        """The curvature backend's keyword arguments for :attr:`ggn`."""
        options = {"stochastic": self.ggn == GGN.MC}
        if self.ggn == GGN.STRATIFIED:  # the native backend's only (checked in __init__)
            options["stratified"] = True
        return options

    def _scale_to(self, la, n_data: int, curvature_ratio: float) -> None:
        """Turn a fit on ``M`` examples into the subset estimator of ``n_data`` points."""
        self.hessian.check_factored("subset evidence (n_data) needs structure='kron'")
        with dependency_may_not_exit("the Laplace fit"):
            scale_to_n_data(la, n_data, curvature_ratio)

    def _layout(self):
        """The stock backends hook module calls: run FC paths one module per channel."""
        if self.backend == Backend.NATIVE:
            return nullcontext()
        return per_module_calls(self.view.network)

    def log_marginal_likelihood(self, log_prior_precision: torch.Tensor) -> torch.Tensor:
        """Laplace log evidence for per-group log precisions (n_groups,); differentiable.

        With ``structure="kron"`` it is evaluated from the eigenvalues gathered once
        after the fit (:class:`KronEvidenceTerms`, a few vector operations); otherwise by
        laplace-torch's ``log_marginal_likelihood``. Both give the same value
        (``tests/marglik/test_fast_evidence.py``).
        """
        if self._terms is not None:
            return self._terms.log_marginal_likelihood(self.prior, log_prior_precision)
        return self.laplace_log_marginal_likelihood(log_prior_precision)

    def _kron_terms(self, what: str) -> KronEvidenceTerms:
        """The gathered Kronecker terms, or a :class:`ConfigError` saying that ``what``
        needs them."""
        if self._terms is None:
            raise ConfigError(
                f"{what} needs the Kronecker Hessian (structure='kron') and a fitted evidence"
            )
        return self._terms

    def terms(self, log_prior_precision: torch.Tensor) -> dict[str, torch.Tensor]:
        """The log likelihood and the two Occam terms whose sum is the log evidence
        (:meth:`KronEvidenceTerms.terms`; Kronecker structure)."""
        return self._kron_terms("splitting the evidence into its terms").terms(
            self.prior, log_prior_precision
        )

    def optimal_log_prior(self) -> torch.Tensor:
        """The log precisions (n_groups,) that maximise the evidence at the fitted weights
        and curvature (:meth:`KronEvidenceTerms.optimal_log_prior`; Kronecker structure)."""
        return self._kron_terms("the closed-form prior optimum").optimal_log_prior(self.prior)

    def laplace_log_marginal_likelihood(self, log_prior_precision: torch.Tensor) -> torch.Tensor:
        """The same value computed by laplace-torch itself, block by block (the reference)."""
        la = self.laplace
        precision = self.prior.expand(log_prior_precision.exp()).to(parameter_dtype(la))
        with dependency_may_not_exit("the log marginal likelihood"):
            return la.log_marginal_likelihood(prior_precision=precision)

    @torch.no_grad()
    def block_eigenvalues(self) -> list[torch.Tensor]:
        """Eigenvalues of the GGN block of each parameter tensor (clamped at 0)."""
        return self.hessian.block_eigenvalues(self.laplace, self.prior.numels)
