"""Stride-2 downsampling of lifted tensors: adaptive polyphase and 2x2 max.

Both act on the last two axes of (B, ..., H, W) with even H and W and return
(B, ..., H/2, W/2); :func:`downsample` picks one by its
:class:`~ella.choices.Downsampling` name.

Polyphase (the default of the layers):

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
import torch.nn.functional as F
from torch import nn

from ella.choices import Downsampling


def _check_even(z: torch.Tensor) -> None:
    h, w = z.shape[-2:]
    if h % 2 or w % 2:
        raise ValueError(f"stride-2 downsampling needs even height and width, got {h}x{w}")


def polyphase_downsample(z: torch.Tensor) -> torch.Tensor:
    """Keep, per sample, the polyphase component with the largest absolute value.

    Args:
        z: tensor of shape (B, ..., H, W) with even H and W.

    Returns:
        Tensor of shape (B, ..., H/2, W/2).
    """
    _check_even(z)
    components = torch.stack(
        [z[..., i::2, j::2] for i in range(2) for j in range(2)], dim=1
    )  # (B, 4, ..., H/2, W/2)
    b = z.shape[0]
    scores = components.detach().abs().reshape(b, 4, -1).amax(dim=2)  # (B, 4)
    choice = scores.argmax(dim=1)  # (B,)
    return components[torch.arange(b, device=z.device), choice]


def max_downsample(z: torch.Tensor) -> torch.Tensor:
    """The maximum of every 2x2 block of the last two axes.

    Every rotation by 90 degrees and every flip of an even-sized grid maps its
    2x2 blocks onto 2x2 blocks, and permuting the group axis does not touch
    them, so this commutes with the action of C4 and D4 on lifted tensors
    (exactly; tested). A circular shift by one pixel changes the blocks, so
    shift equivariance holds only approximately.

    Args:
        z: tensor of shape (B, ..., H, W) with even H and W.

    Returns:
        Tensor of shape (B, ..., H/2, W/2).
    """
    _check_even(z)
    h, w = z.shape[-2:]
    if z.device.type == "cpu" and not (torch.is_grad_enabled() and z.requires_grad):
        # without a backward, the maximum of the four strided views: the same values (a
        # zero's sign aside), without the indices torch's CPU max pooling computes
        top = torch.maximum(z[..., 0::2, 0::2], z[..., 0::2, 1::2])
        return torch.maximum(top, torch.maximum(z[..., 1::2, 0::2], z[..., 1::2, 1::2]))
    planes = z.reshape(z.shape[0], -1, h, w)  # one example's planes as channels: faster on CPU
    return F.max_pool2d(planes, 2).reshape(*z.shape[:-2], h // 2, w // 2)


def downsample(z: torch.Tensor, how: Downsampling | str) -> torch.Tensor:
    """Halve the last two axes of ``z`` (B, ..., H, W) by ``how`` (``polyphase`` or ``max``)."""
    if Downsampling.parse(how, "downsample") == Downsampling.MAX:
        return max_downsample(z)
    return polyphase_downsample(z)


class PolyphaseDownsample(nn.Module):
    """Module form of :func:`polyphase_downsample` (parameter free)."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, ..., H/2, W/2): per sample, the polyphase component of ``z`` (B, ..., H, W)
        with the largest absolute value."""
        return polyphase_downsample(z)
