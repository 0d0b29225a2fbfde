"""The subset evidence's control variate: the ratio estimator of the curvature's scale."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.control import curvature_ratio, output_hessian_trace
from ella.marglik.laplace_internals import kron_factors


def test_output_hessian_trace_is_the_trace_of_the_softmax_hessian(float64):
    logits = torch.randn(6, 5, generator=torch.Generator().manual_seed(0)) * 3
    traces = output_hessian_trace(logits)
    for row, trace in zip(logits, traces, strict=True):
        p = row.softmax(-1)
        assert trace.item() == pytest.approx(torch.trace(torch.diag(p) - torch.outer(p, p)).item())
    assert (traces >= 0).all() and (traces <= 1 - 1 / 5).all()


def test_curvature_ratio():
    trace = torch.tensor([0.1, 0.3, 0.0, 0.4])
    assert curvature_ratio(trace, torch.tensor([1, 3])) == pytest.approx(0.2 / 0.35)
    assert curvature_ratio(trace, torch.arange(4)) == pytest.approx(1.0)
    assert curvature_ratio(trace, torch.tensor([2])) == 1.0  # nothing to scale
    for bad in (torch.tensor([0.1, -0.1]), torch.tensor([0.1, math.nan])):
        with pytest.raises(ValueError, match="non-negative"):
            curvature_ratio(bad, torch.tensor([0]))


def softmax_regression(n=30, d=4, k=3):
    g = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(d, k))
    with torch.no_grad():
        model[1].weight.mul_(3.0)  # confident on some images, not on others
    x, y = torch.randn(n, 1, 1, d, generator=g), torch.randint(k, (n,), generator=g)
    return model, TensorDataset(x, y)


def fit(model, data, idx, ratio=1.0):
    evidence = LaplaceEvidence(model, PriorStructure(model, "tensor"))
    loader = DataLoader(Subset(data, idx), batch_size=4)
    evidence.fit(loader, n_data=len(data), curvature_ratio=ratio)
    return evidence


def test_the_ratio_scales_the_output_factors_and_not_the_likelihood(float64):
    model, data = softmax_regression()
    idx, log_delta = torch.tensor([0, 3, 4, 8, 11, 17, 20, 29]), torch.tensor([0.2, -0.5])
    plain, ratio = fit(model, data, idx), fit(model, data, idx, 1.7)
    blocks = zip(kron_factors(plain.laplace), kron_factors(ratio.laplace), strict=True)
    for (b0, *a0), (b1, *a1) in blocks:  # a bias block has its output factor B alone
        assert torch.allclose(b1, 1.7 * b0)
        assert all(torch.allclose(x1, x0) for x0, x1 in zip(a0, a1, strict=True))
    assert ratio.laplace.loss == pytest.approx(plain.laplace.loss)
    assert ratio.log_marginal_likelihood(log_delta) != plain.log_marginal_likelihood(log_delta)


def test_the_ratio_estimator_gives_the_output_layers_whole_curvature_on_any_subset(float64):
    # For the last linear layer with the exact GGN, B = (N/M) sum_S (diag p - p p^T), so
    # tr B = (N/M) sum_S t_n; with the ratio of the traces it is sum_N t_n for every subset.
    model, data = softmax_regression()
    with torch.no_grad():
        trace = output_hessian_trace(model(data.tensors[0]))
    g = torch.Generator().manual_seed(2)
    plain, controlled = [], []
    for _ in range(5):
        idx = torch.randperm(len(data), generator=g)[:8]
        b_plain = kron_factors(fit(model, data, idx).laplace)[0][0]
        b_ratio = kron_factors(fit(model, data, idx, curvature_ratio(trace, idx)).laplace)[0][0]
        plain.append(torch.trace(b_plain).item())
        controlled.append(torch.trace(b_ratio).item())
    assert controlled == pytest.approx([trace.sum().item()] * 5, rel=1e-9)
    assert max(abs(v - trace.sum().item()) for v in plain) > 0.05 * trace.sum().item()


def test_the_ratio_needs_a_subset_and_a_positive_value():
    model, data = softmax_regression()
    evidence = LaplaceEvidence(model, PriorStructure(model, "tensor"))
    with pytest.raises(ConfigError, match="give n_data"):
        evidence.fit(DataLoader(data, batch_size=4), curvature_ratio=2.0)
    with pytest.raises(ConfigError, match="positive"):
        evidence.fit(DataLoader(data, batch_size=4), n_data=60, curvature_ratio=0.0)
