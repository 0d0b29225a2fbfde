"""Circular padding with a backward pass that folds the gradient in place.

``F.pad(x, pad, mode="circular")`` is built from slices copied into a new tensor, so
its backward runs a ``SliceBackward`` per copied slice: each allocates a zero tensor of
the padded input's full size and copies one slice of the gradient into it before they
are all added up.

:func:`circular_pad` computes the same values; its backward copies the gradient's
centre once and adds the wrapped borders onto the rows and columns they came from: one
allocation instead of one per slice, in every backward pass of training and of the
evidence fit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["circular_pad", "fold_circular"]


def _fold_columns(rows: torch.Tensor, left: int, right: int, width: int) -> torch.Tensor:
    """``rows`` (..., n, width + left + right) with the wrapped columns added back onto the
    ``width`` columns they copy: (..., n, width)."""
    out = rows[..., left : left + width].clone()
    if right:  # the right border copies the first columns
        out[..., :right] += rows[..., left + width :]
    if left:  # the left border copies the last columns
        out[..., width - left :] += rows[..., :left]
    return out


def fold_circular(grad: torch.Tensor, pad: tuple[int, int, int, int]) -> torch.Tensor:
    """The gradient of circular padding: ``grad`` (..., H + t + b, W + l + r) of the padded
    tensor folded back onto the input (..., H, W), each padded entry added to the entry
    it copies. One copy of the centre rows, then the wrapped strips added onto it.
    Differentiable (a double backward goes through it).

    Args:
        grad: gradient of the padded tensor.
        pad: ``(l, r, t, b)`` as given to ``F.pad``, each at most the input's size.
    """
    left, right, top, bottom = pad
    width = grad.shape[-1] - left - right
    height = grad.shape[-2] - top - bottom
    out = _fold_columns(grad[..., top : top + height, :], left, right, width)
    if bottom:  # the bottom border copies the first rows
        out[..., :bottom, :] += _fold_columns(grad[..., top + height :, :], left, right, width)
    if top:  # the top border copies the last rows
        out[..., height - top :, :] += _fold_columns(grad[..., :top, :], left, right, width)
    return out


class _CircularPad(torch.autograd.Function):
    """``F.pad(x, pad, mode="circular")`` over the last two axes, backward by
    :func:`fold_circular`; in ``torch.func``'s form (``vmap``, ``jacrev`` and ``jvp``
    go through it)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, pad: tuple[int, int, int, int]) -> torch.Tensor:
        return F.pad(x, pad, mode="circular")

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.pad = inputs[1]

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return fold_circular(grad, ctx.pad), None

    @staticmethod
    def jvp(ctx, tangent: torch.Tensor, _pad: None) -> torch.Tensor:
        return F.pad(tangent, ctx.pad, mode="circular")


def circular_pad(x: torch.Tensor, pad: tuple[int, int, int, int]) -> torch.Tensor:
    """``F.pad(x, pad, mode="circular")`` for ``x`` (..., H, W) with at least three axes
    (as ``F.pad`` needs for 2-d circular padding), with a cheaper backward.

    Args:
        x: (N, C, H, W) or (C, H, W).
        pad: ``(left, right, top, bottom)``, each at most the size it wraps.

    Returns:
        (..., H + top + bottom, W + left + right).
    """
    if len(pad) != 4:
        raise ValueError(f"circular_pad takes (left, right, top, bottom), got {pad!r}")
    return _CircularPad.apply(x, tuple(int(p) for p in pad))
