"""The GCONV path: a group convolution, exactly equivariant to the group."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ella.choices import DEFAULT_GROUP, Downsampling, GConvMode
from ella.groups import Group
from ella.nn.options import LayerOptions
from ella.nn.paths.base import (
    Path,
    check_kernel,
    gathered_copies,
    init_conv,
    register_copy_order,
)
from ella.nn.paths.fused import LiftedConvolution, convolve_paths, fusable_paths


class GConvPath(Path):
    """GCONV path: group convolution on the lifted tensor, exactly equivariant.

    ``mode="shared"``: one ``Conv2d(C_in, C_out)`` applied to every group copy
    (the copies are folded into the batch); ``out[h] = W * z[h]``.

    ``mode="full"``: the regular-representation group convolution
    ``out[h] = sum_k W_k * z[k h]``: for each output copy ``h`` the input
    copies are gathered in the order ``k h`` (a parameter-free permutation
    from the Cayley table), stacked as channels, and one
    ``Conv2d(G*C_in, C_out)`` is applied with the copies folded into the batch.
    Acting with ``g`` maps ``z[k h]`` to ``z[k h g]``, so ``out`` is permuted
    exactly like its input.

    Outside :func:`per_module_calls` the full mode runs as one ``Conv2d`` over the
    lifted channels with the *expanded* filter ``W'[h, j] = W_k`` for ``j = k h``
    (:meth:`lifted_filter`): the same function without gathering ``G`` copies of
    the input, and the form in which a layer adds it to its CONV path
    (:func:`convolve_paths`).

    Parameters: ``C_in C_out k^2 + C_out`` (shared) or ``G C_in C_out k^2 +
    C_out`` (full).
    """

    kind = "gconv"
    color = "#1b9e77"

    @classmethod
    def for_layer(cls, options: LayerOptions, **common: Any) -> GConvPath:
        """A layer's GCONV path: its kernel size, mode and downsampling."""
        return cls(
            **common,
            kernel_size=options.kernel_size,
            mode=options.gconv_mode,
            downsample=options.downsample,
        )

    def rate_copies(self) -> int:
        """``|G|``: each filter serves every group copy of the output."""
        return self.group.order

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        image_size: int | tuple[int, int],
        group: str | Group = DEFAULT_GROUP,
        kernel_size: int = 3,
        stride: int = 1,
        mode: GConvMode | str = GConvMode.FULL,
        downsample: Downsampling | str = Downsampling.POLYPHASE,
    ):
        super().__init__(in_channels, out_channels, image_size, group, stride, downsample)
        self.mode = GConvMode.parse(mode, "GConvPath mode")
        k = check_kernel(kernel_size)
        fan_copies = self.group.order if self.mode == GConvMode.FULL else 1
        self.conv = init_conv(
            nn.Conv2d(
                fan_copies * in_channels, out_channels, k, padding=k // 2, padding_mode="circular"
            )
        )
        register_copy_order(self, self.group)
        #: the convolution this path runs as on its own (:func:`convolve_paths`)
        self.convolution = LiftedConvolution()

    def output_parameters(self) -> list[nn.Parameter]:
        """The group convolution's ``Conv2d`` weight and bias (the path's only stage)."""
        return [self.conv.weight, self.conv.bias]

    def fuses(self) -> bool:
        """Its convolution runs with the layer's others (:meth:`Path.fuses`): in full mode."""
        return self.mode == GConvMode.FULL

    def lifted_filter(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The full mode's expanded filter: weight (G C_out, G C_in, k, k), with block
        ``[h, j]`` the filter block ``k`` for which ``j = k h``, and bias (G C_out)."""
        if self.mode != GConvMode.FULL:
            raise ValueError("only a full GConvPath has a lifted filter; this one is shared")
        w = self.conv.weight  # (C_out, G C_in, k_h, k_w), blocks indexed by k
        g, c_out = self.group.order, self.out_channels
        blocks = w.reshape(c_out, g, -1, *w.shape[-2:]).index_select(1, self.expand.flatten())
        blocks = blocks.reshape(c_out, g, g, -1, *w.shape[-2:]).transpose(0, 1)
        return blocks.reshape(g * c_out, -1, *w.shape[-2:]), self.conv.bias.repeat(g)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, G, C_out, H / stride, W / stride) outputs of (B, G, C_in, H, W) inputs: the
        group convolution, shared or full (:meth:`lifted_filter`)."""
        self.check_input(z)
        b, g, c, h, w = z.shape
        if fusable_paths([self]):  # full mode, outside per_module_calls
            return convolve_paths(z, [self], self.convolution)
        full = self.mode == GConvMode.FULL
        z = gathered_copies(z, self.gather) if full else z.reshape(b * g, c, h, w)
        out = self.conv(z).reshape(b, g, self.out_channels, h, w)
        return self._downsample(out)

    def extra_repr(self) -> str:
        """:meth:`Path.extra_repr` with the mode."""
        return f"{super().extra_repr()}, mode={self.mode.value}"
