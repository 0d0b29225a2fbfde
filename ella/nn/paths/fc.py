"""The FC path: fully connected between whole feature maps, no symmetry (stage 1 per
input channel, stage 2 per output channel)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ella.choices import DEFAULT_GROUP, FCMode
from ella.groups import Group
from ella.nn.batched import BatchedLinear
from ella.nn.options import LayerOptions
from ella.nn.paths.base import (
    Path,
    contiguous_grad,
)


class FCPath(Path):
    """FC path: a fully connected map between whole feature maps.

    The group copies count as channels: ``C_i = G C_in`` and ``C_o = G C_out``;
    ``S_in = H W`` and ``S_out = H' W'`` are the pixel counts.

    ``mode="factorized"`` (default) implements the weight
    ``W[o, i, y, x] = sum_r V[y, (o, i, r)] U[(o, r), (i, x)]`` in two stages; with
    ``rank=1`` (default) it is ``V[y, (o, i)] U[o, (i, x)]``, the ELLA paper's:

    1. ``pixel_maps``, one linear map ``S_in -> C_o R`` per input channel ``i``
       (output ``o R + r``): ``t[:, o, i, r] = sum_x U[i, o R + r, x] z[i, x]``;
    2. ``channel_maps``, one linear map ``C_i R -> S_out`` per output channel ``o``
       (input ``i R + r``, a bias per output pixel):
       ``out[o, y] = sum_(i, r) V[o, y, i R + r] t[o, i, r] + b[o, y]``.

    Each stage is a :class:`~ella.nn.batched.BatchedLinear`: ``pixel_maps.weight`` is
    ``U`` (C_i, C_o R, S_in), ``channel_maps.weight`` is ``V`` (C_o, S_out, C_i R) and
    ``channel_maps.bias`` (C_o, S_out); each stage runs as one ``bmm``.

    That is ``R C_i C_o (S_in + S_out) + C_o S_out`` parameters instead of
    ``C_i C_o S_in S_out``. Each output channel is a combination of ``R C_i``
    fixed images, one per projection ``t[o, i, r]`` of the input: with one input
    channel (the trivial group's first layer) and ``R = 1`` the whole image
    reaches output channel ``o`` as one number; ``rank`` widens that bottleneck.

    Separate maps per channel (rather than one linear map on block-diagonal inputs, as the
    reference code does) give KFAC blocks of size ``S_in^2`` and ``(C_o R)^2`` per input
    channel and ``(C_i R)^2`` and ``S_out^2`` per output channel, instead of one dense
    ``(C_i S_in)^2`` input factor, and never materialise the block-diagonal input of
    ``B C_i^2 S_in`` numbers (``python -m benchmarks.layers`` measures both layouts). The
    evidence sees every channel's map as a tensor of its own
    (:class:`ella.marglik.per_channel.PerChannelFCPath`).

    ``mode="dense"``: one ``nn.Linear(C_i S_in, C_o S_out)``; only for small sizes.

    A state dict in the layout of one ``nn.Linear`` per channel
    (``pixel_maps.<i>.weight``, ``channel_maps.<o>.weight`` and ``.bias``, ella 0.2 and
    earlier) loads: its tensors are stacked.

    Args:
        rank: ``R``, the projections per pair of input and output channels
            (factorised mode only).
    """

    kind = "fc"
    fan_in_rate = True
    color = "#d95f02"

    @classmethod
    def for_layer(cls, options: LayerOptions, **common: Any) -> FCPath:
        """A layer's FC path: its mode and rank (it maps straight to the output grid)."""
        return cls(**common, mode=options.fc_mode, rank=options.fc_rank)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        image_size: int | tuple[int, int],
        group: str | Group = DEFAULT_GROUP,
        stride: int = 1,
        mode: FCMode | str = FCMode.FACTORIZED,
        rank: int = 1,
    ):
        super().__init__(in_channels, out_channels, image_size, group, stride)
        mode = FCMode.parse(mode, "FCPath mode")
        if rank < 1 or (rank > 1 and mode == FCMode.DENSE):
            raise ValueError(f"FCPath rank must be >= 1 (1 in dense mode), got {rank}")
        self.mode = mode
        self.rank = rank
        g = self.group.order
        c_in, c_out = g * in_channels, g * out_channels
        s_in = self.in_size[0] * self.in_size[1]
        s_out = self.out_size[0] * self.out_size[1]
        if mode == FCMode.DENSE:
            self.linear = nn.Linear(c_in * s_in, c_out * s_out)
            nn.init.normal_(self.linear.weight, std=math.sqrt(2.0 / (c_in * s_in)))
            nn.init.zeros_(self.linear.bias)
            return
        self.pixel_maps = BatchedLinear(c_in, s_in, c_out * rank, bias=False)
        self.channel_maps = BatchedLinear(c_out, c_in * rank, s_out)
        # Variance preserving: Var[t] = Var[z]; Var[out] = 2 Var[z] (ReLU gain). Map by map,
        # as the per-channel modules of earlier versions drew theirs: seeded runs repeat.
        with torch.no_grad():
            for weight in self.pixel_maps.weight:
                nn.init.normal_(weight, std=math.sqrt(1.0 / s_in))
            for weight in self.channel_maps.weight:
                nn.init.normal_(weight, std=math.sqrt(2.0 / (c_in * rank)))
            self.channel_maps.bias.zero_()
        self.register_load_state_dict_pre_hook(_stack_per_channel_entries)

    def output_parameters(self) -> list[nn.Parameter]:
        """Stage 2: ``V`` and its bias (dense mode: the whole map)."""
        stage = self.linear if self.mode == FCMode.DENSE else self.channel_maps
        return [stage.weight, stage.bias]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, G, C_out, H / stride, W / stride) outputs of (B, G, C_in, H, W) inputs: the
        two stages (factorised mode) or the one linear map (dense mode)."""
        self.check_input(z)
        b, g, c, h, w = z.shape
        x = z.reshape(b, g * c, h * w)
        if self.mode == FCMode.DENSE:
            out = self.linear(x.reshape(b, -1))
        else:
            # bmm over contiguous channel-major operands: einsum on the batch-major
            # layout handed bmm strided batches that it copied matrix by matrix
            rows = x.transpose(0, 1).contiguous()  # (C_i, B, S_in)
            stage1 = self.pixel_maps(rows)  # (C_i, B, C_o R)
            mixed = by_output(contiguous_grad(stage1), self.rank)  # (C_o, B, C_i R)
            out = contiguous_grad(self.channel_maps(mixed)).transpose(0, 1)  # (B, C_o, S_out)
        return out.reshape(b, g, self.out_channels, *self.out_size)

    def extra_repr(self) -> str:
        """:meth:`Path.extra_repr` with the mode and a rank other than 1."""
        rank = f", rank={self.rank}" if self.rank != 1 else ""
        return f"{super().extra_repr()}, mode={self.mode.value}{rank}"


def by_output(stage1: torch.Tensor, rank: int) -> torch.Tensor:
    """An FC path's stage-1 outputs (C_i, B, C_o R), per input channel, as its stage-2
    inputs (C_o, B, C_i R), per output channel (input ``i R + r`` of channel ``o``)."""
    c_i, b, _ = stage1.shape
    mixed = stage1.reshape(c_i, b, -1, rank).permute(2, 1, 0, 3)  # (C_o, B, C_i, R)
    return mixed.reshape(mixed.shape[0], b, c_i * rank).contiguous()


def _stack_per_channel_entries(module, state_dict, prefix, *args) -> None:
    """Stack a per-channel state dict's ``pixel_maps.<i>.weight``, ``channel_maps.<o>.weight``
    and ``channel_maps.<o>.bias`` into the stages' tensors, in place (a load pre-hook)."""
    for stage, names in (("pixel_maps", ("weight",)), ("channel_maps", ("weight", "bias"))):
        for name in names:
            keys = [f"{prefix}{stage}.{k}.{name}" for k in range(getattr(module, stage).channels)]
            if all(key in state_dict for key in keys):
                state_dict[f"{prefix}{stage}.{name}"] = torch.stack(
                    [state_dict.pop(key) for key in keys]
                )
