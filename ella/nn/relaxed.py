"""The relaxed-equivariant layer: FC, CONV and GCONV paths side by side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ella.choices import DEFAULT_GROUP, Normalisation
from ella.groups import Group, layer_group
from ella.nn._checks import as_size, check_lifted
from ella.nn.kinds import (
    PATH_KINDS,
    PATH_NAMES,
    check_path_names,
    check_zero_init,
    declared_options,
)
from ella.nn.options import LayerOptions
from ella.nn.paths import LiftedConvolution, convolve_paths, fusable_paths
from ella.testing import equivariance_errors


def instance_normalise(z: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Normalise every (example, channel) of a lifted tensor over (group, H, W).

    Shapes: (B, |G|, C, H, W) -> the same. The statistics are invariant under
    the group's action on (group, H, W), so the map is equivariant.
    """
    b, g, c, h, w = z.shape
    # torch's fused instance norm over (B, C, G H W): one kernel, where a reduction over
    # the non-adjacent axes (1, 3, 4) takes several strided passes
    by_channel = z.transpose(1, 2).reshape(b, c, g * h * w)
    out = F.instance_norm(by_channel, eps=eps).view(b, c, g, h, w).transpose(1, 2)
    return out.contiguous()


class RelaxedLayer(nn.Module):
    """A layer whose FC, CONV and GCONV paths run in parallel on a lifted tensor.

    ``out = relu(sum_p path_p(z) / sqrt(P))`` for the ``P`` chosen paths ``p``
    (van der Ouderaa et al., NeurIPS 2023, who average the paths). Scaling by
    ``1/sqrt(P)`` instead of ``1/P`` keeps the output variance of independent,
    variance-preserving paths, where a plain mean of three paths shrinks a deep
    mixer's signal at every layer. Each path's parameters are kept
    apart (``layer.paths["gconv"]`` ...), so a prior can be attached per
    layer and path: shrinking a path's prior variance to zero switches it off
    and leaves the symmetry of the remaining paths. The CONV and full GCONV
    paths are computed together as one convolution
    (:func:`~ella.nn.paths.convolve_paths`; the same function, a fraction of
    the time), except inside :func:`~ella.nn.per_module_calls`.

    Args:
        in_channels: channels per group copy of the input.
        out_channels: channels per group copy of the output.
        image_size: input size ``S`` or ``(H, W)``.
        group: a :class:`~ella.groups.Group` or its name (``"trivial"``, ``"C4"``, ``"D4"``).
        paths: any non-empty subset of ``("fc", "conv", "gconv", "residual")`` without
            both ``"conv"`` and ``"residual"``; ``("gconv", "residual")`` spans the CONV
            maps with the symmetry-breaking part on its own prior
            (:class:`~ella.nn.ResidualConvPath`).
        stride: 1, or 2: the CONV and GCONV paths compute at full resolution and halve
            their output by ``options.downsample``; the FC path maps to the smaller grid.
        activation: apply a ReLU after averaging the paths.
        options: the options the paths read (:class:`~ella.nn.options.LayerOptions`:
            kernel size, FC and GCONV modes, FC rank, downsampling, normalisation, the
            paths that start at zero, and any option a kind declares). Defaults to
            :class:`~ella.nn.options.LayerOptions`' defaults.
        **values: options by name instead (``kernel_size=5``, ``fc_mode="dense"``,
            ``norm="instance"``, ``zero_init=("fc",)``, ...), or changes to ``options``.

    Shapes:
        input (B, |G|, in_channels, H, W) -> output (B, |G|, out_channels, H/stride, W/stride).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        image_size: int | tuple[int, int],
        group: str | Group = DEFAULT_GROUP,
        paths: Sequence[str] = PATH_NAMES,
        stride: int = 1,
        activation: bool = True,
        options: LayerOptions | None = None,
        **values: Any,
    ):
        super().__init__()
        self.group = layer_group(group)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.in_size = as_size(image_size)
        self.stride = stride
        self.activation = activation
        options = LayerOptions.given(options, values, declared_options(), "RelaxedLayer")
        #: the options the paths were built with
        self.options = options
        self.paths = nn.ModuleDict({
            name: PATH_KINDS[name].for_layer(
                options,
                in_channels=in_channels,
                out_channels=out_channels,
                image_size=self.in_size,
                group=self.group,
                stride=stride,
            )
            for name in check_path_names(paths)
        })  # fmt: skip
        for name in check_zero_init(options.zero_init, self.path_names):
            self.paths[name].start_at_zero()
        self.out_size = next(iter(self.paths.values())).out_size
        #: the one convolution of the fused paths (:func:`~ella.nn.paths.convolve_paths`)
        self.convolution = LiftedConvolution()
        self.norm = Normalisation.parse(options.norm, "norm")
        positions = self.group.order * self.out_size[0] * self.out_size[1]
        if self.norm == Normalisation.INSTANCE and positions < 2:
            raise ValueError(
                f"instance normalisation needs more than one value per channel, but this "
                f"layer's output has {self.group.order} group copy and "
                f"{self.out_size[0]}x{self.out_size[1]} positions; use norm='none' here, "
                "a larger input or a non-trivial group"
            )

    @property
    def path_names(self) -> tuple[str, ...]:
        """The layer's paths, in the order they are summed."""
        return tuple(self.paths.keys())

    def path_parameters(self, name: str) -> list[nn.Parameter]:
        """Parameters of one path (``"fc"``, ``"conv"``, ``"gconv"`` or ``"residual"``)."""
        if name not in self.paths:
            raise KeyError(f"this layer has paths {self.path_names}, not {name!r}")
        return list(self.paths[name].parameters())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, |G|, C_out, H / stride, W / stride) outputs of (B, |G|, C_in, H, W) inputs:
        the paths' sum over ``sqrt(P)``, normalised if asked, then the ReLU if asked."""
        check_lifted(
            z,
            order=self.group.order,
            channels=self.in_channels,
            size=self.in_size,
            where="RelaxedLayer",
        )
        fused = fusable_paths(self.paths.values())
        parts = [path(z) for path in self.paths.values() if not any(path is p for p in fused)]
        if fused:
            parts.append(convolve_paths(z, fused, self.convolution))
        out = parts[0]
        for part in parts[1:]:
            out = out + part
        out = out / math.sqrt(len(self.paths))
        if self.norm == Normalisation.INSTANCE:
            out = instance_normalise(out)
        return torch.relu(out) if self.activation else out

    def equivariance_error(self, z: torch.Tensor | None = None) -> float:
        """Largest deviation ``|f(g z) - g f(z)|`` over the group, on ``z`` or a random input.

        About zero (float tolerance) when the layer has only a GCONV path.
        """
        if z is None:
            z = torch.randn(2, self.group.order, self.in_channels, *self.in_size)
        errors = equivariance_errors(self, self.group, z, in_action="lifted", out_action="lifted")
        return max(errors.values())

    def extra_repr(self) -> str:
        """The channels, sizes, group and paths that ``print(module)`` shows."""
        return (
            f"in={self.in_channels}, out={self.out_channels}, "
            f"size={self.in_size}->{self.out_size}, "
            f"group={self.group.name}, paths={self.path_names}"
        )
