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
