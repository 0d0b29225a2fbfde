"""The Kronecker evidence from gathered eigenvalues equals laplace-torch's block-by-block one."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import LaplaceEvidence, PriorStructure
from ella.models import mixer


def classification_evidence(backend: str, structure: str, n_data: int | None = None):
    torch.manual_seed(0)
    model = mixer(1, 10, 8, "C4", width=1)
    x, y = torch.randn(20, 1, 8, 8), torch.randint(10, (20,))
    evidence = LaplaceEvidence(model, PriorStructure(model, structure), backend=backend)
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=8), n_data=n_data)
    return evidence


def regression_evidence():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
    x = torch.randn(30, 3)
    y = torch.sin(x[:, :2]) + 0.1 * torch.randn(30, 2)
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "tensor"), likelihood="regression", sigma_noise=0.3
    )
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    return evidence


CASES = {
    "native, layer_path": lambda: classification_evidence("native", "layer_path"),
    "native, tensor": lambda: classification_evidence("native", "tensor"),
    "native, scalar": lambda: classification_evidence("native", "scalar"),
    "asdl, layer_path": lambda: classification_evidence("asdl", "layer_path"),
    "native, subset of 20 for N=300": lambda: classification_evidence(
        "native", "layer_path", n_data=300
    ),
    "regression, sigma 0.3": regression_evidence,
}


@pytest.mark.parametrize("case", list(CASES))
def test_fast_kron_evidence_equals_laplace_torch(float64, case):
    evidence = CASES[case]()
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
