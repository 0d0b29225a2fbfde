"""The CONV path: a convolution over space that mixes the group copies, equivariant to
(circular) translations only."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ella.choices import DEFAULT_GROUP, Downsampling
from ella.groups import Group
from ella.nn.options import LayerOptions
from ella.nn.paths.base import (
    Path,
    check_kernel,
    init_conv,
)


class ConvPath(Path):
    """CONV path: one ``Conv2d`` over all group copies as channels (circular padding).

    Shapes: (B, G, C_in, H, W) -> reshape (B, G*C_in, H, W) -> ``Conv2d(G*C_in,
    G*C_out)`` -> (B, G, C_out, H, W). Translation equivariant, not group
    equivariant: the copies are mixed with unrelated weights.

    Parameters: ``(G C_in) (G C_out) k^2 + G C_out``.
    """

    kind = "conv"
    color = "#7570b3"

    @classmethod
    def for_layer(cls, options: LayerOptions, **common: Any) -> ConvPath:
        """A layer's CONV path: its kernel size and downsampling."""
        return cls(**common, kernel_size=options.kernel_size, downsample=options.downsample)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        image_size: int | tuple[int, int],
        group: str | Group = DEFAULT_GROUP,
        kernel_size: int = 3,
        stride: int = 1,
        downsample: Downsampling | str = Downsampling.POLYPHASE,
    ):
        super().__init__(in_channels, out_channels, image_size, group, stride, downsample)
        k = check_kernel(kernel_size)
        g = self.group.order
        self.conv = init_conv(
            nn.Conv2d(g * in_channels, g * out_channels, k, padding=k // 2, padding_mode="circular")
        )

    def output_parameters(self) -> list[nn.Parameter]:
        """The ``Conv2d``'s weight and bias (the path's only stage)."""
        return [self.conv.weight, self.conv.bias]

    def fuses(self) -> bool:
        """Its convolution runs with the layer's others (:meth:`Path.fuses`)."""
        return True

    def lifted_filter(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight (G C_out, G C_in, k, k) and bias (G C_out) over the lifted channels."""
        return self.conv.weight, self.conv.bias

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, G, C_out, H / stride, W / stride) outputs of (B, G, C_in, H, W) inputs: one
        ``Conv2d`` over the group copies as channels."""
        self.check_input(z)
        b, g, c, h, w = z.shape
        out = self.conv(z.reshape(b, g * c, h, w)).reshape(b, g, self.out_channels, h, w)
        return self._downsample(out)
