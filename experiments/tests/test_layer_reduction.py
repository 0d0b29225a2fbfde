"""Bayesian model reduction of experiments/layer_reduction.py against closed forms: the
evidence ratio of Bayesian linear regression, the Laplace evidence of the reduced model
under the quadratic model, and the layer-wise Kronecker curvature where it is exact."""

from collections import OrderedDict

import pytest
import torch
from torch import nn

from ella.marglik import PriorStructure
from ella.nn import RelaxedLayer
from experiments.full_ggn import FullEvidence, full_ggn
from experiments.layer_reduction import (
    condition,
    iterative_reduction,
    layer_kron_ggn,
    per_tensor_ggn,
    reduction,
)
from experiments.layer_reduction_summary import agree, greedy_from_table
from experiments.miniature import Split


def gaussian_log_density(y: torch.Tensor, covariance: torch.Tensor) -> torch.Tensor:
    return torch.distributions.MultivariateNormal(torch.zeros_like(y), covariance).log_prob(y)


def regression(n: int = 30, p: int = 7, sigma: float = 0.7):
    X = torch.randn(n, p)
    w = torch.randn(p)
    y = X @ w + sigma * torch.randn(n)
    delta = torch.tensor([0.5, 0.5, 2.0, 2.0, 2.0, 1.3, 1.3])
    return X, y, sigma, delta


def posterior(X, y, sigma, delta):
    precision = X.T @ X / sigma**2 + torch.diag(delta)
    theta = torch.linalg.solve(precision, X.T @ y / sigma**2)
    return precision, theta


def evidence(X, y, sigma, delta, keep):
    """``log N(y; 0, X_R D_R^{-1} X_R^T + sigma^2 I)``: the model with only columns ``keep``."""
    XR = X[:, keep]
    covariance = XR @ torch.diag(1 / delta[keep]) @ XR.T + sigma**2 * torch.eye(len(y))
    return gaussian_log_density(y, covariance)


@pytest.mark.parametrize("S", [[0, 1], [2, 3, 4], [5, 6], [0, 1, 5, 6]])
def test_reduction_is_the_evidence_ratio_of_linear_regression(float64, S):
    X, y, sigma, delta = regression()
    precision, theta = posterior(X, y, sigma, delta)
    keep = [i for i in range(X.shape[1]) if i not in S]
    expected = evidence(X, y, sigma, delta, keep) - evidence(X, y, sigma, delta, list(range(7)))
    assert reduction(precision, theta, delta, S) == pytest.approx(float(expected), rel=1e-9)


def test_conditioning_gives_the_reduced_posterior_and_chains_reductions(float64):
    """``theta_S = 0`` leaves the posterior of the reduced regression, and reducing ``S1``
    then ``S2`` from it equals reducing both at once."""
    X, y, sigma, delta = regression()
    precision, theta = posterior(X, y, sigma, delta)
    S1, S2 = [0, 1], [5, 6]
    H, mean, keep = condition(precision, theta, S1)
    expected_H, expected_mean = posterior(X[:, keep], y, sigma, delta[keep])
    torch.testing.assert_close(H, expected_H)
    torch.testing.assert_close(mean, expected_mean)
    position = {int(k): i for i, k in enumerate(keep)}
    chained = reduction(precision, theta, delta, S1) + reduction(
        H, mean, delta[keep], [position[i] for i in S2]
    )
    assert chained == pytest.approx(reduction(precision, theta, delta, S1 + S2), rel=1e-10)


def test_reduction_is_the_laplace_evidence_of_the_reduced_quadratic_model(float64):
    """With a dense GGN: the Laplace evidence of the reduced model, its weights at the
    quadratic model's optimum ``theta_R + H_RR^{-1} H_RS theta_S`` and its log likelihood
    moved by the quadratic model, minus the full model's, is the reduction."""
    torch.manual_seed(3)
    P = 9
    root = torch.randn(P, P)
    G = root @ root.T
    theta = torch.randn(P)
    delta = torch.rand(P) + 0.5
    log_likelihood = -12.0
    S = [2, 3, 7]
    keep = [i for i in range(P) if i not in S]
    full = FullEvidence(G, theta, torch.arange(P), P, log_likelihood)
    # the quadratic model of the log joint around theta, whose maximum is theta:
    # log p(D | w) = log_likelihood + (D theta)^T (w - theta) - 1/2 (w - theta)^T G (w - theta)
    H = G + torch.diag(delta)
    _, mean, _ = condition(H, theta, S)
    w = torch.zeros(P, dtype=torch.float64)
    w[keep] = mean
    step = w - theta
    moved = log_likelihood + float((delta * theta) @ step - 0.5 * step @ G @ step)
    reduced = FullEvidence(G[keep][:, keep], mean, torch.arange(len(keep)), len(keep), moved)
    u_full, u_reduced = delta.log(), delta[keep].log()
    expected = reduced.log_marginal_likelihood(u_reduced) - full.log_marginal_likelihood(u_full)
    assert reduction(H, theta, delta, S) == pytest.approx(expected, rel=1e-9)


def test_iterative_reduction_stops_where_no_removal_raises_the_evidence(float64):
    """On a posterior whose every path is needed (large weights, sharp curvature) nothing
    is removed; with zero weights and a flat likelihood the first path of each layer goes."""
    groups = {(i, p): [2 * i + (p == "gconv")] for i in range(3) for p in ("conv", "gconv")}
    theta = torch.full((6,), 5.0, dtype=torch.float64)
    delta = torch.ones(6, dtype=torch.float64)
    arch, steps = iterative_reduction(torch.eye(6) * 100 + torch.diag(delta), theta, delta, groups)
    assert arch == (("conv", "gconv"),) * 3 and steps == []
    arch, steps = iterative_reduction(torch.diag(delta) + 1e-3, theta * 0, delta, groups)
    assert len(steps) == 3 and all(len(layer) == 1 for layer in arch)


def one_layer_net(classes_per_copy: int = 3) -> nn.Module:
    """A relaxed layer on a 1x1 lifted input: one position, so for one example its CONV
    filter's Kronecker block is exact, and so is the total map's."""
    return nn.Sequential(
        OrderedDict(
            layer=RelaxedLayer(2, classes_per_copy, 1, paths=("conv", "gconv"), activation=False),
            flat=nn.Flatten(),
        )
    )


def test_layer_kron_equals_the_dense_ggn_where_kronecker_is_exact(float64):
    """One example, one position: the layer's Kronecker GGN with the blocks between its
    paths equals the dense GGN on every pair of weights (KFAC has no weight-bias blocks),
    and without the cross blocks keeps only the diagonal ones."""
    model = one_layer_net()
    x, y = torch.randn(1, 4, 2, 1, 1), torch.tensor([5])
    split = Split(x, y, x, y)
    prior = PriorStructure(model)
    dense, _ = full_ggn(model, x, y)
    per_tensor = per_tensor_ggn(model, prior, split)
    G = layer_kron_ggn(model, per_tensor)
    sizes = [p.numel() for p in model.parameters()]  # conv w, conv b, gconv w, gconv b
    starts = torch.tensor([0, *sizes]).cumsum(0)
    weights = torch.cat([torch.arange(starts[0], starts[1]), torch.arange(starts[2], starts[3])])
    torch.testing.assert_close(G[weights][:, weights], dense[weights][:, weights])
    conv = torch.arange(starts[0], starts[1])
    gconv = torch.arange(starts[2], starts[3])
    assert float(dense[conv][:, gconv].abs().max()) > 1e-3  # the paths do share curvature
    nocross = layer_kron_ggn(model, per_tensor, cross=False)
    assert float(nocross[conv][:, gconv].abs().max()) == 0.0
    torch.testing.assert_close(nocross[gconv][:, gconv], dense[gconv][:, gconv])
    torch.testing.assert_close(nocross[conv][:, conv], per_tensor[conv][:, conv])


def test_summary_helpers():
    assert agree("conv+gconv/conv/gconv", "conv/conv/gconv") == 2
    evidence = {"conv+gconv/conv+gconv/conv+gconv": 0.0}
    for first in ("conv", "gconv", "conv+gconv"):
        for second in ("conv", "gconv", "conv+gconv"):
            for third in ("conv", "gconv", "conv+gconv"):
                t = f"{first}/{second}/{third}"
                evidence.setdefault(t, -10.0)
    evidence["conv/conv+gconv/conv+gconv"] = 5.0
    evidence["conv/gconv/conv+gconv"] = 7.0
    evidence["gconv/gconv/gconv"] = 100.0  # unreachable by single steps that do not rise
    assert greedy_from_table(evidence) == "conv/gconv/conv+gconv"


def test_within_modules_keeps_each_modules_block():
    from experiments.layer_reduction import within_modules

    model = nn.Sequential(OrderedDict(a=nn.Linear(2, 2), b=nn.Linear(2, 1)))  # 6 + 3 entries
    G = torch.ones(9, 9)
    kept = within_modules(model, G)
    assert kept[:6, :6].eq(1).all() and kept[6:, 6:].eq(1).all()
    assert kept[:6, 6:].eq(0).all() and kept[6:, :6].eq(0).all()
