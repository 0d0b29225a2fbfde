"""The dense GGN evidence of experiments/full_ggn.py against brute force and against ella's
Kronecker-factored evidence where that one is exact."""

from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.laplace_internals import kron_factors
from ella.nn import GroupPool, Lift, RelaxedLayer
from experiments.full_ggn import (
    FullEvidence,
    effective_report,
    full_ggn,
    optimal_log_prior,
    softmax_root,
)


def relaxed_net(classes: int = 3) -> nn.Module:
    return nn.Sequential(
        OrderedDict(
            lift=Lift("C4"),
            layer1=RelaxedLayer(1, 1, 6, paths=("conv", "gconv"), stride=2),
            layer2=RelaxedLayer(1, 2, 3, paths=("conv", "gconv")),
            pool=GroupPool("C4"),
            gap=nn.AdaptiveAvgPool2d(1),
            flat=nn.Flatten(),
            head=nn.Linear(2, classes),
        )
    )


def brute_force_ggn(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``sum_n J_n^T (diag p_n - p_n p_n^T) J_n`` with every row of every ``J_n`` taken by
    its own ``torch.autograd.grad``."""
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    G = torch.zeros(n_params, n_params, dtype=torch.float64)
    for xi in x:
        logits = model(xi.unsqueeze(0))[0]
        rows = []
        for k in range(logits.shape[0]):
            grads = torch.autograd.grad(logits[k], params, retain_graph=True, allow_unused=True)
            grads = [
                torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)
            ]
            rows.append(torch.cat([g.reshape(-1) for g in grads]))
        J = torch.stack(rows).double()
        p = logits.detach().double().softmax(-1)
        G += J.T @ (torch.diag(p) - torch.outer(p, p)) @ J
    return G


def test_softmax_root_squares_to_the_softmax_hessian(float64):
    logits = torch.randn(4, 5) * 3
    M = softmax_root(logits)
    p = logits.softmax(-1)
    expected = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    torch.testing.assert_close(M @ M.transpose(-1, -2), expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("net", ["mlp", "relaxed"])
def test_dense_ggn_equals_brute_force(float64, net):
    if net == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.Tanh(), nn.Linear(5, 4))
        x = torch.randn(7, 3, 2, 2)
        y = torch.randint(0, 4, (7,))
    else:
        model = relaxed_net()
        x = torch.randn(5, 1, 6, 6)
        y = torch.randint(0, 3, (5,))
    G, log_likelihood = full_ggn(model, x, y, batch_size=3)  # two batches
    expected = brute_force_ggn(model, x)
    torch.testing.assert_close(G, expected, rtol=1e-10, atol=1e-12)
    nll = nn.functional.cross_entropy(model(x), y, reduction="sum")
    assert log_likelihood == pytest.approx(-float(nll.detach()), rel=1e-12)


def linear_evidence(bias: bool):
    model = nn.Sequential(nn.Linear(4, 3, bias=bias))
    x, y = torch.randn(1, 4), torch.tensor([2])
    prior = PriorStructure(model)
    kfac = LaplaceEvidence(model, prior, ggn="exact")
    kfac.fit(DataLoader(TensorDataset(x, y), batch_size=1))
    full = FullEvidence.of_model(model, prior, x, y)
    return model, prior, kfac, full


def test_kfac_blocks_equal_the_full_ggn_blocks_for_one_example_of_a_linear_layer(float64):
    """One example through one linear layer: the weight's GGN block is exactly
    ``Lambda (x) x x^T`` and the bias's ``Lambda``, which ella's Kronecker factors hold."""
    model, prior, kfac, full = linear_evidence(bias=True)
    (B, A), (B_bias,) = kron_factors(kfac.laplace)
    n_weight = model[0].weight.numel()
    torch.testing.assert_close(
        full.G[:n_weight, :n_weight], torch.kron(B, A), rtol=1e-12, atol=1e-14
    )
    torch.testing.assert_close(full.G[n_weight:, n_weight:], B_bias, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("log_delta", [-2.0, 0.0, 1.5])
def test_kfac_evidence_equals_the_full_ggn_evidence_for_one_example_of_a_linear_map(
    float64, log_delta
):
    """Without a bias (no weight-bias block that KFAC drops) the whole GGN is one
    Kronecker product: both evidences, their terms and effective parameters agree."""
    _, prior, kfac, full = linear_evidence(bias=False)
    u = torch.full((prior.n_groups,), log_delta)
    assert full.log_marginal_likelihood(u) == pytest.approx(
        float(kfac.log_marginal_likelihood(u)), rel=1e-10, abs=1e-10
    )
    for name, value in kfac.terms(u).items():
        assert full.terms(u)[name] == pytest.approx(float(value), rel=1e-10, abs=1e-10)
    (eigenvalues,) = kfac.block_eigenvalues()
    gamma = float((eigenvalues / (eigenvalues + u.exp())).sum())
    assert float(full.group_effective(u).sum()) == pytest.approx(gamma, rel=1e-10)


def test_gradient_and_optimum(float64):
    model = relaxed_net()
    x, y = torch.randn(6, 1, 6, 6), torch.randint(0, 3, (6,))
    prior = PriorStructure(model)
    evidence = FullEvidence.of_model(model, prior, x, y)
    u = torch.randn(prior.n_groups) * 0.5

    def value(v: torch.Tensor) -> torch.Tensor:  # autograd reference
        delta = v.exp()
        A = evidence.G + torch.diag(delta[evidence.group_index])
        return (
            evidence.log_likelihood
            - 0.5 * (delta * evidence.squared_norms).sum()
            + 0.5 * (evidence.sizes * v).sum()
            - 0.5 * torch.logdet(A)
        )

    v = u.clone().requires_grad_()
    value(v).backward()
    torch.testing.assert_close(evidence.gradient(u), v.grad, rtol=1e-9, atol=1e-10)
    assert evidence.log_marginal_likelihood(u) == pytest.approx(float(value(u)), rel=1e-12)

    optimum, iterations = optimal_log_prior(evidence, u, tolerance=1e-10)
    assert iterations < 30  # Newton with the exact Hessian: a few steps
    assert evidence.gradient(optimum).abs().max() < 1e-6
    assert evidence.log_marginal_likelihood(optimum) > evidence.log_marginal_likelihood(u)

    # Adam steps on -log evidence / N, as the learner takes them, raise the evidence
    log_prior = u.clone().requires_grad_()
    optimizer = torch.optim.Adam([log_prior], lr=0.1)
    after = evidence.hyper_steps(log_prior, optimizer, 20, n_data=len(x))
    assert after > evidence.log_marginal_likelihood(u)

    report = effective_report(prior, evidence, u)
    assert [row["layer"] for row in report["layers"]] == ["layer1", "layer2"]
    gamma = evidence.group_effective(u)
    for row in report["layers"]:
        for path in ("conv", "gconv"):
            index = prior.names.index(f"{row['layer']}.{path}")
            assert row["effective"][path] == pytest.approx(float(gamma[index]), rel=1e-10)
        assert row["conv"] + row["gconv"] == pytest.approx(100.0)
        assert sum(row["relative"].values()) == pytest.approx(100.0)
