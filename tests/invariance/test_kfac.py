"""Differentiable KFAC and evidence against laplace-torch's stock ASDL backend."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.invariance import InvarianceEvidence, InvariantClassifier
from ella.invariance.kfac import module_blocks
from ella.marglik import LaplaceEvidence, PerChannelView, PriorStructure, UnsupportedModuleError


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(3, 2, 3, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(2 * 3 * 3, 5),
        nn.Tanh(),
        nn.Linear(5, 4),
    ).double()


def data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g, dtype=torch.float64), torch.randint(
        4, (n,), generator=g
    )


def stock(net, x, y, log_prior, prior):
    evidence = LaplaceEvidence(net, prior)
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=len(x)))
    return evidence


@pytest.mark.parametrize("structure", ["tensor", "scalar"])
def test_one_sample_matches_stock_asdl_on_transformed_inputs(structure):
    """S = 1: the evidence equals KronLaplace's on the pre-transformed images."""
    torch.manual_seed(0)
    net = small_cnn()
    model = InvariantClassifier(net, eta=0.3, n_samples=1).double()
    x, y = data()
    eps = model.sample_eps(len(x), 1, torch.Generator().manual_seed(1)).double()
    prior = PriorStructure(net, structure)
    log_prior = torch.linspace(-1, 1, prior.n_groups, dtype=torch.float64)
    ours = InvarianceEvidence(model, prior)
    value = ours.log_marginal_likelihood(log_prior, x, y, eps)
    with torch.no_grad():
        transformed = model.transform(x, eps, model.eta)
    reference = stock(net, transformed, y, log_prior, prior)
    expected = reference.log_marginal_likelihood(log_prior)
    assert torch.allclose(value, expected, rtol=1e-8), (value, expected)
    for a, b in zip(ours.block_eigenvalues(), reference.block_eigenvalues(), strict=True):
        assert torch.allclose(a.sort().values, b.sort().values, rtol=1e-6, atol=1e-10)


def test_identical_copies_reduce_to_the_plain_model():
    """eta = 0: S copies are identical, so KFAC-reduce is exact and equals the stock value."""
    torch.manual_seed(0)
    net = small_cnn()
    model = InvariantClassifier(net, eta=0.0, n_samples=3).double()
    x, y = data()
    eps = model.sample_eps(len(x), 3).double()
    prior = PriorStructure(net, "tensor")
    log_prior = torch.zeros(prior.n_groups, dtype=torch.float64)
    value = InvarianceEvidence(model, prior).log_marginal_likelihood(log_prior, x, y, eps)
    expected = stock(net, x, y, log_prior, prior).log_marginal_likelihood(log_prior)
    assert torch.allclose(value, expected, rtol=1e-8)


def test_batches_and_subset_scaling():
    """Chunked evaluation equals one batch; n_data scales likelihood and G linearly."""
    torch.manual_seed(0)
    net = small_cnn()
    model = InvariantClassifier(net, eta=0.2, n_samples=2).double()
    x, y = data(10)
    eps = model.sample_eps(10, 2, torch.Generator().manual_seed(3)).double()
    prior = PriorStructure(net, "scalar")
    ev = InvarianceEvidence(model, prior)
    lp = torch.zeros(1, dtype=torch.float64)
    one = ev.log_marginal_likelihood(lp, x, y, eps)
    chunked = ev.log_marginal_likelihood(lp, x, y, eps, batch_size=3)
    assert torch.allclose(one, chunked, rtol=1e-10)
    assert ev.log_marginal_likelihood(lp, x, y, eps, n_data=40) < one


def test_mixer_modules_are_supported():
    from ella.models import mixer

    net = mixer(1, 3, 8, group="C4", paths=("fc", "conv", "gconv"), width=1)
    assert len(module_blocks(PerChannelView(net).network)) > 0
    with pytest.raises(UnsupportedModuleError, match="PerChannelView"):
        module_blocks(net)  # the stacked FC maps are a block per channel
    with pytest.raises(ValueError, match="groups=1"):
        module_blocks(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)))


def test_mixer_linear_blocks_match_stock_asdl():
    """Weight sharing (group axis in the batch, one Linear per channel): with one sample the
    blocks of every nn.Linear equal ASDL's. Conv blocks differ on purpose: ASDL builds the
    input patches with zero padding, while the mixer's convs pad circularly, as we do."""
    from ella.models import mixer

    torch.manual_seed(0)
    net = mixer(1, 3, 8, group="C4", paths=("fc", "conv", "gconv"), width=1).double()
    model = InvariantClassifier(net, eta=0.0, n_samples=1).double()
    x, y = data(6)
    y = y % 3
    eps = model.sample_eps(len(x), 1).double()
    prior = PriorStructure(net, "tensor")
    log_prior = torch.zeros(prior.n_groups, dtype=torch.float64)
    ours = InvarianceEvidence(model, prior)
    ours.log_marginal_likelihood(log_prior, x, y, eps)
    reference = stock(net, x, y, log_prior, prior)
    blocks = module_blocks(ours.view.network)
    owners = [m for _, m in blocks for _ in range(1 + (m.bias is not None))]
    compared = 0
    for owner, a, b in zip(
        owners, ours.block_eigenvalues(), reference.block_eigenvalues(), strict=True
    ):
        if isinstance(owner, nn.Linear):
            assert torch.allclose(a.sort().values, b.sort().values, rtol=1e-6, atol=1e-9)
            compared += 1
    assert compared > 10
