import pytest
import torch

from ella.groups import get_group
from ella.nn import GroupPool, Lift
from ella.testing import assert_equivariant
from tests.cases import GROUPS, NONTRIVIAL_GROUPS


@pytest.mark.parametrize("name", GROUPS)
def test_lift_shape_and_content(name):
    group = get_group(name)
    x = torch.randn(2, 3, 6, 6)
    z = Lift(name)(x)
    assert z.shape == (2, group.order, 3, 6, 6)
    for g in group.elements:
        assert torch.equal(z[:, g], group.act_on_image(g, x))


@pytest.mark.parametrize("name", NONTRIVIAL_GROUPS)
def test_lift_turns_image_action_into_permutation(name):
    assert_equivariant(Lift(name), name, torch.randn(2, 3, 6, 6), out_action="lifted", atol=0)


@pytest.mark.parametrize("mode", ["max", "mean"])
def test_group_pool_is_invariant(mode):
    z = torch.randn(2, 8, 3, 4, 4)
    pool = GroupPool("D4", mode)
    assert pool(z).shape == (2, 3, 4, 4)
    assert_equivariant(pool, "D4", z, in_action="lifted")


def test_group_pool_none_keeps_the_copies_as_channels_and_is_equivariant():
    z = torch.randn(2, 8, 3, 4, 4)
    pool = GroupPool("D4", "none")
    assert pool.copies_kept == 8 and GroupPool("D4", "max").copies_kept == 1
    out = pool(z)
    assert out.shape == (2, 24, 4, 4) and torch.equal(out[:, 3:6], z[:, 1])  # copy 1's block
    assert_equivariant(
        lambda t: pool(t).unflatten(1, (8, 3)), "D4", z, in_action="lifted", out_action="lifted"
    )


def test_bad_inputs():
    with pytest.raises(ValueError, match="square"):
        Lift("C4")(torch.randn(1, 1, 4, 5))
    with pytest.raises(ValueError, match="expected 1 input channels, got 3"):
        Lift("C4", in_channels=1)(torch.randn(1, 3, 4, 4))
    with pytest.raises(ValueError, match="GroupPool mode 'median'; choose from max, mean, none"):
        GroupPool("C4", "median")
    with pytest.raises(ValueError, match=r"\(B, 4, C, H, W\)"):
        GroupPool("C4")(torch.randn(1, 8, 1, 4, 4))
