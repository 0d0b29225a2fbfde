import pytest
import torch
from torch import nn

from ella.groups import CircularTranslations, get_group
from ella.nn import ConvPath, FCPath, GConvPath, RelaxedLayer, ResidualConvPath, per_module_calls
from ella.nn.kinds import PATH_KINDS
from ella.nn.paths import contiguous_grad, residual_basis
from ella.testing import assert_equivariant, equivariance_errors
from tests.cases import (
    GROUP_EQUIVARIANT,
    KINDS,
    NONTRIVIAL_GROUPS,
    TRANSLATION_EQUIVARIANT,
    make_path,
)
from tests.nn.module_calls import assert_same_as_module_calls, aten_ops


def lifted(group, c=2, size=8, b=3):
    return torch.randn(b, get_group(group).order, c, size, size)


# ---------------------------------------------------------------- shapes and counts
@pytest.mark.parametrize("stride", [1, 2])
def test_shapes(path_case, stride):
    path = make_path(path_case, 2, 3, 8, "C4", stride=stride)
    out = path(lifted("C4"))
    assert out.shape == (3, 4, 3, 8 // stride, 8 // stride)
    assert path.out_size == (8 // stride, 8 // stride)


def count(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("group,G", [("trivial", 1), ("C4", 4), ("D4", 8)])
def test_parameter_counts(group, G):
    c_in, c_out, k = 3, 5, 3
    s_in, s_out = 8 * 8, 4 * 4
    ci, co = G * c_in, G * c_out
    assert count(ConvPath(c_in, c_out, 8, group, k)) == ci * co * k * k + co
    assert count(GConvPath(c_in, c_out, 8, group, k, mode="shared")) == c_in * c_out * k * k + c_out
    full = GConvPath(c_in, c_out, 8, group, k, mode="full")
    assert count(full) == G * c_in * c_out * k * k + c_out
    # the factorisation: C^2 S^4 -> C^2 (S_in + S_out) (+ one bias per output unit)
    assert count(FCPath(c_in, c_out, 8, group, stride=2)) == ci * co * (s_in + s_out) + co * s_out
    assert count(FCPath(c_in, c_out, 8, group, stride=2, mode="dense")) == (
        ci * s_in * co * s_out + co * s_out
    )
    assert count(FCPath(c_in, c_out, 8, group, stride=2, rank=3)) == (
        3 * ci * co * (s_in + s_out) + co * s_out
    )


def test_factorized_fc_equals_its_implied_dense_weight():
    """W[o, i, y, x] = V[y, (o, i)] U[o, (i, x)] (ELLA paper, Sec. 3): check the forward."""
    path = FCPath(2, 3, 4, "C4", stride=2)
    z = lifted("C4", c=2, size=4)
    U = path.pixel_maps.weight.transpose(0, 1)  # (Co, Ci, S_in)
    V = path.channel_maps.weight.transpose(0, 1)  # (S_out, Co, Ci)
    bias = path.channel_maps.bias  # (Co, S_out)
    W = torch.einsum("yoi,oix->oiyx", V, U)
    expected = torch.einsum("oiyx,bix->boy", W, z.reshape(3, 8, 16)) + bias
    torch.testing.assert_close(path(z), expected.reshape(3, 4, 3, 2, 2))


@pytest.mark.parametrize("group,c_in", [("trivial", 1), ("C4", 2)])
def test_factorized_fc_of_rank_r_equals_its_implied_dense_weight(float64, group, c_in):
    """W[o, i, y, x] = sum_r V[y, (o, i, r)] U[(o, r), (i, x)], written out per entry."""
    rank, c_out = 3, 2
    path = FCPath(c_in, c_out, 4, group, stride=2, rank=rank)
    g = path.group.order
    ci, co = g * c_in, g * c_out
    z = lifted(group, c=c_in, size=4)
    U = path.pixel_maps.weight  # (Ci, Co R, S_in)
    V = path.channel_maps.weight  # (Co, S_out, Ci R)
    W = torch.zeros(co, ci, 4, 16)
    for o in range(co):
        for i in range(ci):
            for r in range(rank):
                W[o, i] += torch.outer(V[o, :, i * rank + r], U[i, o * rank + r])
    bias = path.channel_maps.bias
    expected = torch.einsum("oiyx,bix->boy", W, z.reshape(3, ci, 16)) + bias
    torch.testing.assert_close(path(z), expected.reshape(3, g, c_out, 2, 2))
    # each (output, input) channel pair maps through R projections, not one
    assert torch.linalg.matrix_rank(W[0, 0]) == rank


def test_fc_rank_needs_the_factorised_mode():
    with pytest.raises(ValueError, match="rank"):
        FCPath(1, 2, 4, "trivial", mode="dense", rank=2)
    with pytest.raises(ValueError, match="rank"):
        FCPath(1, 2, 4, "trivial", rank=0)


# ---------------------------------------------------------------- symmetry
@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("mode", ["full", "shared"])
@pytest.mark.parametrize("stride", [1, 2])
def test_gconv_path_is_group_equivariant(group, mode, stride):
    path = GConvPath(2, 3, 8, group, stride=stride, mode=mode)
    assert_equivariant(path, group, lifted(group), in_action="lifted", out_action="lifted")


def test_the_symmetries_name_kinds_of_the_registry():
    assert set(GROUP_EQUIVARIANT) | set(TRANSLATION_EQUIVARIANT) <= set(KINDS)


@pytest.mark.parametrize("kind", TRANSLATION_EQUIVARIANT)
def test_conv_paths_are_translation_equivariant(kind):
    path = PATH_KINDS[kind](2, 3, 8, "C4")
    shifts = CircularTranslations(8, 8)
    assert_equivariant(
        path,
        shifts,
        lifted("C4"),
        in_action="lifted",
        out_action="lifted",
        elements=range(0, 64, 5),
    )


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in GROUP_EQUIVARIANT])
def test_the_other_kinds_are_not_group_equivariant(kind):
    path = PATH_KINDS[kind](2, 3, 8, "C4")
    errors = equivariance_errors(path, "C4", lifted("C4"), in_action="lifted", out_action="lifted")
    assert min(errors[g] for g in (1, 2, 3)) > 1e-2


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in TRANSLATION_EQUIVARIANT])
def test_the_other_kinds_are_not_translation_equivariant(kind):
    path = PATH_KINDS[kind](2, 3, 8, "C4")
    errors = equivariance_errors(
        path,
        CircularTranslations(8, 8),
        lifted("C4"),
        in_action="lifted",
        out_action="lifted",
        elements=[1, 8, 9],
    )
    assert min(errors.values()) > 1e-2


# ---------------------------------------------------------------- bad input
def test_bad_construction():
    with pytest.raises(ValueError, match="square"):
        ConvPath(2, 3, (8, 6), "C4")
    with pytest.raises(ValueError, match="odd"):
        ConvPath(2, 3, 8, "C4", kernel_size=4)
    with pytest.raises(ValueError, match="stride"):
        GConvPath(2, 3, 8, "C4", stride=3)
    with pytest.raises(ValueError, match="even image size"):
        FCPath(2, 3, 7, "C4", stride=2)
    with pytest.raises(ValueError, match="mode"):
        GConvPath(2, 3, 8, "C4", mode="separable")
    with pytest.raises(ValueError, match="unknown group"):
        FCPath(2, 3, 8, "Z5")
    # the trivial group allows non-square images
    assert FCPath(2, 3, (8, 6), "trivial")(torch.randn(2, 1, 2, 8, 6)).shape == (2, 1, 3, 8, 6)


def test_bad_input_shapes():
    path = GConvPath(2, 3, 8, "C4")
    with pytest.raises(ValueError, match="forget ella.nn.Lift"):
        path(torch.randn(3, 2, 8, 8))
    with pytest.raises(ValueError, match="expected 2 input channels, got 5"):
        path(torch.randn(3, 4, 5, 8, 8))
    with pytest.raises(ValueError, match="group has order 4"):
        path(torch.randn(3, 8, 2, 8, 8))
    with pytest.raises(ValueError, match="built for images of size 8x8, got 6x6"):
        path(torch.randn(3, 4, 2, 6, 6))


# ---------------------------------------------------------------- FC path without loops
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("rank", [1, 3])
def test_fc_batched_forward_equals_one_call_per_channel(float64, stride, rank):
    path = FCPath(3, 2, 8, "C4", stride=stride, rank=rank)
    assert_same_as_module_calls(path, lifted("C4", c=3))


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("stride", [1, 2])
def test_gconv_expanded_filter_equals_the_gathered_copies(float64, group, stride):
    """A full GCONV path's one convolution with the expanded filter is its definition
    ``out[h] = sum_k W_k * z[k h]`` (the gather and the ``Conv2d`` call)."""
    assert_same_as_module_calls(GConvPath(3, 2, 8, group, stride=stride), lifted(group, c=3))
    with pytest.raises(ValueError, match="shared"):
        GConvPath(3, 2, 8, group, mode="shared").lifted_filter()


def test_fc_forward_makes_the_same_number_of_operations_for_any_channel_count():
    def forward(channels):
        path = FCPath(channels, channels, 8, "C4")
        z = lifted("C4", c=channels)
        return lambda: path(z)

    assert aten_ops(forward(1)) == aten_ops(forward(8)) <= 40  # vs ~8 per channel in a loop


def test_contiguous_grad_is_the_identity_with_a_contiguous_gradient():
    x = torch.randn(3, 4, 5, requires_grad=True)
    y = contiguous_grad(x)
    assert torch.equal(y, x)
    seen = []
    y.register_hook(lambda g: seen.append(g.is_contiguous()))
    x.register_hook(lambda g: seen.append(g.is_contiguous()))
    weight = torch.randn(4, 3, 5)
    (y.transpose(0, 1) * weight).sum().backward()
    assert seen == [False, True]  # strided where it arrives, contiguous where it leaves
    torch.testing.assert_close(x.grad, weight.transpose(0, 1))


def test_contiguous_grad_goes_through_torch_func_transforms():
    """The ensembles vectorise members with ``torch.func``; the function must not stop it."""
    x = torch.randn(3, 4, dtype=torch.float64)
    jac = torch.func.jacrev(lambda t: contiguous_grad(t).sin().T)(x)
    torch.testing.assert_close(jac, torch.func.jacrev(lambda t: t.sin().T)(x))
    _, tangent = torch.func.jvp(lambda t: contiguous_grad(t) * 2, (x,), (torch.ones_like(x),))
    torch.testing.assert_close(tangent, 2 * torch.ones_like(x))
    batched = torch.func.vmap(lambda t: contiguous_grad(t).sum())(x)
    torch.testing.assert_close(batched, x.sum(1))


def test_fc_backward_copies_do_not_grow_with_the_channel_count():
    """``bmm``'s backward copies a strided gradient one batch matrix at a time; the FC path
    hands it contiguous gradients (:func:`ella.nn.paths.contiguous_grad`), so the copies
    that compute a backward pass do not depend on the number of channels (those that
    store each per-channel module's weight gradient do)."""
    from torch.profiler import ProfilerActivity, profile

    def storing(event) -> bool:
        while event is not None:
            if "AccumulateGrad" in event.name:
                return True
            event = event.cpu_parent
        return False

    def copies(channels: int) -> int:
        path = FCPath(channels, channels, 8, "C4")
        out = path(lifted("C4", c=channels))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out.sum().backward()
        return sum(e.name == "aten::copy_" and not storing(e) for e in prof.events())

    assert copies(1) == copies(8)


# ---------------------------------------------------------------- the residual path
def group_average(module, group, z):
    """``(1/|G|) sum_g g^-1 . f(g . z)``: the part of ``f`` that is equivariant."""
    g = get_group(group)
    with torch.no_grad():
        return (
            sum(g.act_on_lifted(g.inverse(e), module(g.act_on_lifted(e, z))) for e in g.elements)
            / g.order
        )


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("calls", [False, True])
def test_the_residual_path_has_no_equivariant_part(float64, group, calls):
    """Its group average is zero (a CONV path's is not), and it is not equivariant itself.
    At stride 1: a path's downsampling picks its polyphase component from its own output,
    which is equivariant but not linear."""
    z = lifted(group)
    residual, conv = ResidualConvPath(2, 3, 8, group), ConvPath(2, 3, 8, group)
    calls_of_both = nn.ModuleList([residual, conv])
    with per_module_calls(calls_of_both) if calls else torch.no_grad():
        assert float(group_average(residual, group, z).abs().max()) < 1e-12
        assert float(group_average(conv, group, z).abs().max()) > 1e-2
        errors = equivariance_errors(residual, group, z, in_action="lifted", out_action="lifted")
    assert min(errors[e] for e in get_group(group).elements[1:]) > 1e-2


def test_the_residual_basis_is_orthonormal_and_sums_to_zero(float64):
    for order in (2, 4, 8):
        basis = residual_basis(order)
        torch.testing.assert_close(basis.T @ basis, torch.eye(order - 1))
        torch.testing.assert_close(basis.sum(0), torch.zeros(order - 1))


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
def test_gconv_and_residual_span_the_conv_path(float64, group):
    """Every CONV path is a GCONV path plus a residual path: the CONV filter split into its
    group average and the rest, ``V[h, k] = W[h, k h]``."""
    conv, gconv = ConvPath(2, 3, 8, group), GConvPath(2, 3, 8, group)
    residual = ResidualConvPath(2, 3, 8, group)
    order = gconv.group.order
    w, b = conv.lifted_filter()
    blocks = w.reshape(order, 3, order, 2, 3, 3)
    v = torch.stack([blocks[h][:, gconv.gather[h]] for h in range(order)])  # (h, o, k, i, y, x)
    bias = b.reshape(order, 3)
    with torch.no_grad():
        gconv.conv.weight.copy_(v.mean(0).reshape(3, order * 2, 3, 3))
        gconv.conv.bias.copy_(bias.mean(0))
        theta = torch.einsum("hm,hokixy->mokixy", residual.basis, v)
        residual.conv.weight.copy_(theta.reshape(-1, order * 2, 3, 3))
        residual.conv.bias.copy_((residual.basis.T @ bias).reshape(-1))
        z = lifted(group)
        torch.testing.assert_close(gconv(z) + residual(z), conv(z))


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
@pytest.mark.parametrize("stride", [1, 2])
def test_residual_lifted_filter_equals_the_gathered_copies(float64, group, stride):
    assert_same_as_module_calls(ResidualConvPath(3, 2, 8, group, stride=stride), lifted(group, c=3))


def test_a_layer_whose_residual_is_zero_is_equivariant(float64):
    layer = RelaxedLayer(2, 3, 8, "D4", paths=("gconv", "residual"), zero_init=("residual",))
    assert_equivariant(layer, "D4", lifted("D4"), in_action="lifted", out_action="lifted")
    with torch.no_grad():
        layer.paths["residual"].conv.bias.fill_(0.1)
    assert layer.equivariance_error() > 1e-2


def test_residual_paths_are_refused_where_they_mean_nothing():
    with pytest.raises(ValueError, match="order 2 or more"):
        ResidualConvPath(2, 3, 8, "trivial")
    with pytest.raises(ValueError, match="redundant.*'gconv', 'residual'"):
        RelaxedLayer(2, 3, 8, "C4", paths=("conv", "residual"))
