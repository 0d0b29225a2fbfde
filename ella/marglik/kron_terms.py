"""The Kronecker-factored log evidence from eigenvalues gathered once: its terms, their
sum and the closed-form prior optimum, as vector operations over every parameter's
eigenvalue (Immer et al., ICML 2021, Sec. 4; MacKay, Neural Computation 1992)."""

from __future__ import annotations

import torch

from ella.errors import ConfigError
from ella.marglik.laplace_internals import (
    hessian_scale,
    kron_eigenvalues,
)
from ella.marglik.priors import PriorStructure
from ella.runtime.timing import section

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
