import pytest
import torch

from ella.data.corruptions import CORRUPTIONS, SEVERITIES, corrupt, corrupt_standardised
from ella.data.datasets import load_embedded_mnist


@pytest.fixture(scope="module")
def images():
    """Real digits (1 channel) and smooth random colour images (3 channels), in [0, 1]."""
    digits = torch.tensor(load_embedded_mnist()[0][:32], dtype=torch.float32)[:, None] / 255
    g = torch.Generator().manual_seed(0)
    colour = torch.nn.functional.interpolate(
        torch.rand(16, 3, 8, 8, generator=g), size=32, mode="bilinear"
    )
    return {"digits": digits, "colour": colour}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corruptions_keep_shape_and_range_and_grow_with_severity(images, name):
    for x in images.values():
        change = []
        for severity in SEVERITIES:
            out = corrupt(x, name, severity, torch.Generator().manual_seed(1))
            assert out.shape == x.shape and out.dtype == x.dtype
            assert out.min() >= 0 and out.max() <= 1
            change.append(float((out - x).abs().mean()))
        assert change[0] > 0
        assert all(a < b for a, b in zip(change, change[1:], strict=False)), (name, change)


def test_corruptions_are_reproducible(images):
    x = images["colour"]
    a = corrupt(x, "gaussian_noise", 3, torch.Generator().manual_seed(5))
    b = corrupt(x, "gaussian_noise", 3, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_standardised_corruption_undoes_and_redoes_the_standardisation(images):
    x = images["digits"]
    mean, std = (0.2860,), (0.3530,)
    xs = (x - mean[0]) / std[0]
    out = corrupt_standardised(xs, "contrast", 2, mean, std)
    expected = (corrupt(x, "contrast", 2) - mean[0]) / std[0]
    assert torch.allclose(out, expected, atol=1e-5)


def test_corruption_errors(images):
    x = images["digits"]
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt(x, "fog", 1)
    with pytest.raises(ValueError, match="severity"):
        corrupt(x, "contrast", 0)
    with pytest.raises(ValueError, match="corrupt_standardised"):
        corrupt(x * 3 - 1, "contrast", 1)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        corrupt(x[0], "contrast", 1)
