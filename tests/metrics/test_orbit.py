import pytest
import torch

from ella.metrics import orbit_outputs, orbit_same_predictions, orbit_symmetric_kl
from ella.models import mixer


def test_osp_is_order_for_an_exactly_invariant_model():
    torch.manual_seed(0)
    model = mixer(1, 5, 8, group="C4", paths=("gconv",), width=1).eval()
    x = torch.randn(6, 1, 8, 8)
    outputs = orbit_outputs(model, x, "C4")
    assert outputs.shape == (4, 6, 5)
    assert torch.equal(orbit_same_predictions(outputs), torch.full((6,), 4))
    assert orbit_symmetric_kl(outputs.log_softmax(-1)).abs().max() < 1e-6


def test_osp_counts_matching_argmax_by_definition():
    # 3 group elements, 2 inputs, 3 classes; element 0 is the identity.
    outputs = torch.tensor(
        [
            [[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]],  # identity: classes 1 and 0
            [[0.0, 3.0, 1.0], [0.0, 5.0, 0.0]],  # g1: same, different
            [[9.0, 2.0, 1.0], [4.0, 0.0, 1.0]],  # g2: different, same
        ]
    )
    assert orbit_same_predictions(outputs).tolist() == [2, 2]


def test_symmetric_kl_matches_its_definition():
    torch.manual_seed(1)
    log_probs = torch.randn(4, 3, 6).log_softmax(-1)
    p = log_probs.exp()
    expected = torch.zeros(3)
    for g in range(1, 4):
        kl_eg = (p[0] * (log_probs[0] - log_probs[g])).sum(-1)
        kl_ge = (p[g] * (log_probs[g] - log_probs[0])).sum(-1)
        expected += (kl_eg + kl_ge) / 3
    assert torch.allclose(orbit_symmetric_kl(log_probs), expected, atol=1e-6)
    identical = log_probs[:1].expand(4, 3, 6)
    assert torch.equal(orbit_symmetric_kl(identical), torch.zeros(3))
    assert (orbit_symmetric_kl(log_probs) > 0).all()


def test_orbit_outputs_act_with_each_element():
    x = torch.randn(2, 1, 6, 6)
    outputs = orbit_outputs(lambda z: z.flatten(1), x, "C4")
    for g in range(4):
        assert torch.equal(outputs[g], torch.rot90(x, g, dims=(-2, -1)).flatten(1))


def test_orbit_shape_errors():
    with pytest.raises(ValueError, match="orbit_outputs"):
        orbit_same_predictions(torch.zeros(3, 4))
