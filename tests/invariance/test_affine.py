import math

import pytest
import torch

from ella.groups import rotate
from ella.invariance import GENERATORS, InvariantClassifier, affine_matrices, transform_images
from ella.invariance.affine import eta_as_dict, eta_from_mapping


def images(n=3, size=12):
    return torch.randn(n, 2, size, size, generator=torch.Generator().manual_seed(0))


def test_zero_eta_is_the_identity():
    x = images()
    eps = torch.rand(3, 6) * 2 - 1
    assert torch.allclose(transform_images(x, eps, torch.zeros(6)), x, atol=1e-6)
    eye = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]])
    assert torch.allclose(affine_matrices(eps, torch.zeros(6)), eye.expand(3, 2, 3))


def test_pure_rotation_turns_by_eps_times_eta():
    x = images()
    eta = torch.zeros(6)
    eta[GENERATORS.index("rotate")] = math.pi
    eps = torch.zeros(3, 6)
    eps[:, GENERATORS.index("rotate")] = torch.tensor([-1.0, 0.25, 1.0])
    expected = rotate(x, torch.tensor([-math.pi, math.pi / 4, math.pi]))
    assert torch.allclose(transform_images(x, eps, eta), expected, atol=1e-4)
    # a quarter turn is rot90 (exact up to interpolation at grid points)
    eps[:, GENERATORS.index("rotate")] = 0.5
    turned = transform_images(x, eps, eta)
    assert torch.allclose(turned, torch.rot90(x, 1, dims=(-2, -1)), atol=1e-4)


def test_rotation_range_covers_the_extent():
    """With eta_rotate = 0.5, the sampled angles are U[-0.5, 0.5] radians."""
    eta = torch.zeros(6)
    eta[GENERATORS.index("rotate")] = 0.5
    model = InvariantClassifier(torch.nn.Flatten(), generators=["rotate"], eta=eta)
    eps = model.sample_eps(2000, 1, torch.Generator().manual_seed(0))
    theta = affine_matrices(eps, model.eta)
    angles = torch.atan2(theta[:, 1, 0], theta[:, 0, 0])
    assert angles.abs().max() <= 0.5 + 1e-6 and angles.abs().max() > 0.49
    assert abs(float(angles.mean())) < 0.02
    assert torch.count_nonzero(eps[:, [i for i, g in enumerate(GENERATORS) if g != "rotate"]]) == 0


def test_translation_and_scale_units():
    """translate_x = 1 shifts by half the width; scale_x = log 2 halves the width of content."""
    eye = torch.eye(2)
    eps = torch.ones(1, 6)
    eta = torch.zeros(6)
    eta[GENERATORS.index("translate_x")] = 1.0
    theta = affine_matrices(eps, eta)[0]
    assert torch.allclose(theta[:, :2], eye) and torch.allclose(theta[:, 2], torch.tensor([1.0, 0]))
    eta = torch.zeros(6)
    eta[GENERATORS.index("scale_x")] = math.log(2)
    theta = affine_matrices(eps, eta)[0]
    assert torch.allclose(theta, torch.tensor([[2.0, 0, 0], [0, 1.0, 0]]))


def test_names_and_bad_input():
    assert set(eta_as_dict(torch.arange(6.0))) == set(GENERATORS)
    assert eta_from_mapping({"rotate": 1.0})[GENERATORS.index("rotate")] == 1.0
    with pytest.raises(ValueError, match="unknown generator"):
        InvariantClassifier(torch.nn.Flatten(), generators=["rotate", "zoom"])
    with pytest.raises(ValueError, match="at least 1"):
        InvariantClassifier(torch.nn.Flatten(), n_samples=-2)
    model = InvariantClassifier(torch.nn.Flatten())
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        model(torch.randn(3, 8, 8))
    with pytest.raises(ValueError, match="eps must have shape"):
        affine_matrices(torch.zeros(3, 5), torch.zeros(6))
