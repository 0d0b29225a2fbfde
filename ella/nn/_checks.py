"""Input validation shared by the layers: one place for clear shape errors."""

from __future__ import annotations

import torch


def as_size(size: int | tuple[int, int]) -> tuple[int, int]:
    """Normalise an image size given as ``S`` or ``(H, W)`` to ``(H, W)``."""
    if isinstance(size, int):
        size = (size, size)
    h, w = (int(s) for s in size)
    if h < 1 or w < 1:
        raise ValueError(f"image size must be positive, got {size}")
    return h, w


def check_lifted(
    z: torch.Tensor,
    *,
    order: int,
    channels: int,
    size: tuple[int, int] | None,
    where: str,
) -> None:
    """Check that ``z`` is a lifted tensor (B, order, channels, H, W).

    Args:
        z: the tensor to check.
        order: expected size of the group axis.
        channels: expected number of channels per group copy.
        size: expected (H, W), or None to accept any spatial size.
        where: name of the calling module, used in the message.
    """
    if z.dim() != 5:
        hint = " (did you forget ella.nn.Lift?)" if z.dim() == 4 else ""
        raise ValueError(
            f"{where}: expected a lifted tensor of shape (B, |G|={order}, C={channels}, H, W), "
            f"got shape {tuple(z.shape)}{hint}"
        )
    _, g, c, h, w = z.shape
    if g != order:
        raise ValueError(f"{where}: group axis has size {g}, but the group has order {order}")
    if c != channels:
        raise ValueError(f"{where}: expected {channels} input channels, got {c}")
    if size is not None and (h, w) != tuple(size):
        raise ValueError(
            f"{where}: built for images of size {size[0]}x{size[1]}, got {h}x{w}; "
            "pass the right image_size when building the layer"
        )
