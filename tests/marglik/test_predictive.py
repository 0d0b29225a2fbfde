"""The GLM Laplace predictive against its definition: for a linear classifier the
linearisation is exact, so the predictive is the mean softmax of weights drawn from the
Gaussian posterior, here drawn by another route (the dense covariance built from the
Kronecker factors)."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import LaplaceEvidence, PriorStructure, glm_log_likelihood
from ella.marglik.laplace_internals import hessian_scale, kron_factors


def fitted_linear(float64):
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = (x[:, 0] + 0.5 * torch.randn(64) > 0).long() + (x[:, 1] > 1).long()
    model = nn.Linear(3, 3)
    evidence = LaplaceEvidence(model, PriorStructure(model, "tensor"), ggn="exact")
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=32))
    return model, evidence, x[:10], y[:10]


def posterior_predictive(model, evidence, log_prior, x, y, layout: str) -> float:
    """The mean softmax over 100,000 weights drawn from the dense posterior, its precision
    ``h (B kron A) + delta I`` built from the Kronecker factors (``layout="AB"``: the
    factors' other order, a wrong layout; the bias: ``h B + delta I``)."""
    h, delta = hessian_scale(evidence.laplace), log_prior.exp()
    (b_w, a_w), (b_b,) = kron_factors(evidence.laplace)
    block = torch.kron(b_w, a_w) if layout == "BA" else torch.kron(a_w, b_w)
    precisions = [h * block + delta[0] * torch.eye(9), h * b_b + delta[1] * torch.eye(3)]
    draws = 100_000
    torch.manual_seed(5)
    w = [torch.distributions.MultivariateNormal(torch.zeros(len(p)), precision_matrix=p)
         .sample((draws,)) for p in precisions]  # fmt: skip
    weight = model.weight.detach() + w[0].view(draws, 3, 3)
    bias = model.bias.detach() + w[1]
    probs = torch.softmax(torch.einsum("sij,nj->sni", weight, x) + bias[:, None], -1).mean(0)
    return float(probs.gather(1, y.view(-1, 1)).log().sum())


def test_glm_predictive_is_the_mean_softmax_of_posterior_weights(float64):
    model, evidence, x, y = fitted_linear(float64)
    log_prior = torch.tensor([0.3, -0.2])
    found = glm_log_likelihood(evidence, log_prior, x, y, draws=3000, seed=1)
    expected = posterior_predictive(model, evidence, log_prior, x, y, "BA")
    # the MC error of 3,000 draws is about 0.03 nats here; the wrong layout is 0.7 away
    assert found == pytest.approx(expected, abs=0.1)
    assert abs(found - posterior_predictive(model, evidence, log_prior, x, y, "AB")) > 0.4
    with torch.no_grad():
        map_fit = float(torch.log_softmax(model(x), -1).gather(1, y.view(-1, 1)).sum())
    assert abs(found - map_fit) > 0.1  # the draws move it off the MAP's


def test_tensors_held_at_zero_have_no_draws(float64):
    model, evidence, x, y = fitted_linear(float64)
    log_prior = torch.zeros(2)
    every = glm_log_likelihood(evidence, log_prior, x, y, draws=8, dropped=[True, True])
    with torch.no_grad():
        map_fit = float(torch.log_softmax(model(x), -1).gather(1, y.view(-1, 1)).sum())
    assert every == pytest.approx(map_fit, abs=1e-9)
    same = [glm_log_likelihood(evidence, log_prior, x, y, draws=8, seed=3) for _ in range(2)]
    assert same[0] == same[1]  # a function of its seed
    assert glm_log_likelihood(evidence, log_prior, x, y, draws=8, seed=3, batch_size=3) == (
        pytest.approx(same[0], abs=1e-9)
    )  # the same draws for every batch
