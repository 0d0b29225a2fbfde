"""BackPACK as an independent reference for the native Kronecker factors.

BackPACK computes curvature by its own backward extensions, sharing no code with
ella's native backend (nor with ASDL or Curvlinops, the references of
``test_native.py``). On a network of ``nn.Linear`` layers three identities hold
exactly, and each is checked here against a different BackPACK extension:

* one example: the input ``a`` of a Linear layer is a single row, so its Kronecker
  block ``B ⊗ A`` with ``A = a a^T`` and ``B = sum_v b_v b_v^T`` (the GGN's square
  root columns ``v`` pulled back to the layer's output) *is* the exact GGN block of
  the weight, flattened row-major as ``weight.flatten()`` (output index first), and
  the bias block ``B`` is the bias's. So the native blocks equal the blocks that
  BackPACK's ``SqrtGGNExact`` columns square to, off-diagonal entries included, and
  their diagonals ``diag(B) ⊗ diag(A)`` equal ``DiagGGNExact``.
* a batch: the exact GGN is a sum over examples, so the diagonals of the native
  blocks of the examples taken one at a time sum to BackPACK's ``DiagGGNExact`` of
  the whole batch.
* a batch, Kronecker factors: the native layout ``[sum b b^T, sum a a^T / N]`` (with
  ``N`` the batch size) is BackPACK's ``KFLR`` (Botev et al., 2017: exact-GGN KFAC)
  for a summed loss, ``[G, x^T x / N]``, and the bias factor is ``G``.

The losses are BackPACK's with ``reduction="sum"``, the native backend's (laplace-torch's)
convention; for regression laplace-torch's GGN is the one of ``1/2 ||f - y||^2``
(``factor = 0.5``), half of BackPACK's ``MSELoss(reduction="sum")``. The native backend
uses ``K - 1`` columns for ``K`` classes, BackPACK ``K``; the sums are the same. BackPACK's
convolution KFLR sums the output gradient over positions before the outer product, a
different approximation from the native KFAC-expand factors, so convolutions are not
compared here (``test_native.py`` compares them with ASDL and Curvlinops).
"""

from __future__ import annotations

import copy

import pytest
import torch
from backpack import backpack, extend
from backpack.extensions import KFLR, DiagGGNExact, SqrtGGNExact
from torch import nn

from ella.marglik import native
from ella.marglik.native import NativeGGN

#: BackPACK's extended first layer gets an input that needs no gradient (harmless)
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

CLASSES = 4


def mlp(bias_last: bool = True) -> nn.Module:
    """Three Linear layers of different shapes (d_in != d_out, so a factor order swapped
    or a transposed flattening cannot pass by symmetry)."""
    return nn.Sequential(
        nn.Linear(5, 7),
        nn.Tanh(),
        nn.Linear(7, 3, bias=False),
        nn.Sigmoid(),
        nn.Linear(3, CLASSES, bias=bias_last),
    )


def data(n: int, outputs: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 5, generator=g)
    if outputs is None:
        return x, torch.randint(CLASSES, (n,), generator=g)
    return x, torch.randn(n, outputs, generator=g)


def native_blocks(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, likelihood: str = "classification"
) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
    """The native backend's loss and Kronecker factors of one batch (``N`` its size)."""
    loss, kron = NativeGGN(model, likelihood).kron(x, y, N=len(x))
    return loss, kron.kfacs


def block_matrix(factors: list[torch.Tensor]) -> torch.Tensor:
    """A parameter's dense block: ``B ⊗ A`` for a weight ``[B, A]``, ``B`` for a bias."""
    return torch.kron(factors[0], factors[1]) if len(factors) == 2 else factors[0]


def block_diagonal(factors: list[torch.Tensor]) -> torch.Tensor:
    """The diagonal of :func:`block_matrix` without forming it: ``diag(B) ⊗ diag(A)``."""
    out = factors[0].diagonal()
    return torch.outer(out, factors[1].diagonal()).flatten() if len(factors) == 2 else out


def summed_diagonals(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, likelihood: str = "classification"
) -> list[torch.Tensor]:
    """Per parameter, the diagonals of the native blocks of the examples taken one at a
    time (each a batch of one, ``N = 1``), summed."""
    per_example = [
        [block_diagonal(f) for f in native_blocks(model, x[n : n + 1], y[n : n + 1], likelihood)[1]]
        for n in range(len(x))
    ]
    return [torch.stack(d).sum(0) for d in zip(*per_example, strict=True)]


def backpack_quantities(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *extensions, likelihood="classification"
) -> tuple[torch.Tensor, list[nn.Parameter]]:
    """BackPACK's loss (``reduction="sum"``) and the parameters of an extended copy of
    ``model`` carrying the extensions' results."""
    model = extend(copy.deepcopy(model))
    if likelihood == "classification":
        lossfunc = extend(nn.CrossEntropyLoss(reduction="sum"))
    else:
        lossfunc = extend(nn.MSELoss(reduction="sum"))
    loss = lossfunc(model(x), y)
    with backpack(*extensions):
        loss.backward()
    return loss.detach(), list(model.parameters())


def exact_ggn_block(p: nn.Parameter) -> torch.Tensor:
    """A parameter's exact GGN block from BackPACK's square root (classes, N, *shape)."""
    root = p.sqrt_ggn_exact.flatten(start_dim=2)  # (C, N, numel)
    return torch.einsum("cni,cnj->ij", root, root)


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("index", [0, 3, 5])
def test_one_example_blocks_are_backpacks_exact_ggn_blocks(float64, index):
    model = mlp()
    x, y = data(6)
    x, y = x[index : index + 1], y[index : index + 1]
    loss, blocks = native_blocks(model, x, y)
    ref_loss, params = backpack_quantities(model, x, y, SqrtGGNExact(), DiagGGNExact())
    assert_close(loss, ref_loss)
    assert len(blocks) == len(params) == 5  # three weights, two biases
    for factors, p in zip(blocks, params, strict=True):
        assert len(factors) == (2 if p.ndim == 2 else 1)
        assert_close(block_matrix(factors), exact_ggn_block(p))
        assert_close(block_diagonal(factors), p.diag_ggn_exact.flatten())


def test_per_example_diagonals_sum_to_backpacks_batch_diag_ggn(float64):
    model = mlp(bias_last=False)
    x, y = data(9)
    _, params = backpack_quantities(model, x, y, DiagGGNExact())
    summed = summed_diagonals(model, x, y)
    assert len(summed) == len(params)
    for total, p in zip(summed, params, strict=True):
        assert_close(total, p.diag_ggn_exact.flatten())


def test_batch_factors_are_backpacks_kflr(float64):
    model = mlp()
    x, y = data(11)
    loss, blocks = native_blocks(model, x, y)
    ref_loss, params = backpack_quantities(model, x, y, KFLR())
    assert_close(loss, ref_loss)
    for factors, p in zip(blocks, params, strict=True):
        assert len(factors) == len(p.kflr)
        for ours, theirs in zip(factors, p.kflr, strict=True):
            assert_close(ours, theirs)


def test_regression_blocks_are_half_of_backpacks_summed_squared_error(float64):
    """laplace-torch's Gaussian GGN is of ``1/2 ||f - y||^2``: BackPACK's of the summed
    squared error is twice it, block for block (one example: the exact GGN)."""
    model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    x, y = data(4, outputs=3)
    _, blocks = native_blocks(model, x[:1], y[:1], "regression")
    _, params = backpack_quantities(model, x[:1], y[:1], SqrtGGNExact(), likelihood="regression")
    for factors, p in zip(blocks, params, strict=True):
        assert_close(block_matrix(factors), 0.5 * exact_ggn_block(p))
    _, params = backpack_quantities(model, x, y, DiagGGNExact(), likelihood="regression")
    for total, p in zip(summed_diagonals(model, x, y, "regression"), params, strict=True):
        assert_close(total, 0.5 * p.diag_ggn_exact.flatten())


def _mismatch(blocks: list[list[torch.Tensor]], params: list[nn.Parameter], diagonal) -> float:
    """The largest relative difference of the blocks' diagonals from BackPACK's."""
    worst = 0.0
    for factors, p in zip(blocks, params, strict=True):
        ours, theirs = diagonal(factors), p.diag_ggn_exact.flatten()
        if ours.shape != theirs.shape:
            return float("inf")
        worst = max(worst, float((ours - theirs).abs().max() / theirs.abs().max()))
    return worst


def test_the_reference_catches_a_wrong_scale_a_missing_column_or_a_swapped_order(
    float64, monkeypatch
):
    """The comparison above can fail: a B factor scaled by 2, the softmax Hessian's root
    short of a column, or the factors' Kronecker product in the other order each give
    diagonals far from BackPACK's."""
    model = mlp()
    x, y = data(1)
    _, params = backpack_quantities(model, x, y, DiagGGNExact())
    _, blocks = native_blocks(model, x, y)
    assert _mismatch(blocks, params, block_diagonal) < 1e-12

    def swapped(factors):
        return block_diagonal(factors[::-1])

    assert _mismatch(blocks, params, swapped) > 0.1

    real_root = native.softmax_hessian_root
    for wrong_root in (
        lambda p: 2**0.5 * real_root(p),  # every B factor doubled
        lambda p: real_root(p)[:-1],  # K - 2 columns
    ):
        monkeypatch.setattr(native, "softmax_hessian_root", wrong_root)
        _, blocks = native_blocks(model, x, y)
        assert _mismatch(blocks, params, block_diagonal) > 0.1
