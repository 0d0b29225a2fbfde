"""Gradients of the evidence w.r.t. eta, and invariance of the averaged predictor."""

import math

import pytest
import torch
from torch import nn

from ella.invariance import GENERATORS, InvarianceEvidence, InvariantClassifier
from ella.marglik import PriorStructure


def tiny_model(samples=4):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 8 * 8, 3)
    ).double()
    return InvariantClassifier(net, n_samples=samples).double()


@pytest.mark.parametrize("ggn", ["exact", "mc", "stratified"])
def test_gradient_wrt_eta_matches_finite_differences(ggn):
    model = tiny_model()
    g = torch.Generator().manual_seed(0)
    # smooth images, so that resampling is smooth in the coordinates
    x = torch.nn.functional.avg_pool2d(torch.randn(6, 1, 10, 10, generator=g), 3, 1).double()
    y = torch.randint(3, (6,), generator=g)
    eps = model.sample_eps(6, 4, generator=g).double()
    prior = PriorStructure(model.net, "tensor")
    evidence = InvarianceEvidence(model, prior, ggn=ggn)
    log_prior = torch.full((prior.n_groups,), -0.5, dtype=torch.float64, requires_grad=True)
    eta = torch.tensor([0.1, -0.15, 0.4, 0.1, 0.05, 0.2], dtype=torch.float64, requires_grad=True)

    def value(e, lp=log_prior):
        mc = torch.Generator().manual_seed(5)  # the same sampled classes every call
        return evidence.log_marginal_likelihood(lp, x, y, eps, n_data=50, eta=e, generator=mc)

    grad_eta, grad_prior = torch.autograd.grad(value(eta), [eta, log_prior])
    h = 1e-5
    for i in range(len(GENERATORS)):
        step = torch.zeros(6, dtype=torch.float64)
        step[i] = h
        with torch.no_grad():
            fd = (value(eta + step) - value(eta - step)) / (2 * h)
        assert torch.allclose(grad_eta[i], fd, rtol=1e-5, atol=1e-7), (
            GENERATORS[i],
            grad_eta[i],
            fd,
        )
    for j in range(prior.n_groups):
        step = torch.zeros(prior.n_groups, dtype=torch.float64)
        step[j] = h
        with torch.no_grad():
            fd = (value(eta, log_prior + step) - value(eta, log_prior - step)) / (2 * h)
        assert torch.allclose(grad_prior[j], fd, rtol=1e-5, atol=1e-7)
    assert grad_eta.abs().min() > 0  # every generator moves the evidence


def test_full_rotation_average_is_nearly_rotation_invariant():
    """With eta_rotate = pi and many samples, rotating the input barely changes the output."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 32), nn.ReLU(), nn.Linear(32, 5))
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    blob = torch.exp(-((yy - 0.35) ** 2 + (xx + 0.1) ** 2) / 0.05)  # zero background, smooth
    x = torch.stack([blob, blob.T.flip(0)])[:, None]
    turned = torch.rot90(x, 1, dims=(-2, -1))
    invariant = InvariantClassifier(net, generators=["rotate"], eta=math.pi, eval_samples=4000)
    plain = InvariantClassifier(net, generators=["rotate"], eta=0.0, eval_samples=1)
    invariant.eval(), plain.eval()
    with torch.no_grad():
        change = (invariant(turned) - invariant(x)).norm() / invariant(x).norm()
        baseline = (plain(turned) - plain(x)).norm() / plain(x).norm()
    assert baseline > 0.1  # the network itself is far from invariant
    assert change < 0.05 and change < baseline / 10, (change, baseline)
