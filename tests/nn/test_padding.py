"""Circular padding with a folding backward, against torch's ``F.pad``."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import jacrev, jvp, vmap

from ella.nn.padding import circular_pad, fold_circular

PADS = [(1, 1, 1, 1), (2, 1, 0, 3), (0, 0, 2, 2), (3, 3, 3, 3)]


@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (3, 3, 3)])
def test_values_and_gradients_equal_torchs_circular_pad(float64, pad, shape):
    """Same values and the same gradient as ``F.pad(mode="circular")``, including pads as
    large as the axis they wrap (3 on a 3-wide axis)."""
    x = torch.randn(shape, requires_grad=True)
    expected = F.pad(x, pad, mode="circular")
    padded = circular_pad(x, pad)
    torch.testing.assert_close(padded, expected, rtol=0, atol=0)
    g = torch.randn_like(expected)
    (want,) = torch.autograd.grad(expected, x, g)
    (got,) = torch.autograd.grad(padded, x, g)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_fold_is_the_adjoint_of_padding(float64):
    """<pad(x), g> = <x, fold(g)> for every x and g: the fold is the transpose of the
    linear map, checked here without autograd."""
    x, pad = torch.randn(2, 3, 5, 6), (2, 1, 1, 2)
    g = torch.randn(2, 3, 5 + 3, 6 + 3)
    lhs = (F.pad(x, pad, mode="circular") * g).sum()
    rhs = (x * fold_circular(g, pad)).sum()
    torch.testing.assert_close(lhs, rhs, rtol=1e-12, atol=1e-12)


def test_gradcheck_and_double_backward(float64):
    x = torch.randn(1, 2, 4, 3, requires_grad=True)
    pad = (1, 2, 2, 1)
    assert torch.autograd.gradcheck(lambda t: circular_pad(t, pad), (x,))
    assert torch.autograd.gradgradcheck(lambda t: circular_pad(t, pad) ** 2, (x,))


def test_torch_func_transforms_go_through_it(float64):
    """``vmap``, ``jacrev`` and ``jvp`` (the vectorised ensembles and FoRDE use them)
    agree with ``F.pad``'s."""
    pad = (1, 1, 1, 1)
    x = torch.randn(3, 2, 4, 4)

    def ours(t):
        return circular_pad(t, pad).sin().sum()

    def torchs(t):
        return F.pad(t, pad, mode="circular").sin().sum()

    torch.testing.assert_close(vmap(jacrev(ours))(x), vmap(jacrev(torchs))(x))
    tangent = torch.randn_like(x)
    torch.testing.assert_close(
        jvp(lambda t: circular_pad(t, pad), (x,), (tangent,)),
        jvp(lambda t: F.pad(t, pad, mode="circular"), (x,), (tangent,)),
    )


def test_a_malformed_pad_is_refused():
    with pytest.raises(ValueError, match="left, right, top, bottom"):
        circular_pad(torch.zeros(1, 1, 3, 3), (1, 1))
