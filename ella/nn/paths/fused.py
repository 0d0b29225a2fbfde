"""The CONV, GCONV and residual paths of a layer run as one convolution."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ella.choices import Downsampling
from ella.nn.downsample import max_downsample
from ella.nn.padding import circular_pad
from ella.nn.paths.base import Path

#: a path whose convolution :func:`convolve_paths` can run with others' (:meth:`Path.fuses`)
FusedPath = Path


def fusable_paths(paths: Iterable[Path]) -> list[FusedPath]:
    """The CONV, full GCONV and residual paths among ``paths`` that :func:`convolve_paths` can run
    as one convolution: all of them, unless their convolutions differ in kernel, padding,
    dilation or bias or are no ``Conv2d`` (only if changed by hand), or inside
    :func:`per_module_calls`."""
    paths = list(paths)
    if any(p.module_calls for p in paths):
        return []
    chosen = [p for p in paths if p.fuses()]
    if not all(isinstance(p.conv, nn.Conv2d) for p in chosen):  # a path rebuilt by hand
        return []
    shapes = {
        (p.conv.kernel_size, p.conv.padding, p.conv.padding_mode, p.conv.dilation, p.conv.stride)
        for p in chosen
    }
    if len(shapes) > 1 or any(p.conv.bias is None or p.conv.groups != 1 for p in chosen):
        return []
    return chosen


def adds_filters(paths: list[FusedPath]) -> bool:
    """Whether :func:`convolve_paths` adds the paths' filters (stride 1, or one path) and
    returns their summed output, rather than stacking them (stride 2)."""
    return len(paths) == 1 or paths[0].stride == 1


class LiftedConvolution(nn.Module):
    """One convolution over the lifted channels, a module without parameters: the one that
    :func:`convolve_paths` runs for a layer's fused paths, so that a forward hook reads its
    input ``z`` and output (the native Kronecker factors,
    :class:`ella.marglik.native.NativeGGN`, do).

    ``forward(z, weight, bias, like)``: lifted ``z`` (B, G, C_in, H, W) padded as ``like``
    (an ``nn.Conv2d`` whose padding, padding mode and dilation it takes), convolved with
    ``weight`` (C_out', G C_in, k, k) and ``bias`` (C_out',): (B, C_out', H, W).
    """

    def forward(
        self, z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, like: nn.Conv2d
    ) -> torch.Tensor:
        """(B, C_out', H, W): lifted ``z`` (B, G, C_in, H, W), padded as ``like``, convolved
        with ``weight`` (C_out', G C_in, k, k) and ``bias`` (C_out',)."""
        b, g, c, h, w = z.shape
        x = z.reshape(b, g * c, h, w)
        padding = like.padding
        if like.padding_mode == "circular":  # the same values, a cheaper backward
            x = circular_pad(x, like._reversed_padding_repeated_twice)
            padding = 0
        elif like.padding_mode != "zeros":
            x = F.pad(x, like._reversed_padding_repeated_twice, mode=like.padding_mode)
            padding = 0
        return F.conv2d(x, weight, bias, padding=padding, dilation=like.dilation)


def convolve_paths(
    z: torch.Tensor, paths: list[FusedPath], convolution: LiftedConvolution
) -> torch.Tensor:
    """The sum of the outputs of CONV, full GCONV and residual paths on the same input, from
    one convolution over the lifted channels.

    Every such path is a ``Conv2d`` from the ``G C_in`` lifted input channels to ``G
    C_out`` channels (:meth:`ConvPath.lifted_filter`, :meth:`GConvPath.lifted_filter`,
    :meth:`ResidualConvPath.lifted_filter`).
    With stride 1 their filters are added (a convolution is linear in its filter, so
    ``conv(z, W_1) + conv(z, W_2) = conv(z, W_1 + W_2)``: half the work of two
    convolutions); with stride 2 they are stacked along the output channels and each
    path's part is downsampled on its own, as :meth:`Path.forward` does (a 2x2 maximum,
    which acts plane by plane, over all parts in one call). The input is padded once for
    all paths.

    Args:
        z: lifted input (B, G, C_in, H, W).
        paths: from :func:`fusable_paths` (same conv settings, same stride).
        convolution: the owner's :class:`LiftedConvolution`, which runs it; its output is
            (B, G C_out, H, W) for stride 1 or one path, else (B, P G C_out, H, W).

    Returns:
        (B, G, C_out, H / stride, W / stride).
    """
    b, g, c, h, w = z.shape
    filters = [p.lifted_filter() for p in paths]
    if adds_filters(paths):
        weight, bias = filters[0]
        for w_p, b_p in filters[1:]:
            weight, bias = weight + w_p, bias + b_p
    else:
        weight = torch.cat([w_p for w_p, _ in filters])
        bias = torch.cat([b_p for _, b_p in filters])
    out = convolution(z, weight, bias, paths[0].conv)
    if adds_filters(paths):
        return paths[0]._downsample(out.reshape(b, g, paths[0].out_channels, h, w))
    pooled = all(p.downsample == Downsampling.MAX for p in paths)
    if pooled:  # a 2x2 maximum acts plane by plane: all paths' planes in one call
        out = max_downsample(out)
        h, w = h // 2, w // 2
    parts = [
        part.reshape(b, g, path.out_channels, h, w)
        for path, part in zip(paths, out.chunk(len(paths), dim=1), strict=True)
    ]
    if not pooled:
        parts = [path._downsample(part) for path, part in zip(paths, parts, strict=True)]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total
