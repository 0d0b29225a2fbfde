"""The selection criteria's evidence quantities against closed forms.

Bayesian linear regression with grouped priors (weight and bias, one precision each) is its
own linearisation, and at the MAP weights its Laplace evidence is exact; with the full GGN
(weight-bias cross terms included):

- ella's log evidence equals ``log N(y | 0, sigma^2 I + X diag(1/delta) X^T)``;
- the conditional marginal likelihood (Lotfi et al., ICML 2022),
  ``log p(D_2 | D_1) = log p(D) - log p(D_1)``, the difference of two of ella's evidences,
  equals the exact Gaussian predictive of ``D_2`` under ``D_1``'s posterior;
- the re-optimised precisions of the Kronecker evidence satisfy MacKay's fixed point
  ``delta_g = gamma_g(delta_g) / ||theta_g||^2`` (Neural Computation 1992, Eq. 4.9), with
  ``gamma_g = sum_i h lambda_i / (h lambda_i + delta_g)`` over the group's eigenvalues.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import LaplaceEvidence, PriorStructure
from ella.models import mixer

SIGMA = 0.4
#: (weight, bias) log precisions; the bias's prior is far from the weight's
LOG_PRIORS = [(0.0, 0.0), (1.2, -0.7), (-2.0, 3.0)]


def regression_data(n: int, d: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.randn(d, generator=g) + 1.5 + SIGMA * torch.randn(n, generator=g)
    return x, y


def with_ones(x: torch.Tensor) -> torch.Tensor:
    """The design matrix of weight and bias, ``[X, 1]`` (n, d + 1)."""
    return torch.cat([x, torch.ones(len(x), 1)], 1)


def posterior(x: torch.Tensor, y: torch.Tensor, log_prior: tuple[float, float]):
    """The exact Gaussian posterior of ``[w, b]``: its mean and covariance."""
    delta = torch.tensor([log_prior[0]] * x.shape[1] + [log_prior[1]]).exp()
    design = with_ones(x)
    precision = design.T @ design / SIGMA**2 + torch.diag(delta)
    cov = torch.linalg.inv(precision)
    return cov @ design.T @ y / SIGMA**2, cov


def closed_form_evidence(x, y, log_prior) -> float:
    delta = torch.tensor([log_prior[0]] * x.shape[1] + [log_prior[1]]).exp()
    design = with_ones(x)
    cov = SIGMA**2 * torch.eye(len(x)) + design @ torch.diag(1 / delta) @ design.T
    return float(torch.distributions.MultivariateNormal(torch.zeros(len(x)), cov).log_prob(y))


def ella_evidence(x, y, log_prior) -> float:
    """ella's log evidence of a linear model at its exact MAP weights (full GGN)."""
    mean, _ = posterior(x, y, log_prior)
    model = nn.Linear(x.shape[1], 1)
    with torch.no_grad():
        model.weight.copy_(mean[:-1][None])
        model.bias.copy_(mean[-1:])
    prior = PriorStructure(model, "tensor")
    evidence = LaplaceEvidence(
        model, prior, likelihood="regression", structure="full", sigma_noise=SIGMA
    )
    evidence.fit(DataLoader(TensorDataset(x, y[:, None]), batch_size=16))
    return float(evidence.log_marginal_likelihood(torch.tensor(log_prior)))


@pytest.mark.parametrize("log_prior", LOG_PRIORS)
def test_the_evidence_of_linear_regression_is_the_gaussian_closed_form(float64, log_prior):
    x, y = regression_data(40)
    assert ella_evidence(x, y, log_prior) == pytest.approx(
        closed_form_evidence(x, y, log_prior), abs=1e-8
    )


@pytest.mark.parametrize("log_prior", LOG_PRIORS)
def test_the_conditional_marginal_likelihood_is_the_exact_gaussian_predictive(float64, log_prior):
    x, y = regression_data(40)
    first, second = slice(0, 30), slice(30, 40)
    conditional = ella_evidence(x, y, log_prior) - ella_evidence(x[first], y[first], log_prior)
    mean, cov = posterior(x[first], y[first], log_prior)
    design = with_ones(x[second])
    predictive = torch.distributions.MultivariateNormal(
        design @ mean, SIGMA**2 * torch.eye(10) + design @ cov @ design.T
    )
    assert conditional == pytest.approx(float(predictive.log_prob(y[second])), abs=1e-8)
    # conditioning on D_1 matters: the marginal of D_2 alone is another number
    assert abs(conditional - ella_evidence(x[second], y[second], log_prior)) > 1.0


@pytest.mark.parametrize("mode", ["layer_path", "tensor"])
def test_reoptimised_precisions_are_mackays_fixed_point(float64, mode):
    torch.manual_seed(0)
    model = mixer(1, 10, 8, "C4", width=1)
    x, y = torch.randn(20, 1, 8, 8), torch.randint(10, (20,))
    with torch.no_grad():  # weights away from zero in every tensor, so every group's
        for p in model.parameters():  # optimum is finite
            p.add_(0.1 * torch.randn_like(p))
    evidence = LaplaceEvidence(model, PriorStructure(model, mode))
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    prior = evidence.prior  # over the tensors the curvature sees (per-channel FC maps)
    optimum = evidence.optimal_log_prior()
    delta = optimum.exp()
    gamma = torch.zeros(prior.n_groups)
    norms = torch.zeros(prior.n_groups)
    params = [p for p in evidence.view.network.parameters() if p.requires_grad]
    for t, (lam, p) in enumerate(zip(evidence.block_eigenvalues(), params, strict=True)):
        g = int(prior.index[t])
        gamma[g] += (lam / (lam + delta[g])).sum()
        norms[g] += p.detach().pow(2).sum()
    assert delta == pytest.approx(gamma / norms, rel=1e-6)
    # and not at another point: a tenfold precision breaks it
    moved = 10 * delta
    gamma_moved = torch.zeros(prior.n_groups)
    for t, lam in enumerate(evidence.block_eigenvalues()):
        g = int(prior.index[t])
        gamma_moved[g] += (lam / (lam + moved[g])).sum()
    assert not torch.allclose(moved, gamma_moved / norms, rtol=1e-2)
