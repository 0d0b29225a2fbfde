"""The weights' Laplace response against the closed-form MAP of linear regression."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella import PriorLearner
from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence, PriorStructure, laplace_response
from tests.marglik.problems import blr_problem


def centred_problem():
    """Centred inputs: the weight and the bias blocks of the GGN do not interact, so the
    Kronecker (block-diagonal) GGN is exact."""
    X, y, sigma = blr_problem()
    return X - X.mean(0), y + 2.0, sigma


def ridge(X, y, sigma, delta_w, delta_b, mean_w=None, mean_b=0.0):
    """The MAP of ``y = X w + b`` under N(mean, 1/delta) priors on ``w`` and ``b``."""
    d = X.shape[1]
    mean_w = torch.zeros(d) if mean_w is None else mean_w
    # centred X: the bias decouples
    b = (y.sum() / sigma**2 + delta_b * mean_b) / (X.shape[0] / sigma**2 + delta_b)
    A = X.T @ X / sigma**2 + delta_w * torch.eye(d)
    w = torch.linalg.solve(A, X.T @ (y[:, 0] - b) / sigma**2 + delta_w * mean_w)
    return w, b


def model_at(w, b):
    model = nn.Linear(w.numel(), 1)
    with torch.no_grad():
        model.weight.copy_(w[None])
        model.bias.fill_(float(b))
    return model


@pytest.mark.parametrize("mean", [False, True])
def test_the_response_lands_on_the_new_priors_map(float64, mean):
    X, y, sigma = centred_problem()
    mean_w = torch.linspace(-1.0, 1.0, X.shape[1]) if mean else None
    mean_b = 0.5 if mean else 0.0
    old, new = torch.tensor([0.5, 2.0]), torch.tensor([40.0, 0.01])
    model = model_at(*ridge(X, y, sigma, *old, mean_w, mean_b))
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "tensor"), likelihood="regression", sigma_noise=sigma
    )
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=16))
    centre = torch.cat([mean_w, torch.tensor([mean_b])]) if mean else None
    laplace_response(evidence, old, new, centre)
    w, b = ridge(X, y, sigma, *new, mean_w, mean_b)
    torch.testing.assert_close(model.weight[0], w)
    torch.testing.assert_close(model.bias[0], b)
    # a shrinking prior pulls the weights: the response is not the identity
    assert float((w - ridge(X, y, sigma, *old, mean_w, mean_b)[0]).abs().max()) > 1e-2


def test_a_learner_with_the_response_follows_its_rounds_update(float64):
    """After a round's closed-form update, the weights are the MAP of the updated prior."""
    X, y, sigma = centred_problem()
    model = model_at(*ridge(X, y, sigma, 1.0, 1.0))
    learner = PriorLearner(
        model, len(X), structure="tensor", prior_precision=1.0, likelihood="regression",
        sigma_noise=sigma, update="optimum", response="laplace",
    )  # fmt: skip
    learner.evidence_step(DataLoader(TensorDataset(X, y), batch_size=16))
    delta = learner.log_prior.detach().exp()
    assert float((delta - 1.0).abs().max()) > 1e-2  # the round moved the precisions
    w, b = ridge(X, y, sigma, *delta)
    torch.testing.assert_close(model.weight[0], w)
    torch.testing.assert_close(model.bias[0], b)


def test_the_response_needs_the_kronecker_hessian():
    model = nn.Linear(3, 2)
    with pytest.raises(ConfigError, match="Kronecker"):
        PriorLearner(model, 10, hessian="diag", response="laplace")


def test_the_response_moves_every_per_channel_block_of_an_fc_network(float64):
    """On a network with factorised FC paths the evidence's blocks are the per-channel maps
    of its view (:class:`~ella.marglik.PerChannelView`): each map moves by
    ``(K + delta_new)^{-1} (K + delta_old) theta`` with its own dense Kronecker block
    ``K = B (x) A``, and the stacked tensors of the model receive the moved maps."""
    from ella.marglik.laplace_internals import hessian_scale, kron_factors
    from tests.marglik.problems import tiny_data, tiny_mixer

    model = tiny_mixer().double()
    evidence = LaplaceEvidence(model, PriorStructure(model))
    evidence.fit(tiny_data())
    view = evidence.view.sync()
    before = [p.detach().clone() for p in view.parameters()]
    old = torch.rand(evidence.prior.n_groups) + 0.5
    new = old * torch.linspace(0.1, 10.0, len(old))
    laplace_response(evidence, old, new)
    after = [p.detach().clone() for p in evidence.view.sync().parameters()]  # from the model
    old_t, new_t = evidence.prior.expand(old), evidence.prior.expand(new)
    scale = hessian_scale(evidence.laplace)
    blocks = kron_factors(evidence.laplace)
    assert len(blocks) == len(before) > len(list(model.parameters()))  # per-channel blocks
    for t, factors in enumerate(blocks):
        K = factors[0] if len(factors) == 1 else torch.kron(factors[0], factors[1])
        K = K * scale
        eye = torch.eye(K.shape[0], dtype=K.dtype)
        expected = torch.linalg.solve(
            K + new_t[t] * eye, (K + old_t[t] * eye) @ before[t].flatten()
        )
        torch.testing.assert_close(after[t].flatten(), expected, rtol=1e-8, atol=1e-10)
    assert max(float((a - b).abs().max()) for a, b in zip(after, before, strict=True)) > 1e-3


@pytest.mark.parametrize("paths", [("fc",), ("conv", "gconv"), ("fc", "conv", "gconv")])
@pytest.mark.parametrize("response", ["none", "laplace"])
@pytest.mark.parametrize("backend", ["native", "asdl"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_path_set_takes_a_round_with_each_response_backend_and_dtype(
    paths, response, backend, dtype
):
    """The matrix of paths x weight response x evidence backend x precision: a learner's
    round runs, its weights stay finite, and with the response they move where the
    precisions did."""
    from ella.models import mixer
    from tests.marglik.problems import tiny_data

    model = mixer(1, 3, 6, group="C4", paths=paths, width=1, blocks=((1, 1), (2, 2))).to(dtype)
    learner = PriorLearner(
        model, 10, prior_precision=1.0, update="optimum", response=response, backend=backend
    )
    before = [p.detach().clone() for p in model.parameters()]
    loader = tiny_data()
    batches = [(x.to(dtype), y) for x, y in loader]
    value = learner.evidence_step(batches)
    assert torch.isfinite(torch.tensor(value))
    after = [p.detach() for p in model.parameters()]
    assert all(bool(torch.isfinite(p).all()) for p in after)
    moved = max(float((a - b).abs().max()) for a, b in zip(after, before, strict=True))
    assert (moved > 0) == (response == "laplace")
