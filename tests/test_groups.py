import pytest
import torch

from ella.groups import C4, D4, CircularTranslations, TrivialGroup, available_groups, get_group

GROUPS = [TrivialGroup(), C4(), D4()]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_action_is_a_homomorphism(group):
    x = torch.randn(2, 3, 6, 6)
    for a in group.elements:
        for b in group.elements:
            lhs = group.act_on_image(a, group.act_on_image(b, x))
            rhs = group.act_on_image(group.compose(a, b), x)
            assert torch.equal(lhs, rhs), (a, b)


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_group_axioms(group):
    x = torch.randn(1, 1, 5, 5)
    assert torch.equal(group.act_on_image(group.identity, x), x)
    for g in group.elements:
        assert group.compose(g, group.inverse(g)) == group.identity
    # distinct elements act differently on a generic image
    images = [group.act_on_image(g, x) for g in group.elements]
    for i in range(len(images)):
        for j in range(i):
            assert not torch.equal(images[i], images[j])


def test_orders():
    assert [get_group(n).order for n in ("trivial", "C4", "D4")] == [1, 4, 8]
    assert set(available_groups()) == {"trivial", "C4", "D4"}
    assert get_group("c4").name == "C4"


def test_c4_is_rot90():
    x = torch.randn(1, 1, 4, 4)
    assert torch.equal(C4().act_on_image(1, x), torch.rot90(x, 1, dims=(-2, -1)))


def test_d4_is_not_abelian():
    d4 = D4()
    assert any(d4.compose(a, b) != d4.compose(b, a) for a in d4.elements for b in d4.elements)


@pytest.mark.parametrize("group", GROUPS + [CircularTranslations(4, 5)], ids=lambda g: g.name)
def test_lifted_action_is_a_left_action(group):
    z = torch.randn(2, group.order if group.name != "translations" else 3, 2, 4, 5)
    if group.requires_square:
        z = torch.randn(2, group.order, 2, 4, 4)
    elements = group.elements[:6]
    for a in elements:
        for b in elements:
            lhs = group.act_on_lifted(a, group.act_on_lifted(b, z))
            assert torch.equal(lhs, group.act_on_lifted(group.compose(a, b), z))


def test_translations_roll():
    t = CircularTranslations(4, 6)
    x = torch.randn(1, 1, 4, 6)
    g = t.compose(7, 20)
    assert torch.equal(t.act_on_image(g, x), t.act_on_image(7, t.act_on_image(20, x)))
    assert torch.equal(t.act_on_image(7, x), torch.roll(x, (1, 1), dims=(-2, -1)))


def test_unknown_group():
    with pytest.raises(ValueError, match="unknown group 'SO3'.*C4"):
        get_group("SO3")


def test_bad_images():
    with pytest.raises(ValueError, match="square"):
        C4().act_on_image(1, torch.randn(1, 1, 4, 5))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        C4().act_on_image(1, torch.randn(4, 4))
    with pytest.raises(ValueError, match="elements 0..3"):
        C4().act_on_image(4, torch.randn(1, 1, 4, 4))
    # the trivial group accepts any image shape
    x = torch.randn(1, 1, 4, 5)
    assert torch.equal(TrivialGroup().act_on_image(0, x), x)


def test_interpolated_rotation_groups():
    import math

    from ella.groups import RotationGroup, rotate

    c8 = get_group("C8")
    assert isinstance(c8, RotationGroup) and c8.order == 8 and get_group("c16").order == 16
    assert isinstance(get_group("C4"), type(C4()))  # C4 stays the exact matrix group
    x = torch.randn(2, 1, 9, 9)
    # multiples of 90 degrees are exact rot90; the rest match a bilinear rotation
    assert torch.equal(c8.act_on_image(2, x), torch.rot90(x, 1, dims=(-2, -1)))
    expected = rotate(x, torch.full((2,), math.pi / 4))
    assert torch.allclose(c8.act_on_image(1, x), expected)
    assert c8.compose(5, 6) == 3 and c8.inverse(3) == 5
    with pytest.raises(ValueError, match="C<N>"):
        get_group("C0")


def test_rotation_by_interpolation_is_close_to_rot90_for_smooth_images():
    import math

    from ella.groups import rotate

    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    smooth = torch.exp(-((yy - 0.2) ** 2 + xx**2) / 0.1)[None, None]
    turned = rotate(smooth, torch.tensor([math.pi / 2]))
    assert (turned - torch.rot90(smooth, 1, dims=(-2, -1))).abs().max() < 1e-5
