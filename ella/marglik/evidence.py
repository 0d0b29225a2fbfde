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
import operator
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from laplace import DiagLaplace, FullLaplace, KronLaplace
from laplace.curvature import AsdlGGN, CurvlinopsGGN
from torch import nn
from tqdm.auto import tqdm

from ella.choices import GGN, Backend, HessianStructure
from ella.distributed import World
from ella.errors import ConfigError, EvidenceError, InputDataError, TrainingDivergedError
from ella.evidence_rules import check_evidence_settings
from ella.marglik.laplace_internals import (
    decompose,
    dense_hessian,
    fit_undecomposed,
    hessian_scale,
    kron_eigenvalues,
    kron_factors,
    parameter_dtype,
    scale_to_n_data,
    sum_factors,
)
from ella.marglik.native import NativeGGN
from ella.marglik.per_channel import PerChannelView
from ella.marglik.priors import PriorStructure
from ella.marglik.support import SUPPORTED_MODULES, UnsupportedModuleError, check_supported
from ella.nn.paths import per_module_calls
from ella.runtime.system import available_memory, format_bytes
from ella.runtime.timing import section

_NOT_FINITE = (
    "the GGN of the model is not finite at these weights (overflow); the evidence cannot be "
    "computed. Training probably diverged: try a smaller --lr"
)

#: the largest training-set size ``N`` accepted (far beyond any data set; ``N`` and the
#: ratios ``N / M`` stay exact in float64 and int64 arithmetic)
MAX_N_DATA = 10**12


def check_n_data(n_data, name: str = "n_data") -> int:
    """``n_data`` as a Python ``int`` if it is a valid training-set size ``N``: an integer
    (``int`` or a NumPy/torch integer scalar; not a bool, and no float, even a whole one)
    from 1 to :data:`MAX_N_DATA`.

    Raises:
        ConfigError: naming ``name``, the valid range and the value given.
    """
    valid = f"an int from 1 to {MAX_N_DATA:_}"
    is_bool = isinstance(n_data, bool) or getattr(n_data, "dtype", None) == torch.bool
    try:
        n = None if is_bool else operator.index(n_data)
    except TypeError:
        n = None
    if n is None:
        fix = "pass int(n)" if isinstance(n_data, float) else "pass len(train_set)"
        raise ConfigError(
            f"{name} must be the training-set size, {valid} (floats and bools are refused); "
            f"got {n_data!r} ({type(n_data).__name__}): {fix}"
        )
    if not 1 <= n <= MAX_N_DATA:
        raise ConfigError(f"{name} must be the training-set size, {valid}; got {n}")
    return int(n)


def _non_finite(tensors: list[torch.Tensor]) -> list[int]:
    """Indices of the tensors with a NaN or infinite entry, in order.

    One fused 2-norm over all of them (thousands of small factors or weights): the
    2-norm is finite when the tensor is, unless its squares overflow, so only tensors
    whose 2-norm is not finite are checked entry by entry. The 2-norm's kernel is the
    fast one: the largest |entry| over the default mixer's 1606 factors, and a check of
    each tensor on its own, are slower.
    """
    nonempty = [i for i, t in enumerate(tensors) if t.numel()]
    if not nonempty:
        return []
    norms = torch._foreach_norm([tensors[i].detach() for i in nonempty])
    finite = torch.isfinite(torch.stack([n.double() for n in norms])).tolist()
    suspect = [i for i, ok in zip(nonempty, finite, strict=True) if not ok]
    return [i for i in suspect if not bool(torch.isfinite(tensors[i]).all())]


def _require_finite(tensors: Iterable[torch.Tensor]) -> None:
    if _non_finite(list(tensors)):
        raise EvidenceError(_NOT_FINITE)


def _checking_finiteness(backend: type) -> type:
    """``backend`` with every batch's dense or diagonal curvature checked for finiteness as
    it is computed, so that a non-finite Hessian is refused before laplace-torch
    decomposes it (and may call ``exit()``). Kronecker factors are not checked per batch:
    laplace-torch only adds them up (:func:`fit_undecomposed`), a non-finite entry stays
    non-finite in the sum, and :meth:`LaplaceEvidence.fit` checks the sum once before
    anything decomposes it (two of three passes over the factors saved per fit)."""

    class Checked(backend):
        def full(self, *args, **kwargs):
            loss, hessian = super().full(*args, **kwargs)
            _require_finite([hessian])
            return loss, hessian

        def diag(self, *args, **kwargs):
            loss, hessian = super().diag(*args, **kwargs)
            _require_finite([hessian])
            return loss, hessian

    Checked.__name__ = Checked.__qualname__ = f"FinitenessChecked{backend.__name__}"
    return Checked


_BACKENDS = {
    name: _checking_finiteness(cls)
    for name, cls in {
        Backend.NATIVE: NativeGGN,
        Backend.ASDL: AsdlGGN,
        Backend.CURVLINOPS: CurvlinopsGGN,
    }.items()
}
_LAPLACE = {
    HessianStructure.KRON: KronLaplace,
    HessianStructure.FULL: FullLaplace,
    HessianStructure.DIAG: DiagLaplace,
}


def hessian_bytes(model: nn.Module, structure: HessianStructure | str) -> int:
    """Bytes of the Laplace Hessian of ``model``'s trainable parameters (float32 or the
    parameters' dtype), including the eigendecomposition's copy.

    ``full``: ``2 p^2`` entries; ``diag``: ``2 p``; ``kron``: twice the two factors of
    every ``nn.Linear``/``nn.Conv2d`` (``out^2 + (in k^2 + 1)^2``).
    """
    structure = HessianStructure.parse(structure, "Hessian structure")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return 0
    size = params[0].element_size()
    p = sum(t.numel() for t in params)
    if structure == HessianStructure.FULL:
        return 2 * p * p * size
    if structure == HessianStructure.DIAG:
        return 2 * p * size
    entries = 0
    for m in model.modules():
        if isinstance(m, SUPPORTED_MODULES) and m.weight.requires_grad:
            out_features = m.weight.shape[0]
            fan_in = m.weight[0].numel() + (m.bias is not None)
            entries += out_features**2 + fan_in**2
    return 2 * entries * size


def check_memory(model: nn.Module, structure: HessianStructure | str) -> None:
    """Refuse a Hessian that cannot fit in the memory available now, with the estimate."""
    need, have = hessian_bytes(model, structure), available_memory()
    if have is not None and need > have:
        p = sum(t.numel() for t in model.parameters() if t.requires_grad)
        said = (
            f"the {HessianStructure.parse(structure).value} Laplace Hessian of this model "
            f"({p:,} parameters) needs about {format_bytes(need)}, but only "
            f"{format_bytes(have)} of memory is available; use {{}} (or a smaller model)"
        )
        raise ConfigError(
            said.format("the Kronecker Hessian, 'kron'"),
            command_line=said.format("--hessian kron"),
        )


@contextmanager
def dependency_may_not_exit(what: str) -> Iterator[None]:
    """Turn a dependency's ``exit()`` into an :class:`~ella.errors.EvidenceError`.

    laplace-torch 0.3 calls ``exit()`` when an eigendecomposition does not converge
    (``laplace.utils.symeig``); the process must not end without a word.
    """
    try:
        yield
    except SystemExit as err:
        raise EvidenceError(
            f"{what} failed: laplace-torch could not eigendecompose the curvature (it "
            "tried to end the process); the curvature is probably not finite. Training "
            "probably diverged: try a smaller --lr"
        ) from err


class _FiniteBatches:
    """A loader's batches, refusing inputs or targets with NaN or infinite values; other
    attributes (``dataset``, ``batch_size``) are the loader's, as laplace-torch reads them.

    With ``progress``, one transient bar counts the batches (laplace-torch's own bar is
    off, so that a round leaves no line between the epochs' bar and the next)."""

    def __init__(self, loader: Iterable, progress: bool = False):
        self.loader = loader
        self.progress = progress

    def __iter__(self) -> Iterator:
        # a bar beside the loader, not around it: a tqdm that iterates a DataLoader draws
        # from torch's global generator, which the MC GGN samples from (a run must not
        # depend on whether it shows progress)
        total = len(self.loader) if hasattr(self.loader, "__len__") else None
        bar = tqdm(total=total, desc="evidence fit", leave=False, disable=not self.progress)
        try:
            for batch in self.loader:
                bar.update()
                x, y = batch[0], batch[1]
                if not torch.isfinite(x).all():
                    raise InputDataError("the input data contains NaN or infinite values")
                if y.is_floating_point() and not torch.isfinite(y).all():
                    raise InputDataError("the targets contain NaN or infinite values")
                yield batch
        finally:
            bar.close()

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)


def non_finite_parameters(model: nn.Module) -> list[str]:
    """Names of ``model``'s parameters with a NaN or infinite entry, in order (one fused
    check over all of them first, :func:`_non_finite`)."""
    named = list(model.named_parameters())
    return [named[i][0] for i in _non_finite([p for _, p in named])]


def _check_finite_weights(model: nn.Module) -> None:
    bad = non_finite_parameters(model)
    if bad:
        raise TrainingDivergedError(
            f"the weights of {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} are not "
            "finite (training diverged); the evidence cannot be fitted"
        )


#: the bracket of the closed-form prior optimum in log precision; a group whose maximum
#: lies outside gets the bound (see :meth:`KronEvidenceTerms.optimal_log_prior`)
LOG_PRIOR_BOUNDS = (-25.0, 25.0)


def at_bound(log_prior: torch.Tensor) -> torch.Tensor:
    """Which entries of an optimum (n_groups,) sit at :data:`LOG_PRIOR_BOUNDS` (within 1),
    i.e. whose evidence keeps rising towards zero or infinite precision."""
    low, high = LOG_PRIOR_BOUNDS
    return (log_prior <= low + 1) | (log_prior >= high - 1)


def order_by_group(group_of_tensor: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """The permutation that sorts values concatenated tensor after tensor (``sizes[t]`` of
    tensor ``t``, (T,)) by their tensor's group (``group_of_tensor``, (T,)), stably.

    The same as ``argsort(group_of_tensor.repeat_interleave(sizes), stable=True)``, built
    from the tensors' slices instead of sorting every value: ``O(T log T + n)`` for ``n``
    values instead of ``O(n log n)``.

    Returns:
        Indices (sum of ``sizes``,), long.
    """
    starts = sizes.cumsum(0) - sizes  # where each tensor's values begin
    tensors = torch.argsort(group_of_tensor, stable=True)  # the tensors, group after group
    moved = sizes[tensors]
    shift = starts[tensors] - (moved.cumsum(0) - moved)  # old start - new start
    return torch.arange(int(sizes.sum()), device=sizes.device) + shift.repeat_interleave(moved)


class KronEvidenceTerms:
    r"""The Kronecker-factored log evidence as a function of one precision per tensor.

    laplace-torch evaluates ``log det(H + P)`` block by block in Python (about a
    thousand blocks for the default mixer, every hyperparameter step). With the factors
    eigendecomposed once, every term is a sum over the
    parameters of a function of that parameter's precision ``delta_t`` (Immer et al.,
    ICML 2021, Sec. 4; Martens & Grosse, ICML 2015, for the Kronecker eigenvalues):

    .. math::

        \log\det(H + P) &= \sum_t \sum_i \log(h \lambda_{t,i} + \delta_t), \\
        \log\det P &= \sum_t n_t \log \delta_t, \\
        (\theta - \mu)^\top P (\theta - \mu) &= \sum_t \delta_t \|\theta_t - \mu_t\|^2,

    with :math:`\lambda_t = \lambda_B \otimes \lambda_A` the eigenvalues of tensor
    :math:`t`'s block, :math:`n_t` its size and :math:`h` laplace-torch's curvature scale
    :math:`1 / \sigma^2` (:func:`hessian_scale`).

    So the eigenvalues of all blocks are concatenated once, with the tensor each
    belongs to, and every evaluation is one gather, one ``log`` and a sum.
    The log likelihood term is laplace-torch's (fixed after the fit).

    Attributes:
        eigenvalues: ``h lambda`` of every parameter, concatenated over tensors (P,).
        tensor_index: the parameter tensor of each eigenvalue (P,), long.
        numels: parameters per tensor (T,).
        squared_norms: ``||theta_t - mu_t||^2`` per tensor (T,).
        log_likelihood: ``log p(D | theta)`` at the fitted weights (scalar).
    """

    def __init__(
        self,
        eigenvalues: torch.Tensor,
        tensor_index: torch.Tensor,
        numels: torch.Tensor,
        squared_norms: torch.Tensor,
        log_likelihood: torch.Tensor,
    ):
        self.eigenvalues = eigenvalues
        self.tensor_index = tensor_index
        self.numels = numels
        self.squared_norms = squared_norms
        self.log_likelihood = log_likelihood

    @classmethod
    @section("evidence terms")
    @torch.no_grad()
    def from_laplace(cls, la) -> KronEvidenceTerms:
        """Gather the terms of a fitted laplace-torch ``KronLaplace`` (undamped)."""
        if la.damping:
            raise ConfigError("the fast Kronecker evidence assumes an undamped KronLaplace")
        factor = hessian_scale(la)
        lams, index = [], []
        for t, eigs in enumerate(kron_eigenvalues(la)):
            lam = eigs[0] if len(eigs) == 1 else torch.outer(eigs[0], eigs[1]).flatten()
            lams.append(lam * factor)
            index.append(torch.full((lam.numel(),), t, dtype=torch.long, device=lam.device))
        numels = torch.tensor([len(v) for v in lams], dtype=lams[0].dtype, device=lams[0].device)
        diff = la.mean - la.prior_mean
        sizes = [int(n) for n in numels.tolist()]
        squared = torch.stack([(d * d).sum() for d in torch.split(diff.detach(), sizes)])
        return cls(
            torch.cat(lams),
            torch.cat(index),
            numels,
            squared.to(numels.dtype),
            la.log_likelihood.detach(),
        )

    def terms(
        self, prior: PriorStructure, log_prior_precision: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The three terms whose sum is :meth:`log_marginal_likelihood`: ``log_likelihood``
        ``log p(D|theta)``, ``log_det`` ``-1/2 [log det(H + P) - log det P]`` and
        ``scatter`` ``-1/2 theta^T P theta`` (the last two are the Occam factor)."""
        log_delta = prior.expand(log_prior_precision).to(self.eigenvalues)  # (T,)
        delta = log_delta.exp()
        log_det_posterior = torch.log(self.eigenvalues + delta[self.tensor_index]).sum()
        log_det_prior = (self.numels * log_delta).sum()
        return {
            "log_likelihood": self.log_likelihood,
            "log_det": -0.5 * (log_det_posterior - log_det_prior),
            "scatter": -0.5 * (delta * self.squared_norms).sum(),
        }

    def log_marginal_likelihood(
        self, prior: PriorStructure, log_prior_precision: torch.Tensor
    ) -> torch.Tensor:
        """``log p(D|theta) - 1/2 [log det(H + P) - log det P + theta^T P theta]``."""
        parts = self.terms(prior, log_prior_precision)
        return parts["log_likelihood"] + parts["log_det"] + parts["scatter"]

    @section("closed-form optimum")
    @torch.no_grad()
    def optimal_log_prior(
        self,
        prior: PriorStructure,
        bounds: tuple[float, float] = LOG_PRIOR_BOUNDS,
        max_iterations: int = 100,
    ) -> torch.Tensor:
        """The log precisions that maximise :meth:`log_marginal_likelihood` at the fitted
        weights and curvature, one per group.

        With the weights and the GGN fixed, the evidence separates over the groups,
        and its derivative in the precision ``delta_g`` of group ``g`` is
        ``1/2 [gamma_g(delta_g) / delta_g - ||theta_g||^2]`` with
        ``gamma_g(delta) = sum_i r_i``, ``r_i = h lambda_i / (h lambda_i + delta)`` (the
        group's effective number of parameters; MacKay, Neural Computation 1992, Eq. 4.9,
        whose update ``delta = gamma / ||theta||^2`` is this stationarity condition).

        The root is found in ``u = log delta`` for all groups at once, as the zero of
        ``f(u) = log gamma(e^u) - u - log ||theta_g||^2``. ``f`` falls strictly, with slope
        ``f'(u) = -1 - sum_i r_i (1 - r_i) / gamma`` between -1 and -2, so Newton's method
        converges in a few steps (each one pass over the eigenvalues); a step that would
        leave the bracket kept around the root is replaced by bisection, so the iteration
        cannot fail. A group whose maximum lies outside ``bounds`` (no curvature at all,
        or zero weights) gets the bound. Sums are taken in float64.

        Args:
            prior: the groups.
            bounds: bracket in log precision.
            max_iterations: passes over the eigenvalues at most (bisection alone would
                need about 50 for float64 precision).

        Returns:
            Log precisions (n_groups,), in the dtype of the eigenvalues.
        """
        group_of_tensor = prior.index.to(self.eigenvalues.device)  # (T,)
        per_tensor = torch.bincount(self.tensor_index, minlength=len(group_of_tensor))  # (T,)
        # eigenvalues sorted by group, so that per-group sums are sums of slices
        eigenvalues = self.eigenvalues.double()[order_by_group(group_of_tensor, per_tensor)]
        counts = torch.zeros(prior.n_groups, dtype=torch.long, device=group_of_tensor.device)
        counts.index_add_(0, group_of_tensor, per_tensor)  # (n_groups,)
        sizes = counts.tolist()
        squared = eigenvalues.new_zeros(prior.n_groups)  # ||theta_g - mu_g||^2
        squared.index_add_(0, group_of_tensor, self.squared_norms.double())
        low = torch.full_like(squared, bounds[0])
        high = torch.full_like(squared, bounds[1])

        def group_sums(values: torch.Tensor) -> torch.Tensor:
            return torch.stack([part.sum() for part in values.split(sizes)])

        def ratios(u: torch.Tensor) -> torch.Tensor:
            """``r_i = h lambda_i / (h lambda_i + delta_g)`` for every eigenvalue, (P,)."""
            return eigenvalues / (eigenvalues + u.exp().repeat_interleave(counts))

        def rising(u: torch.Tensor) -> torch.Tensor:
            """Whether the evidence still increases with delta at ``u``."""
            return group_sums(ratios(u)) > squared * u.exp()

        def f_and_slope(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            r = ratios(u)
            gamma, spread = group_sums(r), group_sums(r * (1 - r))
            return gamma.log() - u - squared.log(), -1 - spread / gamma

        # a group whose evidence still rises at the upper bound gets it, and one that
        # falls at the lower bound (no curvature, or no curvature and no weights) gets that;
        # every other group has gamma > 0 and ||theta||^2 > 0, so f is finite
        at_high, at_low = rising(high), ~rising(low)
        fixed = at_high | at_low
        u = torch.where(at_high, high, torch.where(at_low, low, torch.zeros_like(low)))
        for _ in range(max_iterations):
            if bool(fixed.all()):
                break
            f, slope = f_and_slope(u)
            above = f > 0  # the evidence still increases with delta: the root is above u
            low = torch.where(above, u, low)
            high = torch.where(above, high, u)
            newton = u - f / slope
            tolerance = 1e-12 * u.abs().clamp(min=1.0)
            converged = ((newton - u).abs() <= tolerance) | (high - low <= tolerance)
            inside = torch.isfinite(newton) & (newton > low) & (newton < high)
            step = torch.where(inside | converged, newton, 0.5 * (low + high))
            u = torch.where(fixed, u, step)
            fixed |= converged
        return u.to(self.eigenvalues.dtype)


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
        self._terms: KronEvidenceTerms | None = None
        if self.structure == HessianStructure.KRON:
            check_supported(self.view.network)
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
        _check_finite_weights(self.model)
        summed = world is not None and world.distributed
        if summed and self.structure != HessianStructure.KRON:
            raise ConfigError("a data-parallel evidence fit needs the Kronecker Hessian (kron)")
        cls = _LAPLACE[self.structure]
        la = cls(
            self.view.sync(),
            self.likelihood,
            sigma_noise=self.sigma_noise,
            prior_precision=torch.ones(self.prior.n_tensors),
            prior_mean=0.0 if self.prior_mean is None else self.view.vector(self.prior_mean),
            backend=_BACKENDS[self.backend],
            backend_kwargs=self._backend_options(),
        )
        with warnings.catch_warnings():
            # ASDL registers non-full backward hooks; torch warns about them on every fit.
            warnings.filterwarnings("ignore", message=".*non-full backward hook.*")
            with dependency_may_not_exit("the Laplace fit"), self._layout():
                batches = _FiniteBatches(loader, progress)
                if self.structure != HessianStructure.KRON:
                    la.fit(batches, progress_bar=False)
                else:  # decomposed once, eigenvectors deferred (LazyKronDecomposed)
                    fit_undecomposed(la, batches, progress=False)
                    if summed:  # after the sum over the processes
                        sum_factors(la, world.sum_)
                    else:
                        decompose(la)
        self._check_finite_curvature(la)
        if self.structure == HessianStructure.KRON:
            blocks = len(kron_factors(la))
            if blocks != self.prior.n_tensors:
                raise UnsupportedModuleError(
                    f"the {self.backend.value} backend returned {blocks} Kronecker blocks for "
                    f"{self.prior.n_tensors} parameter tensors; a module is unsupported or "
                    "not called as module(x) in forward"
                )
        if n_data is not None and (n_data != la.n_data or curvature_ratio != 1.0):
            self._scale_to(la, n_data, curvature_ratio)
        self._la = la
        self._terms = (
            KronEvidenceTerms.from_laplace(la) if self.structure == HessianStructure.KRON else None
        )

    def _backend_options(self) -> dict[str, bool]:
        """The curvature backend's keyword arguments for :attr:`ggn`."""
        options = {"stochastic": self.ggn == GGN.MC}
        if self.ggn == GGN.STRATIFIED:  # the native backend's only (checked in __init__)
            options["stratified"] = True
        return options

    def _scale_to(self, la, n_data: int, curvature_ratio: float) -> None:
        """Turn a fit on ``M`` examples into the subset estimator of ``n_data`` points."""
        if self.structure != HessianStructure.KRON:
            raise ConfigError("subset evidence (n_data) needs structure='kron'")
        with dependency_may_not_exit("the Laplace fit"):
            scale_to_n_data(la, n_data, curvature_ratio)

    def _layout(self):
        """The stock backends hook module calls: run FC paths one module per channel."""
        if self.backend == Backend.NATIVE:
            return nullcontext()
        return per_module_calls(self.view.network)

    def _check_finite_curvature(self, la) -> None:
        if self.structure == HessianStructure.KRON:
            factors = [f for block in kron_factors(la) for f in block]
        else:
            factors = [dense_hessian(la)]
        _require_finite(factors)

    def log_marginal_likelihood(self, log_prior_precision: torch.Tensor) -> torch.Tensor:
        """Laplace log evidence for per-group log precisions (n_groups,); differentiable.

        With ``structure="kron"`` it is evaluated from the eigenvalues gathered once
        after the fit (:class:`KronEvidenceTerms`, a few vector operations); otherwise by
        laplace-torch's ``log_marginal_likelihood``. Both give the same value
        (``tests/marglik/test_fast_evidence.py``).
        """
        la = self.laplace
        if self._terms is not None:
            return self._terms.log_marginal_likelihood(self.prior, log_prior_precision)
        precision = self.prior.expand(log_prior_precision.exp()).to(parameter_dtype(la))
        with dependency_may_not_exit("the log marginal likelihood"):
            return la.log_marginal_likelihood(prior_precision=precision)

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
        la = self.laplace
        factor = hessian_scale(la)
        out = []
        if self.structure == HessianStructure.KRON:
            for eigs in kron_eigenvalues(la):
                lam = eigs[0] if len(eigs) == 1 else torch.outer(eigs[0], eigs[1]).flatten()
                out.append(lam.clamp_min(0) * factor)
            return out
        start = 0
        for n in self.prior.numels:
            if self.structure == HessianStructure.FULL:
                block = dense_hessian(la)[start : start + n, start : start + n]
                lam = torch.linalg.eigvalsh(block)
            else:
                lam = dense_hessian(la)[start : start + n]
            out.append(lam.clamp_min(0) * factor)
            start += n
        return out
