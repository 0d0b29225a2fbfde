"""The Kronecker evidence from gathered eigenvalues equals laplace-torch's block-by-block one."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence, PriorStructure
from tests.cases import classification_evidence


def test_a_centred_prior_changes_only_the_scatter_term(float64):
    """``log p(D|delta)`` with mean ``mu`` equals the zero-mean value plus
    ``1/2 sum_t delta_t (||theta_t||^2 - ||theta_t - mu_t||^2)`` (the curvature and the
    log determinants do not depend on the mean)."""
    zero, centred = (classification_evidence("native", "tensor", centred=c) for c in (0, 1))
    params = [p.detach().flatten() for p in zero.model.parameters()]
    mu = torch.split(centred.prior_mean, [p.numel() for p in params])
    log_delta = torch.linspace(-2.0, 1.0, zero.prior.n_groups)
    delta = PriorStructure(zero.model, "tensor").expand(log_delta.exp())  # the model's tensors
    shift = 0.5 * sum(
        d * (p.square().sum() - (p - m).square().sum())
        for d, p, m in zip(delta, params, mu, strict=True)
    )
    expected = zero.log_marginal_likelihood(log_delta) + shift
    assert centred.log_marginal_likelihood(log_delta).item() == pytest.approx(
        expected.item(), rel=1e-10
    )


def test_fast_kron_evidence_equals_laplace_torch(float64, make_evidence):
    evidence = make_evidence()
    n = evidence.prior.n_groups
    for log_delta in (torch.zeros(n), torch.linspace(-3.0, 2.0, n)):
        values, grads = [], []
        for fn in (evidence.log_marginal_likelihood, evidence.laplace_log_marginal_likelihood):
            leaf = log_delta.clone().requires_grad_()
            value = fn(leaf)
            values.append(value.item())
            grads.append(torch.autograd.grad(value, leaf)[0])
        assert values[0] == pytest.approx(values[1], rel=1e-10)
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-9, atol=1e-9)


def test_fast_kron_evidence_follows_a_refit(float64):
    """The gathered terms belong to the last fit, not the first."""
    evidence = classification_evidence("native", "layer_path")
    first = evidence.log_marginal_likelihood(torch.zeros(evidence.prior.n_groups)).item()
    with torch.no_grad():
        for p in evidence.model.parameters():
            p.mul_(1.5)
    x, y = torch.randn(20, 1, 8, 8), torch.randint(10, (20,))
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    log_delta = torch.zeros(evidence.prior.n_groups)
    second = evidence.log_marginal_likelihood(log_delta).item()
    assert second != pytest.approx(first)
    assert second == pytest.approx(evidence.laplace_log_marginal_likelihood(log_delta).item())


def test_optimal_log_prior_is_the_maximum_of_laplace_torchs_evidence(float64, make_evidence):
    """The closed-form optimum is a stationary point of laplace-torch's own evidence, and
    moving any group's precision away from it lowers that evidence."""
    evidence = make_evidence()
    optimum = evidence.optimal_log_prior()
    assert optimum.shape == (evidence.prior.n_groups,)
    # a group whose maximum is at infinity gets the bound: untrained (zero) biases have
    # ||theta||^2 = 0 and want delta -> inf; a group without curvature wants delta -> 0
    interior = optimum.abs() < 24
    if evidence.prior.mode != "tensor":
        assert interior.all()
    leaf = optimum.clone().requires_grad_()
    value = evidence.laplace_log_marginal_likelihood(leaf)
    (grad,) = torch.autograd.grad(value, leaf)
    scale = evidence.prior.n_groups + float(torch.tensor(evidence.prior.numels).sum()) ** 0.5
    assert grad[interior].abs().max() < 1e-8 * scale
    assert (grad[~interior] * optimum[~interior] >= 0).all()  # rising towards the bound
    for g in interior.nonzero().flatten().tolist()[:: max(1, int(interior.sum()) // 6)]:
        for step in (-1e-2, 1e-2):
            moved = optimum.clone()
            moved[g] += step
            assert evidence.laplace_log_marginal_likelihood(moved) < value


def test_optimal_log_prior_maximises_the_closed_form_evidence_of_linear_regression(float64):
    """A linear model is its own linearisation and its GGN is exact: the optimum must be the
    maximum of log N(y | 0, sigma^2 I + X X^T / delta)."""
    torch.manual_seed(0)
    n, d, sigma = 40, 5, 0.5
    x = torch.randn(n, d)
    y = x @ torch.randn(d) + sigma * torch.randn(n)
    model = nn.Linear(d, 1, bias=False)
    # the MAP weights for a given delta, so that the Laplace evidence is exact there;
    # the optimum is then checked on the closed form's gradient at that delta
    log_delta = torch.tensor(0.0)
    for _ in range(30):  # alternate: MAP weights, then the closed-form prior optimum
        delta = log_delta.exp()
        a = x.T @ x / sigma**2 + delta * torch.eye(d)
        with torch.no_grad():
            model.weight.copy_(torch.linalg.solve(a, x.T @ y / sigma**2)[None])
        evidence = LaplaceEvidence(
            model, PriorStructure(model, "scalar"), likelihood="regression", sigma_noise=sigma
        )
        evidence.fit(DataLoader(TensorDataset(x, y[:, None]), batch_size=40))
        log_delta = evidence.optimal_log_prior()[0]

    def closed_form(log_delta: torch.Tensor) -> torch.Tensor:
        cov = sigma**2 * torch.eye(n) + x @ x.T / log_delta.exp()
        return torch.distributions.MultivariateNormal(torch.zeros(n), cov).log_prob(y)

    leaf = log_delta.clone().requires_grad_()
    (grad,) = torch.autograd.grad(closed_form(leaf), leaf)
    assert abs(grad.item()) < 1e-6
    assert closed_form(log_delta + 0.05) < closed_form(log_delta)
    assert closed_form(log_delta - 0.05) < closed_form(log_delta)


def test_the_terms_are_the_likelihood_and_the_two_occam_factors(float64):
    """``terms`` splits the log evidence into laplace-torch's log likelihood, the scatter
    ``-1/2 sum_i delta_i (theta_i - mu_i)^2`` computed here from the weights, and the log
    determinant ratio ``-1/2 log det(I + H / delta)`` of laplace-torch's own posterior."""
    evidence = classification_evidence("native", "layer_path", centred=True)
    log_delta = torch.linspace(-2.0, 1.0, evidence.prior.n_groups)
    parts = evidence.terms(log_delta)
    total = evidence.log_marginal_likelihood(log_delta)
    torch.testing.assert_close(sum(parts.values()), total)
    la = evidence.laplace
    torch.testing.assert_close(parts["log_likelihood"], la.log_likelihood)
    delta = evidence.prior.expand_diagonal(log_delta.exp())
    theta = torch.cat([p.detach().flatten() for p in evidence.model.parameters()])
    scatter = -0.5 * (delta * (theta - evidence.prior_mean) ** 2).sum()
    torch.testing.assert_close(parts["scatter"], scatter.to(parts["scatter"]))
    la.prior_precision = evidence.prior.expand(log_delta.exp())
    log_det_ratio = la.log_det_ratio  # log det(H + P) - log det P, laplace-torch's
    torch.testing.assert_close(parts["log_det"], (-0.5 * log_det_ratio).to(parts["log_det"]))
    with pytest.raises(ConfigError, match="Kronecker"):
        LaplaceEvidence(evidence.model, evidence.prior, structure="diag", backend="asdl").terms(
            log_delta
        )
