"""The evidence problems the tests share: Bayesian linear regression and its exact
evidence, a tiny mixer and its data, a network's evidence fitted on fixed random data,
and the check that two evidences agree (factors, value and gradient)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.laplace_internals import kron_factors
from ella.models import mixer


def blr_problem(n=40, d=5, sigma=0.3):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(n, d, generator=g)
    w = torch.randn(d, generator=g)
    y = X @ w + sigma * torch.randn(n, generator=g)
    return X, y[:, None], sigma


def blr_log_evidence(X, y, sigma, delta):
    """log N(y; 0, sigma^2 I + X X^T / delta): the exact Bayesian linear regression evidence."""
    n = X.shape[0]
    C = sigma**2 * torch.eye(n) + X @ X.T / delta
    dist = torch.distributions.MultivariateNormal(torch.zeros(n), covariance_matrix=C)
    return dist.log_prob(y[:, 0])


def tiny_mixer():
    return mixer(1, 3, 6, group="C4", width=1, blocks=((1, 1), (2, 2)))


def tiny_data(n=10):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 6, 6, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=4)


def zero_padded(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.padding_mode = "zeros"
    return model


def fitted(model, backend, ggn="exact", seed=0, device="cpu"):
    """The evidence fitted on fixed random data (made on the CPU, then moved to
    ``device`` with the model); ``seed`` seeds the MC labels."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(22, 1, 8, 8, generator=g)
    with torch.no_grad():
        k = model(x[:1]).shape[-1]
    y = torch.randint(k, (22,), generator=g)
    model = model.to(device)
    prior = PriorStructure(model)
    evidence = LaplaceEvidence(model, prior, backend=backend, ggn=ggn)
    torch.manual_seed(seed)  # the MC labels (CPU and every GPU)
    evidence.fit(DataLoader(TensorDataset(x.to(device), y.to(device)), batch_size=8))
    return evidence


def assert_same_evidence(native, reference, rtol=1e-6):
    kn, kr = kron_factors(native.laplace), kron_factors(reference.laplace)
    assert len(kn) == len(kr) == native.prior.n_tensors
    for block_n, block_r in zip(kn, kr, strict=True):
        assert len(block_n) == len(block_r)
        for a, b in zip(block_n, block_r, strict=True):
            a, b = a.cpu(), b.cpu()
            torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * float(b.abs().max()))
    values, grads = [], []
    for evidence in (native, reference):
        device = next(evidence.model.parameters()).device
        log_delta = torch.linspace(-2.0, 1.5, native.prior.n_groups, device=device)
        log_delta.requires_grad_()
        value = evidence.log_marginal_likelihood(log_delta)
        values.append(value)
        grads.append(torch.autograd.grad(value, log_delta)[0].cpu())
    assert values[0].item() == pytest.approx(values[1].item(), rel=rtol)
    torch.testing.assert_close(
        grads[0], grads[1], rtol=rtol, atol=rtol * float(grads[1].abs().max())
    )
