import pytest
import torch
from torch import nn

from ella.ensembles import Ensemble, init_members
from ella.models import mixer


def small_mixer():
    return mixer(1, 5, 8, group="C4", paths=("fc", "conv", "gconv"), width=1)


def test_init_members_uses_one_seed_per_member():
    members = init_members(small_mixer, [3, 7])
    torch.manual_seed(7)
    reference = small_mixer()
    for a, b in zip(members[1].parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(next(members[0].parameters()), next(members[1].parameters()))


@pytest.mark.parametrize("per_member", [False, True])
def test_vectorised_and_looped_ensembles_agree(per_member):
    members = init_members(small_mixer, [0, 1, 2])
    vec, loop = Ensemble(members, vectorize=True), Ensemble(members, vectorize=False)
    x = torch.randn(3, 4, 1, 8, 8) if per_member else torch.randn(4, 1, 8, 8)
    out_vec, out_loop = vec(x, per_member=per_member), loop(x, per_member=per_member)
    assert out_vec.shape == (3, 4, 5)
    assert torch.allclose(out_vec, out_loop, atol=1e-6)
    out_vec.square().sum().backward()
    out_loop.square().sum().backward()
    assert torch.allclose(vec.flat_parameters(), loop.flat_parameters())
    grads_vec = torch.cat([p.grad.reshape(3, -1) for p in vec.stacked_params], 1)
    grads_loop = torch.stack(
        [torch.cat([p.grad.reshape(-1) for p in m.parameters()]) for m in loop.members]
    )
    assert torch.allclose(grads_vec, grads_loop, atol=1e-5, rtol=1e-4)


def test_member_states_round_trip_between_modes():
    members = init_members(small_mixer, [0, 1])
    vec = Ensemble(members, vectorize=True)
    loop = Ensemble(init_members(small_mixer, [5, 6]), vectorize=False)
    loop.load_member_state_dicts(vec.member_state_dicts())
    x = torch.randn(2, 1, 8, 8)
    assert torch.allclose(vec(x), loop(x), atol=1e-6)
    assert torch.allclose(vec.member(1)(x), members[1](x), atol=1e-6)


def test_plain_pytorch_members():
    def linear():
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

    ens = Ensemble(init_members(linear, [0, 1]), vectorize=True)
    assert ens(torch.randn(5, 1, 4, 4)).shape == (2, 5, 3)


def test_member_errors():
    with pytest.raises(ValueError, match="same parameter"):
        Ensemble([nn.Linear(2, 3), nn.Linear(3, 3)])
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])
    ens = Ensemble([nn.Linear(2, 3), nn.Linear(2, 3)])
    with pytest.raises(ValueError, match="leading axis of size 2"):
        ens(torch.randn(3, 4, 2), per_member=True)


def test_subset_keeps_the_first_members():
    ens = Ensemble(init_members(small_mixer, [0, 1, 2]))
    x = torch.randn(2, 1, 8, 8)
    assert torch.allclose(ens.subset(2)(x), ens(x)[:2], atol=1e-6)
    with pytest.raises(ValueError, match="1..3"):
        ens.subset(4)
