"""The products Kronecker factors are summed from: Gram matrices (whole, or their upper
block triangle for large ones), outer sums of output gradients, and a convolution's
patches with their circular Gram (:mod:`ella.marglik.kfac_blocks` sums them per block)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "UPPER_GRAM_MIN_SIZE",
    "channel_outer_sum",
    "circular_patch_gram",
    "conv_patches",
    "gram",
    "input_factor",
    "is_circular_same",
    "mirror_upper",
    "outer_sum",
    "upper_gram",
]


def gram(rows: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_n conj(r_n) r_n^T`` for each of ``K`` stacks of rows: (K, N, d) -> (K, d, d),
    added in place into ``into`` (K, d, d) when it is given (and returned).

    One ``bmm`` over a contiguous copy of the rows. ``einsum`` on the same operands
    (e.g. ``"mkx,mky->kxy"`` on activations laid out (N, K, d)) hands ``bmm`` strided
    batches that it copies matrix by matrix, which is slower on the default mixer's FC
    factors and more so on the complex cross-spectra of :func:`circular_patch_gram`.
    Adding into a running sum with ``baddbmm_`` saves writing each product and reading
    it back for the sum.
    """
    rows = rows.contiguous()
    if into is None:
        return torch.bmm(rows.conj().transpose(1, 2), rows)
    return into.baddbmm_(rows.conj().transpose(1, 2), rows)


#: from this size on, the FC paths' pixel factors are summed as their upper block triangle
#: (:func:`upper_gram`) and completed once per batch (:func:`mirror_upper`)
UPPER_GRAM_MIN_SIZE = 512


def _upper_blocks(d: int, depth: int = 2) -> tuple[list[slice], list[tuple[slice, slice]]]:
    """A ``d x d`` matrix halved ``depth`` times: the diagonal blocks' ranges, and the
    (rows, columns) ranges of the off-diagonal blocks above the diagonal."""
    diagonal, upper = [slice(0, d)], []
    for _ in range(depth):
        halves = []
        for block in diagonal:
            mid = (block.start + block.stop) // 2
            top, bottom = slice(block.start, mid), slice(mid, block.stop)
            upper.append((top, bottom))
            halves += [top, bottom]
        diagonal = halves
    return diagonal, upper


def upper_gram(rows: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`gram` of real rows (K, N, d), from ``d >= UPPER_GRAM_MIN_SIZE`` on only its
    blocks on and above the diagonal: 10 of 16 blocks of a quarter of ``d`` each, the
    blocks below left as they are (zero where ``into`` is not given) until
    :func:`mirror_upper` completes the sum. The products' FLOPs fall to 5/8.
    """
    d = rows.shape[-1]
    if d < UPPER_GRAM_MIN_SIZE:
        return gram(rows, into)
    rows = rows.contiguous()
    if into is None:
        into = rows.new_zeros(rows.shape[0], d, d)
    diagonal, upper = _upper_blocks(d)
    for r, c in [(b, b) for b in diagonal] + upper:
        into[:, r, c].baddbmm_(rows[..., r].transpose(1, 2), rows[..., c])
    return into


def mirror_upper(total: torch.Tensor) -> torch.Tensor:
    """A sum of :func:`upper_gram` products (K, d, d) made whole, in place: each block
    below the diagonal becomes the transpose of its mirror image above it."""
    d = total.shape[-1]
    if d >= UPPER_GRAM_MIN_SIZE:
        for r, c in _upper_blocks(d)[1]:
            total[:, c, r] = total[:, r, c].transpose(1, 2)
    return total


def outer_sum(rows: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``rows @ rows.T`` for rows (d, n): (d, d), added in place into ``into`` if given."""
    if into is None:
        return rows @ rows.T
    return into.addmm_(rows, rows.T)


def channel_outer_sum(grad: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``sum g g^T`` over examples and positions of a conv output gradient: (M, C, *) ->
    (C, C), added in place into ``into`` if given.

    One small product per example, summed, reads the gradient where it lies; gathering
    it channel-major first, ``(C, M H W)``, for one product would copy it.
    """
    per_example = grad.reshape(grad.shape[0], grad.shape[1], -1)  # (M, C, P)
    total = torch.bmm(per_example, per_example.transpose(1, 2)).sum(0)
    return total if into is None else into.add_(total)


def conv_patches(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """The patches ``conv`` multiplies, (M, L, C k_h k_w), padded by its own padding mode."""
    if conv.padding_mode != "zeros":
        x = F.pad(x, conv._reversed_padding_repeated_twice, mode=conv.padding_mode)
        padding = 0
    else:
        padding = conv.padding
    return F.unfold(x, conv.kernel_size, conv.dilation, padding, conv.stride).transpose(1, 2)


def is_circular_same(conv: nn.Conv2d) -> bool:
    """A stride-1, undilated conv with circular "same" padding (every ella path's conv)."""
    kh, kw = conv.kernel_size
    return (
        conv.padding_mode == "circular"
        and tuple(conv.stride) == (1, 1)
        and tuple(conv.dilation) == (1, 1)
        and tuple(conv.padding) == (kh // 2, kw // 2)
        and kh % 2 == 1
        and kw % 2 == 1
    )


def circular_patch_gram(x: torch.Tensor, kernel_size: tuple[int, int]) -> torch.Tensor:
    """``sum_{m,p} a_{m,p} a_{m,p}^T`` over the circular "same" patches ``a`` of ``x``
    without unfolding them: ``(C k_h k_w, C k_h k_w)``, in ``F.unfold``'s (c, i, j) order.

    With circular padding and stride 1 the patches cover every position, so the
    entry for kernel offsets ``(i, j)`` and ``(i', j')`` depends only on their
    difference: ``A[(c,i,j),(c',i',j')] = R_{cc'}((i'-i) mod H, (j'-j) mod W)`` with
    the circular cross-correlation ``R_{cc'}(d) = sum_{m,q} x[m,c,q] x[m,c',q+d]``.
    By the cross-correlation theorem ``R_{cc'} = IDFT(sum_m conj(X_{mc}) X_{mc'})``
    with ``X = DFT_2(x)``: one batched ``C x M`` by ``M x C`` complex product per
    frequency, about ``2 C^2 M H W`` multiply-adds against ``(9 C)^2 M H W`` for the
    gram of the unfolded 3x3 patches, and no unfolded copy of the input.

    Args:
        x: input (M, C, H, W) of the convolution (before padding).
        kernel_size: ``(k_h, k_w)``, both odd.
    """
    m, c, h, w = x.shape
    kh, kw = kernel_size
    spectrum = torch.fft.rfft2(x).flatten(2).permute(2, 0, 1)  # (F, M, C), F = H (W // 2 + 1)
    cross = gram(spectrum).permute(1, 2, 0)  # (C, C', F): sum_m conj(X_mc) X_mc'
    r = torch.fft.irfft2(cross.reshape(c, c, h, -1), s=(h, w))  # (C, C', H, W): R_{cc'}(d)
    i, j = torch.arange(kh, device=x.device), torch.arange(kw, device=x.device)
    di = ((i[None, :] - i[:, None]) % h)[:, None, :, None]  # [i, ., i', .] -> i' - i
    dj = ((j[None, :] - j[:, None]) % w)[None, :, None, :]  # [., j, ., j'] -> j' - j
    entries = r[:, :, di, dj]  # (C, C', k_h, k_w, k_h', k_w') as [c, c', i, j, i', j']
    return entries.permute(0, 2, 3, 1, 4, 5).reshape(c * kh * kw, c * kh * kw)


def input_factor(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``sum a a^T`` over the rows ``a`` that ``module``'s weight multiplies in
    ``module(x)``, and the number ``L`` of rows per example.

    The rows are a Linear's inputs (``L = 1``; extra leading axes count as examples),
    or a conv's patches at its ``L`` output positions, with the module's own padding
    mode (circular padding wraps; the stock backends unfold with zero padding
    whatever the mode).
    """
    if isinstance(module, nn.Conv2d):
        if is_circular_same(module):
            return circular_patch_gram(x, module.kernel_size), x.shape[-2] * x.shape[-1]
        patches = conv_patches(module, x)  # (M, L, d_in)
        rows = patches.reshape(-1, patches.shape[-1])
        return rows.T @ rows, patches.shape[1]
    rows = x.reshape(-1, x.shape[-1])
    return rows.T @ rows, 1
