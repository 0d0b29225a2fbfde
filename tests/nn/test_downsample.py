import pytest
import torch
import torch.nn.functional as F

from ella.errors import ConfigError
from ella.groups import CircularTranslations, get_group
from ella.nn import RelaxedLayer, polyphase_downsample
from ella.nn.downsample import downsample, max_downsample
from ella.testing import assert_equivariant
from tests.cases import NONTRIVIAL_GROUPS


def test_shape():
    assert polyphase_downsample(torch.randn(3, 4, 2, 8, 6)).shape == (3, 4, 2, 4, 3)


def test_choice_is_per_sample():
    """A sample's output must not depend on the rest of the batch (the reference's bug)."""
    z = torch.randn(4, 4, 2, 8, 8)
    other = torch.randn(4, 4, 2, 8, 8) * 100  # large values would win a batch-wide choice
    alone = polyphase_downsample(z[:1])
    for batch in (torch.cat([z[:1], other]), torch.cat([other, z[:1]])):
        index = 0 if batch[0].equal(z[0]) else 4
        assert torch.equal(polyphase_downsample(batch)[index], alone[0])


def test_picks_the_component_with_largest_magnitude():
    z = torch.zeros(2, 1, 1, 4, 4)
    z[0, 0, 0, 1, 0] = -5.0  # component (1, 0)
    z[1, 0, 0, 2, 3] = 3.0  # component (0, 1)
    out = polyphase_downsample(z)
    assert out[0].abs().max() == 5.0 and out[1].abs().max() == 3.0


@pytest.mark.parametrize("name", NONTRIVIAL_GROUPS)
def test_equivariant_to_permuting_the_group_axis(name):
    group = get_group(name)
    z = torch.randn(5, group.order, 3, 8, 8)
    assert_equivariant(polyphase_downsample, group, z, in_action="lifted", out_action="lifted")


def test_follows_circular_translations():
    """A shifted input gives a (circularly) shifted output: adaptive polyphase sampling."""
    z = torch.randn(3, 4, 2, 8, 8)
    out = polyphase_downsample(z)
    shifts = CircularTranslations(8, 8)
    for g in [1, 9, 13, 63]:
        shifted = polyphase_downsample(shifts.act_on_lifted(g, z))
        candidates = [
            torch.roll(out, (dy, dx), dims=(-2, -1)) for dy in range(4) for dx in range(4)
        ]
        for b in range(3):
            assert any(torch.equal(shifted[b], c[b]) for c in candidates)


def test_odd_size_rejected():
    with pytest.raises(ValueError, match="even"):
        polyphase_downsample(torch.randn(1, 1, 1, 7, 7))


def test_max_downsampling_is_the_maximum_of_each_2x2_block():
    z = torch.randn(3, 4, 2, 8, 6)
    out = max_downsample(z)
    assert out.shape == (3, 4, 2, 4, 3)
    blocks = z.reshape(3, 4, 2, 4, 2, 3, 2)  # (..., H/2, 2, W/2, 2)
    torch.testing.assert_close(out, blocks.amax(dim=(-3, -1)), rtol=0, atol=0)
    torch.testing.assert_close(out[:, 0], F.max_pool2d(z[:, 0], 2), rtol=0, atol=0)


def test_max_downsampling_without_a_backward_gives_max_poolings_values():
    """Outside autograd the maximum of four strided views is taken instead of torch's
    pooling: the same values, ties and infinities included."""
    z = torch.randint(-2, 3, (2, 3, 4, 6, 8)).float()
    z[0, 0, 0, 0, :2] = float("inf")
    z[1, 2, 3, 4:, 6:] = -float("inf")
    pooled = F.max_pool2d(z.reshape(2, -1, 6, 8), 2).reshape(2, 3, 4, 3, 4)
    with torch.no_grad():
        assert torch.equal(max_downsample(z), pooled)
    assert torch.equal(max_downsample(z), pooled)  # z needs no gradient
    needs_grad = z.clone().requires_grad_()
    out = max_downsample(needs_grad)
    assert out.grad_fn is not None and torch.equal(out.detach(), pooled)


@pytest.mark.parametrize("name", NONTRIVIAL_GROUPS)
def test_max_downsampling_commutes_with_the_group_on_lifted_tensors(name):
    """Rotations and flips of an even grid map its 2x2 blocks onto 2x2 blocks."""
    group = get_group(name)
    z = torch.randn(5, group.order, 3, 8, 8)
    assert_equivariant(max_downsample, group, z, in_action="lifted", out_action="lifted")


@pytest.mark.parametrize("name", NONTRIVIAL_GROUPS)
def test_a_gconv_layer_with_max_downsampling_stays_exactly_equivariant(name):
    layer = RelaxedLayer(2, 3, 8, name, paths=("gconv",), stride=2, downsample="max")
    assert layer.out_size == (4, 4)
    z = torch.randn(2, get_group(name).order, 2, 8, 8)
    assert_equivariant(layer, get_group(name), z, in_action="lifted", out_action="lifted")


def test_max_downsampling_is_not_shift_equivariant():
    """Unlike polyphase sampling, a one-pixel shift is not a shift of the output."""
    z = torch.randn(1, 1, 1, 8, 8)
    shifted = max_downsample(torch.roll(z, 1, dims=-1))
    out = max_downsample(z)
    assert not any(
        torch.equal(shifted, torch.roll(out, (dy, dx), dims=(-2, -1)))
        for dy in range(4)
        for dx in range(4)
    )


def test_downsample_dispatches_by_name_and_refuses_unknown_names():
    z = torch.randn(2, 4, 1, 4, 4)
    assert torch.equal(downsample(z, "max"), max_downsample(z))
    assert torch.equal(downsample(z, "polyphase"), polyphase_downsample(z))
    with pytest.raises(ValueError, match="even"):
        max_downsample(torch.randn(1, 1, 1, 7, 7))
    with pytest.raises(ConfigError, match="polyphase, max"):
        downsample(z, "average")
