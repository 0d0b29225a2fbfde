import itertools

import pytest
import torch

from ella.models import mixer
from ella.testing import assert_equivariant, equivariance_errors
from tests.cases import NONTRIVIAL_GROUPS

PATH_COMBOS = [
    combo for r in (1, 2, 3) for combo in itertools.combinations(("fc", "conv", "gconv"), r)
]


@pytest.mark.parametrize("paths", PATH_COMBOS, ids="+".join)
@pytest.mark.parametrize("shape", [(1, 28), (1, 32), (3, 32)], ids=["1x28", "1x32", "3x32"])
def test_builds_and_maps_images_to_logits(paths, shape):
    channels, size = shape
    model = mixer(channels, 10, size, group="C4", paths=paths, width=1)
    out = model(torch.randn(2, channels, size, size))
    assert out.shape == (2, 10)
    assert model.path_names == paths
    assert all(layer.path_names == paths for layer in model.layers.values())


def test_layer_plan():
    model = mixer(1, 10, 32, width=2)
    sizes = [layer.in_size[0] for layer in model.layers.values()]
    assert sizes == [32, 32, 16, 16, 8, 8, 4, 2]
    assert [layer.out_channels for layer in model.layers.values()] == [2, 4, 4, 8, 8, 16, 16, 32]
    # 28 -> 14 -> 7, then odd sizes keep stride 1
    assert mixer(1, 10, 28).layers["layer8"].out_size == (7, 7)


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("shape", [(1, 28), (3, 32)], ids=["1x28", "3x32"])
def test_gconv_only_mixer_is_invariant(group, shape):
    channels, size = shape
    model = mixer(channels, 10, size, group=group, paths=("gconv",), width=2)
    x = torch.randn(4, channels, size, size)
    assert_equivariant(model, group, x, atol=1e-5, rtol=1e-4)
    assert model.invariance_error(x) < 1e-4


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
def test_instance_normalised_gconv_only_mixer_is_invariant(group):
    model = mixer(1, 10, 28, group=group, paths=("gconv",), width=1, norm="instance")
    assert all(layer.norm == "instance" for layer in model.layers.values())
    x = torch.randn(4, 1, 28, 28)
    assert_equivariant(model, group, x, atol=1e-5, rtol=1e-4)


def test_instance_norm_skips_a_layer_with_one_value_per_channel():
    # trivial group at 32x32: the last layer's output is 1x1 with one copy
    model = mixer(1, 10, 32, group="trivial", paths=("fc", "conv"), width=1, norm="instance")
    norms = {name: layer.norm for name, layer in model.layers.items()}
    assert norms.pop("layer8") == "none"
    assert set(norms.values()) == {"instance"}
    # the features still differ between images (a normalised single value would be 0)
    features = model.features(torch.randn(3, 1, 32, 32))
    assert features.std(dim=0).max() > 0


@pytest.mark.parametrize("paths", [("fc",), ("conv",), ("fc", "conv")], ids="+".join)
def test_fc_and_conv_mixers_are_not_rotation_invariant(paths):
    model = mixer(1, 10, 32, group="C4", paths=paths, width=2)
    x = torch.randn(4, 1, 32, 32)
    with torch.no_grad():
        scale = model(x).abs().max().item()
    errors = equivariance_errors(model, "C4", x)
    assert min(errors[g] for g in (1, 2, 3)) > 1e-2 * scale


def test_bad_input():
    model = mixer(1, 10, 28)
    with pytest.raises(ValueError, match="built for 1 input channel"):
        model(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match="built for 28x28 images, got 32x32"):
        model(torch.randn(2, 1, 32, 32))
    with pytest.raises(ValueError, match=r"expected images \(B, C, H, W\)"):
        model(torch.randn(2, 28, 28))
    with pytest.raises(ValueError, match="square"):
        mixer(1, 10, (28, 32), group="C4")
    with pytest.raises(ValueError, match="unknown group"):
        mixer(1, 10, 28, group="O3")
    with pytest.raises(ValueError, match="unknown path"):
        mixer(1, 10, 28, paths=("fc", "attention"))


def test_standardise_head_centres_and_scales_the_features_entering_the_head():
    torch.manual_seed(0)
    model = mixer(1, 10, 28, group="C4", width=1)
    x = torch.randn(64, 1, 28, 28)
    with torch.no_grad():
        features = model.features(x)
        before = model(x)
    first = model.head[0]
    weight, bias = first.weight.clone(), first.bias.clone()
    model.standardise_head(x)
    # the first layer now computes W (f - mean) / s + b, by its definition
    mean = features.mean(dim=0)
    scale = features.var(dim=0).mean().sqrt()
    expected = ((features - mean) / scale) @ weight.T + bias
    with torch.no_grad():
        assert torch.allclose(first(features), expected, atol=1e-5)
        # standardised inputs: the logits now differ more between images
        assert model(x).std(dim=0).mean() > 2 * before.std(dim=0).mean()


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
def test_pool_none_gives_the_head_every_copy_so_the_logits_can_break_the_symmetry(group):
    order = {"C4": 4, "D4": 8}[group]
    model = mixer(1, 10, 28, group=group, paths=("gconv",), width=1, pool="none")
    c_last = model.specs[-1].out_channels
    assert model.head[0].in_features == order * c_last
    x = torch.randn(4, 1, 28, 28)
    # the layers stay exactly equivariant: the features permute their blocks of copies
    assert_equivariant(
        lambda t: model.features(t).reshape(len(t), order, c_last, 1, 1),
        group, x, out_action="lifted", atol=1e-5, rtol=1e-4,
    )  # fmt: skip
    # and the head, seeing each copy, is not invariant
    assert model.invariance_error(x) > 1e-3


def test_standardise_head_keeps_invariance_and_refuses_one_image():
    model = mixer(1, 10, 28, group="C4", paths=("gconv",), width=1)
    model.standardise_head(torch.randn(16, 1, 28, 28))
    assert_equivariant(model, "C4", torch.randn(4, 1, 28, 28), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="at least 2 images"):
        model.standardise_head(torch.randn(1, 1, 28, 28))
