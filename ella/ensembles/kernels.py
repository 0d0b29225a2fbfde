"""Repulsion kernels of particle ensembles and their Wasserstein-gradient forces.

Each ensemble member is a particle ``theta_i``; repulsive ensembles (D'Angelo &
Fortuin, NeurIPS 2021) move particles by Wasserstein gradient descent (WGD)::

    theta_i <- theta_i + eta * ( grad log p(theta_i | D)
                                 - sum_j grad_i k(theta_i, theta_j) / sum_j k(theta_i, theta_j) )

The second term is the gradient of the log kernel density estimate
``log sum_j k(theta, theta_j)`` at ``theta = theta_i`` (the other particles held
fixed). Every kernel here compares *features* of the members, arranged as
``phi`` of shape (M, B, D): ``B`` feature vectors per member, compared position
by position and averaged,

    k(theta_i, theta_j) = 1/B sum_b exp(-||phi_ib - phi_jb||^2 / h_b),

with a median-heuristic bandwidth ``h_b = median_{i<j} ||phi_ib - phi_jb||^2 / log M``
per position. The three methods differ only in the features:

* weight-space RDE: the flattened parameters, ``B = 1`` (D'Angelo & Fortuin 2021);
* function-space RDE: the class probabilities on the minibatch, flattened, ``B = 1``;
* FoRDE (Trinh et al., ICLR 2024): per training input ``x_b`` the unit-normalised
  input gradient of the true-class logit, ``s = grad_x f(x_b)_{y_b} / ||.||``, in
  the eigenbasis of the training data and scaled by ``sqrt(diag(Sigma^-1))``
  (identity lengthscales, the PCA eigenvalues, or the mix
  ``Sigma_alpha^-1 = (1 - alpha) I + alpha Lambda``), so that the RBF above is
  ``exp(-(s_i - s_j)^T U Sigma^-1 U^T (s_i - s_j) / h)``.

:func:`repulsion_force` returns the analytic force ``grad_phi log sum_j k`` on the
features; the trainer pulls it back to the weights with one vector-Jacobian
product. :func:`log_kernel_density` is the same quantity in closed form, whose
autograd gradient the tests compare with the analytic force.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "LengthscaleMetric",
    "log_kernel_density",
    "median_bandwidth",
    "normalised_input_gradients",
    "pairwise_sq_distances",
    "repulsion_force",
]

_EPS = 1e-12


def _check_features(phi: torch.Tensor) -> None:
    if phi.dim() != 3:
        raise ValueError(
            f"expected member features of shape (M, B, D), got shape {tuple(phi.shape)}"
        )


def pairwise_sq_distances(phi: torch.Tensor) -> torch.Tensor:
    """Squared distances between members at each position.

    Args:
        phi: features (M, B, D).

    Returns:
        ``d[i, j, b] = ||phi[i, b] - phi[j, b]||^2``, shape (M, M, B).
    """
    _check_features(phi)
    diff = phi[:, None] - phi[None, :]  # (M, M, B, D)
    return diff.square().sum(-1)


@torch.no_grad()
def median_bandwidth(sq_dist: torch.Tensor) -> torch.Tensor:
    """Median heuristic ``h_b = median_{i<j} d_ijb / log M`` (Liu & Wang 2016), per position.

    Args:
        sq_dist: (M, M, B) squared distances, ``M >= 2``.

    Returns:
        (B,) bandwidths, at least ``1e-12``.
    """
    m = sq_dist.shape[0]
    if m < 2:
        raise ValueError("the median heuristic needs at least two members")
    rows, cols = torch.triu_indices(m, m, offset=1)
    pairs = sq_dist[rows, cols]  # (M(M-1)/2, B)
    return (pairs.median(dim=0).values / math.log(m)).clamp_min(_EPS)


def log_kernel_density(phi: torch.Tensor, bandwidth: torch.Tensor | None = None) -> torch.Tensor:
    """``log sum_j k(theta_i, theta_j)`` with the second argument held fixed (the KDE form).

    Gradients flow only through the first argument, as in the WGD update, so
    ``autograd.grad(log_kernel_density(phi).sum(), phi)`` is the repulsion force.

    Args:
        phi: features (M, B, D).
        bandwidth: (B,) bandwidths; default the median heuristic.

    Returns:
        (M,) log kernel density at each member.
    """
    _check_features(phi)
    m, b, _ = phi.shape
    diff = phi[:, None] - phi.detach()[None, :]
    sq = diff.square().sum(-1)  # (M, M, B)
    if bandwidth is None:
        bandwidth = median_bandwidth(sq.detach())
    kernel = torch.exp(-sq / bandwidth).mean(-1)  # k_ij, (M, M)
    return kernel.sum(1).log()


def repulsion_force(phi: torch.Tensor, bandwidth: torch.Tensor | None = None) -> torch.Tensor:
    """Analytic WGD repulsion ``sum_j grad_{phi_i} k_ij / sum_j k_ij`` on the features.

    With ``k_ij = 1/B sum_b exp(-d_ijb / h_b)``, ``grad_{phi_ib} k_ij =
    -2 (phi_ib - phi_jb) exp(-d_ijb / h_b) / (B h_b)``. Gradient *descent* on
    ``phi . force`` moves members apart (the minus sign of the WGD update).

    Args:
        phi: features (M, B, D) (detached inside).
        bandwidth: (B,) bandwidths; default the median heuristic.

    Returns:
        (M, B, D) force; zeros for a single member (it has nothing to repel).
    """
    _check_features(phi)
    phi = phi.detach()
    m, b, _ = phi.shape
    if m == 1:
        return torch.zeros_like(phi)
    diff = phi[:, None] - phi[None, :]  # (M, M, B, D)
    sq = diff.square().sum(-1)
    if bandwidth is None:
        bandwidth = median_bandwidth(sq)
    kappa = torch.exp(-sq / bandwidth)  # (M, M, B)
    density = kappa.mean(-1).sum(1)  # sum_j k_ij, (M,)
    grad = -2.0 * (kappa / bandwidth)[..., None] * diff / b  # d k_ij / d phi_ib, (M, M, B, D)
    return grad.sum(1) / density[:, None, None]


class LengthscaleMetric:
    """The FoRDE base-kernel metric ``U Sigma_alpha^-1 U^T`` as a feature map.

    ``Sigma_alpha^-1 = (1 - alpha) I + alpha Lambda`` (Trinh et al. 2024, Sec. 4):
    ``alpha = 0`` is FoRDE-Identity, ``alpha = 1`` FoRDE-PCA (repulse strongly
    along the data's high-variance directions). :meth:`__call__` maps unit
    gradients ``s`` (N, D) to ``sqrt(diag Sigma^-1) * (U^T s)`` so that squared
    Euclidean distances of the outputs are the Mahalanobis distances of the paper.

    Args:
        eigenvectors: (D, D) orthonormal columns ``U`` (None: identity).
        eigenvalues: (D,) data-covariance eigenvalues ``Lambda`` (None: identity).
        alpha: mixing weight in [0, 1].
    """

    def __init__(
        self,
        eigenvectors: torch.Tensor | None = None,
        eigenvalues: torch.Tensor | None = None,
        alpha: float = 1.0,
    ):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if (eigenvectors is None) != (eigenvalues is None):
            raise ValueError("give both eigenvectors and eigenvalues, or neither")
        self.eigenvectors = eigenvectors
        self.scale = None
        if eigenvalues is not None and alpha > 0:
            self.scale = ((1 - alpha) + alpha * eigenvalues.clamp_min(0)).sqrt()
        self.alpha = alpha

    @classmethod
    def identity(cls) -> LengthscaleMetric:
        """The Euclidean metric: every input direction at lengthscale 1."""
        return cls()

    @classmethod
    def from_data(cls, x: torch.Tensor, alpha: float = 1.0) -> LengthscaleMetric:
        """PCA of training images ``x`` (N, C, H, W): eigen-decomposition of their covariance."""
        flat = x.reshape(len(x), -1).double()
        flat = flat - flat.mean(0)
        cov = flat.T @ flat / max(len(x) - 1, 1)
        eigenvalues, eigenvectors = torch.linalg.eigh(cov)
        order = eigenvalues.argsort(descending=True)
        return cls(eigenvectors[:, order].to(x.dtype), eigenvalues[order].to(x.dtype), alpha=alpha)

    def to(self, device: torch.device | str) -> LengthscaleMetric:
        """Move the eigenvectors and scales to ``device`` (in place); returns ``self``."""
        if self.eigenvectors is not None:
            self.eigenvectors = self.eigenvectors.to(device)
        if self.scale is not None:
            self.scale = self.scale.to(device)
        return self

    def __call__(self, s: torch.Tensor) -> torch.Tensor:
        """Map (..., D) vectors to metric coordinates (..., D)."""
        if self.eigenvectors is None:
            return s
        z = s @ self.eigenvectors.to(s)
        return z if self.scale is None else z * self.scale.to(s)


def normalised_input_gradients(grads: torch.Tensor) -> torch.Tensor:
    """Unit-normalise per-input gradients: (M, B, *input) -> (M, B, D), ``D = prod(input)``."""
    flat = grads.flatten(2)
    return flat / (flat.square().sum(-1, keepdim=True) + _EPS).sqrt()
