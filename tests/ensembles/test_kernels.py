import math

import pytest
import torch

from ella.ensembles import (
    LengthscaleMetric,
    log_kernel_density,
    median_bandwidth,
    repulsion_force,
)
from ella.ensembles.kernels import normalised_input_gradients, pairwise_sq_distances


@pytest.mark.parametrize("shape", [(4, 3, 5), (2, 1, 7), (5, 6, 2)])
def test_repulsion_force_is_the_gradient_of_the_kernel_density(float64, shape):
    phi = torch.randn(*shape, requires_grad=True)
    (autograd,) = torch.autograd.grad(log_kernel_density(phi).sum(), phi)
    assert torch.allclose(repulsion_force(phi), autograd, atol=1e-12, rtol=1e-10)
    bandwidth = torch.rand(shape[1]) + 0.5  # any fixed bandwidth, not only the median
    (autograd,) = torch.autograd.grad(log_kernel_density(phi, bandwidth).sum(), phi)
    assert torch.allclose(repulsion_force(phi, bandwidth), autograd, atol=1e-12, rtol=1e-10)


def test_repulsion_force_on_a_hand_made_pair(float64):
    # two members at 0 and 1: h = 1 / log 2, k_01 = exp(-log 2) = 1/2, k_00 = 1
    phi = torch.tensor([[[0.0]], [[1.0]]])
    h = 1 / math.log(2)
    assert median_bandwidth(pairwise_sq_distances(phi)).item() == pytest.approx(h)
    # force_0 = (d k_01 / d phi_0) / (k_00 + k_01) = (2 (1 - 0) / h * 1/2) / (3/2)
    expected = (2 / h * 0.5) / 1.5
    force = repulsion_force(phi)
    assert force[0, 0, 0].item() == pytest.approx(expected)
    assert force[1, 0, 0].item() == pytest.approx(-expected)
    # a gradient-descent step on phi . force pushes the members apart
    moved = phi - 0.1 * force
    assert (moved[1] - moved[0]).abs().item() > 1.0


def test_median_bandwidth_is_the_median_pair_over_log_m(float64):
    phi = torch.tensor([[[0.0]], [[1.0]], [[3.0]]])  # squared distances 1, 9, 4
    assert median_bandwidth(pairwise_sq_distances(phi)).item() == pytest.approx(4 / math.log(3))


def test_a_single_member_feels_no_repulsion():
    assert torch.equal(repulsion_force(torch.randn(1, 3, 4)), torch.zeros(1, 3, 4))


def test_feature_shape_errors():
    with pytest.raises(ValueError, match=r"\(M, B, D\)"):
        repulsion_force(torch.randn(3, 4))


def test_pca_metric_gives_the_papers_mahalanobis_distance(float64):
    x = torch.randn(200, 1, 3, 3) * torch.linspace(0.2, 3.0, 9).view(1, 1, 3, 3)
    alpha = 0.3
    metric = LengthscaleMetric.from_data(x, alpha=alpha)
    flat = x.flatten(1) - x.flatten(1).mean(0)
    cov = flat.T @ flat / 199
    U, lam = metric.eigenvectors, torch.linalg.eigvalsh(cov).flip(0)
    assert torch.allclose(U @ torch.diag(lam) @ U.T, cov, atol=1e-10)
    sigma_inv = (1 - alpha) * torch.eye(9) + alpha * torch.diag(lam)
    s = normalised_input_gradients(torch.randn(2, 1, 1, 3, 3))[:, 0]
    delta = s[0] - s[1]
    expected = delta @ U @ sigma_inv @ U.T @ delta
    assert (metric(s[0]) - metric(s[1])).square().sum().item() == pytest.approx(expected.item())
    # alpha = 0: the identity lengthscales, i.e. plain Euclidean distance
    plain = LengthscaleMetric.from_data(x, alpha=0.0)
    assert (plain(s[0]) - plain(s[1])).norm().item() == pytest.approx(delta.norm().item())


def test_normalised_input_gradients_are_unit_vectors():
    s = normalised_input_gradients(torch.randn(3, 4, 2, 5, 5))
    assert s.shape == (3, 4, 50)
    assert torch.allclose(s.norm(dim=-1), torch.ones(3, 4), atol=1e-6)


def test_metric_argument_errors():
    with pytest.raises(ValueError, match="alpha"):
        LengthscaleMetric(alpha=2.0)
    with pytest.raises(ValueError, match="both"):
        LengthscaleMetric(eigenvectors=torch.eye(3))
