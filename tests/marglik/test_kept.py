"""ella.marglik.kept: the evidence of a network without some tensors against the exact
evidence of a smaller Bayesian linear regression."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import LaplaceEvidence, PriorStructure, kept_log_evidence
from tests.marglik.problems import blr_log_evidence


class TwoBlocks(nn.Module):
    """``y = a(x[:, :d_a]) + b(x[:, d_a:])``: two weight tensors, dropped one at a time."""

    def __init__(self, d_a: int, d_b: int):
        super().__init__()
        self.d_a = d_a
        self.a = nn.Linear(d_a, 1, bias=False)
        self.b = nn.Linear(d_b, 1, bias=False)

    def forward(self, x):
        return self.a(x[:, : self.d_a]) + self.b(x[:, self.d_a :])


def orthogonal_regression(n=30, d_a=3, d_b=4, sigma=0.4):
    """Inputs whose two blocks of columns are orthogonal (``X_a^T X_b = 0``), so the exact
    posterior is block-diagonal as the Kronecker-factored one assumes, and targets."""
    g = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(n, d_a + d_b, generator=g))
    X = q * (1 + 4 * torch.rand(d_a + d_b, generator=g))  # columns of different sizes
    y = X @ torch.randn(d_a + d_b, generator=g) + sigma * torch.randn(n, generator=g)
    return X, y[:, None], sigma


def test_kept_log_evidence_is_the_evidence_of_the_smaller_regression(float64):
    """Block ``b`` at zero and block ``a`` at its posterior mean for the precision that
    maximises the exact evidence of the regression on ``X_a`` alone: the evidence without
    ``b``, each precision at its optimum, is that maximum."""
    from scipy.optimize import minimize_scalar

    X, y, sigma = orthogonal_regression()
    d_a = 3
    X_a = X[:, :d_a]
    best = minimize_scalar(
        lambda u: -float(blr_log_evidence(X_a, y, sigma, math.exp(u))),
        bounds=(-8, 8),
        method="bounded",
        options={"xatol": 1e-10},
    )
    delta = math.exp(best.x)
    model = TwoBlocks(d_a, X.shape[1] - d_a)
    with torch.no_grad():
        precision = X_a.T @ X_a / sigma**2 + delta * torch.eye(d_a)
        model.a.weight.copy_(torch.linalg.solve(precision, X_a.T @ y[:, 0] / sigma**2)[None])
        model.b.weight.zero_()
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "tensor"), likelihood="regression", sigma_noise=sigma
    )
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=8))
    kept = kept_log_evidence(evidence, [False, True])
    assert kept == pytest.approx(-best.fun, rel=1e-6)
    # nothing dropped: the evidence at the optimal precisions, as LaplaceEvidence computes it
    everything = evidence.log_marginal_likelihood(evidence.optimal_log_prior())
    assert kept_log_evidence(evidence, [False, False]) == pytest.approx(float(everything), rel=1e-9)
