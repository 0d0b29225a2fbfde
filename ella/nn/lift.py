"""Lifting images to the group and pooling over the group axis."""

from __future__ import annotations

import torch
from torch import nn

from ella.choices import DEFAULT_GROUP, GroupPooling
from ella.groups import Group, layer_group


class Lift(nn.Module):
    """Lift images (B, C, H, W) to (B, |G|, C, H, W) by acting with every element.

    ``Lift(G)(x)[:, h] = h . x``. Acting with ``g`` on the input permutes the
    group axis of the output (see :mod:`ella.groups`), which is what every
    GCONV path is equivariant to.

    Args:
        group: a :class:`~ella.groups.Group` or its name.
        in_channels: if given, the number of channels the input must have.
    """

    def __init__(self, group: str | Group = DEFAULT_GROUP, in_channels: int | None = None):
        super().__init__()
        self.group = layer_group(group)
        self.in_channels = in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, |G|, C, H, W) lifted tensor of (B, C, H, W) images: copy ``h`` is ``h . x``."""
        self.group.check_image(x)
        if self.in_channels is not None and x.shape[1] != self.in_channels:
            raise ValueError(f"Lift: expected {self.in_channels} input channels, got {x.shape[1]}")
        return torch.stack([self.group.act_on_image(g, x) for g in self.group.elements], dim=1)

    def extra_repr(self) -> str:
        """The group ``print(module)`` shows."""
        return f"group={self.group.name}"


class GroupPool(nn.Module):
    """Pool over the group axis: (B, |G|, C, H, W) -> (B, C, H, W), or keep it.

    With ``mode`` ``"max"`` or ``"mean"`` the result is invariant to the group
    acting on the lifted input, because that action only permutes the group axis.
    With ``"none"`` the copies are kept as channels, (B, |G| C, H, W) with copy
    ``h``'s channels at ``h C ... h C + C - 1``: the group then permutes these
    blocks of channels (equivariant, not invariant).

    Args:
        group: a :class:`~ella.groups.Group` or its name.
        mode: a :class:`~ella.choices.GroupPooling` (``"max"``, ``"mean"``, ``"none"``).
    """

    def __init__(
        self, group: str | Group = DEFAULT_GROUP, mode: GroupPooling | str = GroupPooling.MAX
    ):
        super().__init__()
        self.mode = GroupPooling.parse(mode, "GroupPool mode")
        self.group = layer_group(group)

    @property
    def copies_kept(self) -> int:
        """How many group copies each channel leaves as features: ``|G|`` with
        ``"none"``, else 1."""
        return self.group.order if self.mode == GroupPooling.NONE else 1

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) of a lifted (B, |G|, C, H, W): the maximum or mean over the group
        axis, or (B, |G| C, H, W), the copies as channels, with ``"none"``."""
        if z.dim() != 5 or z.shape[1] != self.group.order:
            raise ValueError(
                f"GroupPool: expected a lifted tensor (B, {self.group.order}, C, H, W), "
                f"got shape {tuple(z.shape)}"
            )
        if self.mode == GroupPooling.NONE:
            return z.flatten(1, 2)
        return z.amax(dim=1) if self.mode == GroupPooling.MAX else z.mean(dim=1)

    def extra_repr(self) -> str:
        """The group and pooling mode ``print(module)`` shows."""
        return f"group={self.group.name}, mode={self.mode.value}"
