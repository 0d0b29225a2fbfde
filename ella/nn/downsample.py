"""Per-sample adaptive polyphase downsampling (stride 2) for lifted tensors.

A stride-2 subsampling keeps one of four polyphase components
``z[..., i::2, j::2]``. Choosing always the same one breaks translation
equivariance; the ELLA reference chose the component with the largest value
over the *whole batch*, so one sample's output depended on the other samples.
Here the component is chosen per sample, by the largest absolute value over
all group copies and channels. Because a maximum does not depend on the order
of its arguments, the choice is exactly invariant to permuting the group axis
(the group action on lifted tensors) and follows circular translations of the
input (adaptive polyphase sampling, Chaman & Dokmanic 2021).
"""

from __future__ import annotations

import torch
from torch import nn


def polyphase_downsample(z: torch.Tensor) -> torch.Tensor:
    """Keep, per sample, the polyphase component with the largest absolute value.

    Args:
        z: tensor of shape (B, ..., H, W) with even H and W.

    Returns:
        Tensor of shape (B, ..., H/2, W/2).
    """
    h, w = z.shape[-2:]
    if h % 2 or w % 2:
        raise ValueError(f"stride-2 downsampling needs even height and width, got {h}x{w}")
    components = torch.stack(
        [z[..., i::2, j::2] for i in range(2) for j in range(2)], dim=1
    )  # (B, 4, ..., H/2, W/2)
    b = z.shape[0]
    scores = components.detach().abs().reshape(b, 4, -1).amax(dim=2)  # (B, 4)
    choice = scores.argmax(dim=1)  # (B,)
    return components[torch.arange(b, device=z.device), choice]


class PolyphaseDownsample(nn.Module):
    """Module form of :func:`polyphase_downsample` (parameter free)."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return polyphase_downsample(z)
