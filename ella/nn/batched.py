"""``K`` independent linear maps applied channel by channel, as one module."""

from __future__ import annotations

import math

import torch
from torch import nn


class BatchedLinear(nn.Module):
    """``K`` linear maps, map ``k`` applied to channel ``k``: (K, B, in) -> (K, B, out).

    ``out[k] = x[k] W[k]^T + b[k]``: one batched matrix product (``bmm``) whatever ``K``,
    with one weight tensor (K, out, in) and one bias tensor (K, out) instead of ``K``
    ``nn.Linear`` modules, so that the optimiser, the prior and ``zero_grad`` walk two
    tensors. :class:`~ella.nn.FCPath` holds its two stages as two of these.

    Args:
        channels: ``K``.
        in_features: inputs per channel.
        out_features: outputs per channel.
        bias: whether each map has a bias.
    """

    def __init__(self, channels: int, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.channels, self.in_features, self.out_features = channels, in_features, out_features
        self.weight = nn.Parameter(torch.empty(channels, out_features, in_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(channels, out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Each map drawn as ``nn.Linear`` draws its own, map after map (the same random
        numbers as ``K`` ``nn.Linear`` modules made in a row)."""
        for k in range(self.channels):
            nn.init.kaiming_uniform_(self.weight[k], a=math.sqrt(5))
            if self.bias is not None:
                bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
                nn.init.uniform_(self.bias[k], -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(K, B, in) -> (K, B, out)."""
        if self.bias is None:
            return torch.bmm(x, self.weight.transpose(1, 2))
        return torch.baddbmm(self.bias[:, None], x, self.weight.transpose(1, 2))

    def extra_repr(self) -> str:
        """The sizes and options ``print(module)`` shows."""
        return (
            f"channels={self.channels}, in_features={self.in_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
