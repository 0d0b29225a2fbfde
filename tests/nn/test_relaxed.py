import pytest
import torch

from ella.nn import ConvPath, FCPath, GConvPath, RelaxedLayer
from ella.nn.relaxed import instance_normalise
from ella.testing import assert_equivariant
from tests.cases import GROUPS, NONTRIVIAL_GROUPS
from tests.nn.module_calls import assert_same_as_module_calls, aten_ops


def test_paths_are_exposed_by_name():
    layer = RelaxedLayer(2, 3, 8, group="C4")
    assert layer.path_names == ("fc", "conv", "gconv")
    all_params = {id(p) for p in layer.parameters()}
    per_path = [layer.path_parameters(name) for name in layer.path_names]
    assert sum(len(ps) for ps in per_path) == len(all_params)
    assert {id(p) for ps in per_path for p in ps} == all_params
    assert layer.path_parameters("gconv") == list(layer.paths["gconv"].parameters())
    with pytest.raises(KeyError, match="not 'fc'"):
        RelaxedLayer(2, 3, 8, paths=("conv",)).path_parameters("fc")


def test_output_is_relu_of_scaled_path_sum():
    layer = RelaxedLayer(2, 3, 8, group="C4", stride=2)
    z = torch.randn(2, 4, 2, 8, 8)
    expected = torch.relu(sum(p(z) for p in layer.paths.values()) / 3**0.5)
    torch.testing.assert_close(layer(z), expected)
    assert layer(z).shape == (2, 4, 3, 4, 4)


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("stride", [1, 2])
def test_gconv_only_layer_is_equivariant(group, stride):
    layer = RelaxedLayer(2, 3, 8, group=group, paths=("gconv",), stride=stride)
    z = torch.randn(2, layer.group.order, 2, 8, 8)
    assert_equivariant(layer, group, z, in_action="lifted", out_action="lifted")
    assert layer.equivariance_error() < 1e-5


def test_mixed_layer_is_not_equivariant():
    assert RelaxedLayer(2, 3, 8, group="C4").equivariance_error() > 1e-3


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown path name.*'dense'"):
        RelaxedLayer(2, 3, 8, paths=("fc", "dense"))
    with pytest.raises(ValueError, match="at least one path"):
        RelaxedLayer(2, 3, 8, paths=())
    with pytest.raises(ValueError, match="repeat"):
        RelaxedLayer(2, 3, 8, paths=("fc", "fc"))
    with pytest.raises(ValueError, match="unknown group"):
        RelaxedLayer(2, 3, 8, group="SO2")
    layer = RelaxedLayer(2, 3, 8)
    with pytest.raises(ValueError, match="RelaxedLayer: expected 2 input channels, got 1"):
        layer(torch.randn(1, 4, 1, 8, 8))
    with pytest.raises(ValueError, match="size 8x8, got 16x16"):
        layer(torch.randn(1, 4, 2, 16, 16))


def test_instance_norm_standardises_each_example_and_channel_before_the_relu():
    layer = RelaxedLayer(2, 3, 8, group="C4", norm="instance", activation=False)
    z = 5 * torch.randn(2, 4, 2, 8, 8) + 3
    out = layer(z)
    raw = sum(p(z) for p in layer.paths.values()) / 3**0.5
    for b in range(2):
        for c in range(3):
            values = raw[b, :, c]
            expected = (values - values.mean()) / (values.var(unbiased=False) + 1e-5).sqrt()
            torch.testing.assert_close(out[b, :, c], expected)
    # each example on its own: another example in the batch changes nothing
    torch.testing.assert_close(layer(z[:1]), out[:1])


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("stride", [1, 2])
def test_instance_norm_keeps_the_gconv_layer_equivariant(group, stride):
    layer = RelaxedLayer(2, 3, 8, group=group, paths=("gconv",), stride=stride, norm="instance")
    z = torch.randn(2, layer.group.order, 2, 8, 8)
    assert_equivariant(layer, group, z, in_action="lifted", out_action="lifted")


def test_instance_norm_refuses_a_single_value_per_channel():
    with pytest.raises(ValueError, match="more than one value per channel"):
        RelaxedLayer(2, 3, 1, group="trivial", norm="instance")
    with pytest.raises(ValueError, match="choose from none, instance"):
        RelaxedLayer(2, 3, 8, norm="batch")
    RelaxedLayer(2, 3, 1, group="C4", norm="instance")  # four group copies are enough


# ---------------------------------------------------------------- one convolution
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("stride, downsample", [(1, "polyphase"), (2, "polyphase"), (2, "max")])
@pytest.mark.parametrize(
    "paths, gconv_mode",
    [
        (("fc", "conv", "gconv"), "full"),
        (("conv", "gconv"), "full"),
        (("gconv",), "full"),
        (("conv",), "full"),
        (("fc", "conv", "gconv"), "shared"),
    ],
)
def test_one_convolution_equals_each_path_called_on_its_own(
    float64, group, stride, downsample, paths, gconv_mode
):
    """The layer's fused CONV+GCONV convolution is the sum of the paths' own module calls,
    in value and in every gradient (input and parameters); with stride 2 and max pooling
    the paths' parts are pooled in one call."""
    layer = RelaxedLayer(
        2, 3, 8, group, paths=paths, stride=stride, gconv_mode=gconv_mode, downsample=downsample
    )
    assert_same_as_module_calls(layer, torch.randn(3, layer.group.order, 2, 8, 8))


def convolutions(fn) -> int:
    return aten_ops(fn, torch.ops.aten.convolution.default)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_and_gconv_paths_run_as_one_convolution(stride):
    from ella.nn import per_module_calls

    layer = RelaxedLayer(2, 3, 8, "C4", stride=stride)
    z = torch.randn(2, 4, 2, 8, 8)
    assert convolutions(lambda: layer(z)) == 1
    with per_module_calls(layer):
        assert convolutions(lambda: layer(z)) == 2
    shared = RelaxedLayer(2, 3, 8, "C4", gconv_mode="shared")  # G times the work if expanded
    assert convolutions(lambda: shared(z)) == 2


# ---------------------------------------------------------------- paths that start at zero
@pytest.mark.parametrize(
    "path",
    [
        FCPath(2, 3, 8, "C4"),
        FCPath(2, 3, 8, "C4", stride=2, rank=2),
        FCPath(1, 2, 4, "C4", mode="dense"),
        ConvPath(2, 3, 8, "C4"),
        GConvPath(2, 3, 8, "C4", stride=2),
        GConvPath(2, 3, 8, "C4", mode="shared"),
    ],
    ids=["fc", "fc-rank2-stride2", "fc-dense", "conv", "gconv-stride2", "gconv-shared"],
)
def test_a_path_started_at_zero_outputs_zero_and_gets_a_gradient(path):
    path.start_at_zero()
    z = torch.randn(3, 4, path.in_channels, *path.in_size)
    out = path(z)
    assert torch.equal(out, torch.zeros_like(out))
    (out * torch.randn_like(out)).sum().backward()
    for param in path.output_parameters():
        assert param.grad is not None and param.grad.abs().max() > 0
    zeroed = {id(p) for p in path.output_parameters()}
    assert all(p.abs().max() > 0 for p in path.parameters() if id(p) not in zeroed)


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
def test_a_layer_whose_fc_path_starts_at_zero_is_its_convolutions(group):
    """With the FC path at zero and instance norm (which removes the 1/sqrt(P) scale), the
    mixed layer computes exactly the CONV+GCONV layer with the same filters, so it starts
    equivariant under the whole group."""
    torch.manual_seed(0)
    mixed = RelaxedLayer(2, 3, 8, group=group, norm="instance", zero_init=("fc",))
    convs = RelaxedLayer(2, 3, 8, group=group, norm="instance", paths=("conv", "gconv"))
    for name in ("conv", "gconv"):
        convs.paths[name].load_state_dict(mixed.paths[name].state_dict())
    z = torch.randn(2, mixed.group.order, 2, 8, 8)
    torch.testing.assert_close(mixed(z), convs(z))
    start = RelaxedLayer(2, 3, 8, group=group, norm="instance", zero_init=("fc", "conv"))
    assert_equivariant(start, group, z, in_action="lifted", out_action="lifted")
    assert RelaxedLayer(2, 3, 8, group=group, norm="instance").equivariance_error() > 1e-3


def test_zero_init_skips_absent_paths_and_single_path_layers():
    torch.manual_seed(0)
    fc_only = RelaxedLayer(2, 3, 8, paths=("fc",), zero_init=("fc",))
    assert all(p.abs().max() > 0 for p in fc_only.paths["fc"].output_parameters()[::2])
    convs = RelaxedLayer(2, 3, 8, paths=("conv", "gconv"), zero_init=("fc",))
    assert convs.paths["conv"].conv.weight.abs().max() > 0
    with pytest.raises(ValueError, match="leave at least one path out"):
        RelaxedLayer(2, 3, 8, paths=("fc", "conv"), zero_init=("conv", "fc"))
    with pytest.raises(ValueError, match="unknown path name"):
        RelaxedLayer(2, 3, 8, zero_init=("dense",))


def test_instance_normalise_standardises_each_example_and_channel_over_group_and_space():
    """Against its definition, ``(z - mean) / sqrt(var + eps)`` with the biased variance over
    (group, H, W) of each (example, channel), in float64; gradients by finite differences."""
    z = torch.randn(3, 4, 5, 6, 6, dtype=torch.float64)
    var, mean = torch.var_mean(z, dim=(1, 3, 4), keepdim=True, correction=0)
    expected = (z - mean) / torch.sqrt(var + 1e-5)
    out = instance_normalise(z)
    assert out.is_contiguous() and out.shape == z.shape
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    small = torch.randn(2, 4, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(instance_normalise, (small,))
