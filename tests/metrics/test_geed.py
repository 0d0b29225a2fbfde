import math

import pytest
import torch
from torch import nn

from ella.groups import CircularTranslations, get_group
from ella.metrics import (
    DISTANCES,
    channel_cosine_distance,
    channelwise_equivariance,
    deviation_from_orbit,
    geed,
    get_distance,
    invariance_reference,
    kl_divergence,
    output_invariance,
    reverse_kl_divergence,
)
from ella.models import mixer
from ella.nn import ConvPath, FCPath, GConvPath, Lift


def _pair(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Two different valid inputs for the distance ``name``."""
    if name in ("kl", "reverse_kl"):
        return torch.randn(5, 7).softmax(-1), torch.randn(5, 7).softmax(-1)
    return torch.randn(5, 3, 4, 4), torch.randn(5, 3, 4, 4)


@pytest.mark.parametrize("name", sorted(DISTANCES))
def test_each_distance_is_zero_for_identical_outputs_and_positive_otherwise(name):
    m = get_distance(name)
    a, b = _pair(name)
    assert torch.equal(m(a, a.clone()), torch.zeros(5))
    assert (m(a, b) > 0).all()


def test_kl_direction_is_as_documented():
    a = torch.tensor([[0.5, 0.5]])
    b = torch.tensor([[0.9, 0.1]])
    kl_ab = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)  # KL(a || b) = 0.511
    kl_ba = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)  # KL(b || a) = 0.368
    assert kl_divergence(a, b).item() == pytest.approx(kl_ab, rel=1e-5)
    assert reverse_kl_divergence(a, b).item() == pytest.approx(kl_ba, rel=1e-5)
    assert abs(kl_ab - kl_ba) > 0.1  # the two directions really differ here


def test_kl_refuses_logits():
    with pytest.raises(ValueError, match="probability vectors"):
        kl_divergence(torch.randn(3, 4), torch.randn(3, 4).softmax(-1))


def test_channel_cosine_averages_channels_and_treats_dead_channels_as_equal():
    a = torch.randn(1, 3, 4, 4)
    b = a.clone()
    b[:, 1] = -a[:, 1]  # cosine -1 on channel 1
    a[:, 2] = 0
    b[:, 2] = 0  # dead on both sides: equal
    assert channel_cosine_distance(a, b).item() == pytest.approx(1 - (1 - 1 + 1) / 3)
    b[:, 2] = 1.0  # dead on one side only: cosine 0
    assert channel_cosine_distance(a, b).item() == pytest.approx(1 - (1 - 1 + 0) / 3)
    # lifted activations: every (copy, channel) counts as a channel
    z = torch.randn(2, 4, 3, 5, 5)
    w = z.clone()
    w[:, 0, 0] *= -1
    assert torch.allclose(channel_cosine_distance(z, w), torch.full((2,), 2 / 12))


def test_bad_inputs_give_clear_errors():
    with pytest.raises(ValueError, match="unknown distance 'manhattan'; choose from euclidean"):
        get_distance("manhattan")
    with pytest.raises(ValueError, match="use 'cosine' for vectors"):
        channel_cosine_distance(torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(ValueError, match="same shape"):
        DISTANCES["euclidean"](torch.randn(3, 4), torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"\(\|G\|, N, \.\.\.\)"):
        deviation_from_orbit(torch.randn(4, 3), torch.randn(4, 2), "euclidean")
    with pytest.raises(ValueError, match="unknown action 'rotate'"):
        geed(lambda t: t, torch.randn(2, 1, 4, 4), "C4", out_action="rotate")
    with pytest.raises(ValueError, match="unknown output"):
        output_invariance(lambda t: t, torch.randn(2, 1, 4, 4), "C4", output="scores")


def test_invariance_geed_is_equation_4_with_the_orbit_mean():
    # f reads three pixels; its orbit under C4 and the orbit mean by hand.
    x = torch.randn(3, 1, 4, 4)
    c4 = get_group("C4")

    def f(t):
        return t[:, 0, 0, :3]

    orbit = torch.stack([f(c4.act_on_image(g, x)) for g in range(4)])  # (4, 3, 3)
    mean = orbit.mean(0)
    expected = torch.stack([(orbit[g] - mean).norm(dim=1) for g in range(4)]).mean(0)
    result = geed(f, x, "C4", distance="euclidean")
    assert torch.allclose(result.per_input, expected, atol=1e-6)
    assert result.value == pytest.approx(float(expected.mean()), abs=1e-6)
    other = mean.roll(1, dims=0)  # the reference of the neighbouring input
    baseline = torch.stack([(orbit[g] - other).norm(dim=1) for g in range(4)]).mean(0)
    assert torch.allclose(result.baseline_per_input, baseline, atol=1e-6)
    assert torch.equal(invariance_reference(orbit)[2], mean)


def test_gconv_only_mixer_is_invariant_and_fc_only_is_not():
    x = torch.randn(6, 1, 12, 12)
    gconv = mixer(1, 5, 12, group="C4", paths=("gconv",), width=1).eval()
    fc = mixer(1, 5, 12, group="C4", paths=("fc",), width=1).eval()
    for output, distance in [("logits", "euclidean"), ("logits", "cosine"), ("softmax", "kl")]:
        exact = output_invariance(gconv, x, "C4", output=output, distance=distance)
        broken = output_invariance(fc, x, "C4", output=output, distance=distance)
        assert exact.value < 1e-6, (output, distance)
        assert broken.normalized > 0.1, (output, distance)


def test_ensemble_probabilities_are_measured_as_given():
    x = torch.randn(4, 1, 8, 8)
    members = [mixer(1, 3, 8, group="C4", paths=("gconv",), width=1).eval() for _ in range(2)]

    def mean_probabilities(t):
        return torch.stack([m(t).softmax(-1) for m in members]).mean(0)

    result = output_invariance(mean_probabilities, x, "C4", output="probabilities", distance="kl")
    assert result.value < 1e-6


def test_channelwise_is_zero_for_gconv_path_on_lifted_tensors():
    z = Lift("C4")(torch.randn(5, 2, 8, 8))
    path = GConvPath(2, 3, 8, group="C4").eval()
    result = channelwise_equivariance(path, z, "C4", in_action="lifted", out_action="lifted")
    assert result.value < 1e-6
    broken = channelwise_equivariance(
        ConvPath(2, 3, 8, group="C4"), z, "C4", in_action="lifted", out_action="lifted"
    )
    assert broken.value > 0.05


def test_channelwise_is_zero_for_conv_path_under_circular_translations():
    shifts = CircularTranslations(8, 8)
    z = torch.randn(3, 4, 2, 8, 8)  # lifted for C4; translations shift every copy
    conv = ConvPath(2, 3, 8, group="C4").eval()
    result = channelwise_equivariance(conv, z, shifts, in_action="lifted", out_action="lifted")
    assert result.value < 1e-6
    fc = FCPath(2, 3, 8, group="C4").eval()
    broken = channelwise_equivariance(fc, z, shifts, in_action="lifted", out_action="lifted")
    assert broken.value > 0.05


def test_channelwise_for_a_plain_cnn_on_images():
    x = torch.randn(4, 1, 8, 8)
    conv = nn.Conv2d(1, 4, 3, padding=1, padding_mode="circular").eval()
    assert channelwise_equivariance(conv, x, CircularTranslations(8, 8)).value < 1e-6
    assert channelwise_equivariance(conv, x, "C4").value > 0.01  # random filters are not rotation
    # equivariant; a rotation-symmetric filter (centre tap only) is
    centre = nn.Conv2d(1, 1, 3, padding=1, bias=False)
    with torch.no_grad():
        centre.weight.zero_()
        centre.weight[0, 0, 1, 1] = 2.0
    assert channelwise_equivariance(centre, x, "C4").value < 1e-6


def test_normalised_geed_does_not_reward_a_nearly_constant_function():
    # f = c + eps * w x: the raw G-EED shrinks with eps, the normalised one does not.
    x = torch.randn(8, 1, 6, 6)
    w = torch.randn(36, 4)

    def nearly_constant(eps):
        return lambda t: 1.0 + eps * t.flatten(1) @ w

    loud, quiet = (geed(nearly_constant(e), x, "C4") for e in (1.0, 1e-4))
    assert quiet.value < 1e-3 * loud.value
    assert quiet.normalized == pytest.approx(loud.normalized, rel=1e-2)
    assert loud.normalized > 0.3
    constant = geed(lambda t: torch.ones(len(t), 3), x, "C4")
    assert constant.value == 0 and math.isnan(constant.normalized)


def test_values_per_input_do_not_depend_on_the_batching():
    x = torch.randn(10, 1, 6, 6)
    w = torch.randn(36, 4)

    def f(t):
        return t.flatten(1) @ w

    small, whole = geed(f, x, "D4", batch_size=3), geed(f, x, "D4", batch_size=64)
    assert torch.allclose(small.per_input, whole.per_input, atol=1e-6)
    assert small.baseline_per_input.isfinite().all()  # no lone input without a pair
