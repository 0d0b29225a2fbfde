"""The residual path: the part of a CONV path that breaks the group's symmetry, and only
it, meant beside a GCONV path."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from ella.choices import DEFAULT_GROUP, Downsampling
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


def residual_basis(order: int) -> torch.Tensor:
    """An orthonormal basis (|G|, |G| - 1) of the functions on the group's elements that sum
    to zero: column ``m`` is the Helmert contrast of the first ``m + 1`` elements against
    element ``m + 1``. Orthogonal to the constant function, so a filter that varies with the
    output copy only along these columns has zero group average."""
    if order < 2:
        raise ValueError(
            "a residual path needs a group of order 2 or more: on the trivial group every "
            "convolution is equivariant and there is nothing left to break; use paths "
            "('conv',) or a group such as 'C4'"
        )
    basis = torch.zeros(order, order - 1, dtype=torch.float64)
    for m in range(order - 1):
        basis[: m + 1, m] = 1.0
        basis[m + 1, m] = -(m + 1.0)
        basis[:, m] /= math.sqrt((m + 1.0) * (m + 2.0))
    return basis.to(torch.get_default_dtype())


class ResidualConvPath(Path):
    r"""Residual path: the part of a CONV path that breaks the group's symmetry, and only it.

    In the lifted representation the group permutes the copies, and a CONV filter
    ``W[h, j]`` (output copy ``h``, input copy ``j``) is equivariant exactly when the block
    ``V[h, k] = W[h, k h]`` does not depend on ``h``: that is a full GCONV
    (:class:`GConvPath`). This path parameterises the rest,

    .. math::

        V[h, k] = \sum_{m=1}^{|G|-1} E[h, m]\, \theta_m[k],

    with :func:`residual_basis` ``E`` orthonormal and orthogonal to the constant, so the
    filter's group average ``\frac{1}{|G|} \sum_h V[h, k]`` is zero: this path adds nothing
    equivariant, and a GCONV path plus this one span exactly the CONV maps (an orthonormal
    change of basis of the CONV filter, so an isotropic prior on the CONV weight is one on
    both). A prior variance of this path that goes to zero leaves the layer exactly
    equivariant; its share reads as how much the layer breaks the symmetry.

    ``theta`` is one ``Conv2d(G C_in, (G - 1) C_out)`` applied, as in a full GCONV, to the
    input copies gathered in the order ``k h`` for each output copy ``h`` (copies folded
    into the batch); output copy ``h`` then sums its ``G - 1`` outputs weighted by
    ``E[h, :]``. The Kronecker factors are those of that ``Conv2d`` with the copies as
    extra rows (KFAC-expand), its output gradients weighted by ``E``. Outside
    :func:`per_module_calls` it runs as the equivalent filter over the lifted channels
    (:meth:`lifted_filter`), added to the layer's other convolutions
    (:func:`convolve_paths`).

    Parameters: ``(G - 1) (G C_in C_out k^2 + C_out)``, as many as a CONV path less a full
    GCONV path.
    """

    kind = "residual"
    color = "#e7298a"
    excludes = MappingProxyType({
        "conv": "conv and residual together are redundant (the residual is the part of a "
        "CONV path that breaks the group's symmetry)",
    })  # fmt: skip
    needs = MappingProxyType({
        "gconv": "a residual path is the part of a CONV path that breaks the group's "
        "symmetry, and stands beside the GCONV path that holds the equivariant part (alone "
        "it is a CONV path without its equivariant part)",
    })  # fmt: skip
    needs_group = (
        "on the trivial group every convolution is equivariant and there is nothing for a "
        "residual to break"
    )

    @classmethod
    def for_layer(cls, options: LayerOptions, **common: Any) -> ResidualConvPath:
        """A layer's residual path: its kernel size and downsampling."""
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
        self.register_buffer("basis", residual_basis(g), persistent=False)
        self.conv = init_conv(
            nn.Conv2d(
                g * in_channels, (g - 1) * out_channels, k, padding=k // 2, padding_mode="circular"
            )
        )
        register_copy_order(self, self.group)
        #: the convolution this path runs as on its own (:func:`convolve_paths`)
        self.convolution = LiftedConvolution()

    def output_parameters(self) -> list[nn.Parameter]:
        """``theta``: the ``Conv2d``'s weight and bias (the outputs are linear in them)."""
        return [self.conv.weight, self.conv.bias]

    def fuses(self) -> bool:
        """Its convolution runs with the layer's others (:meth:`Path.fuses`)."""
        return True

    def lifted_filter(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight (G C_out, G C_in, k, k) and bias (G C_out) over the lifted channels:
        block ``[h, j]`` is ``V[h, k]`` for ``j = k h``."""
        w = self.conv.weight  # ((G-1) C_out, G C_in, k, k), input blocks indexed by k
        g, c_out = self.group.order, self.out_channels
        theta = w.reshape(g - 1, c_out, g, -1, *w.shape[-2:])  # (m, o, k, i, kh, kw)
        v = torch.einsum("hm,mokixy->hokixy", self.basis, theta)  # (h, o, k, i, kh, kw)
        lifted = torch.gather(
            v, 2, self.expand.view(g, 1, g, 1, 1, 1).expand(-1, *v.shape[1:])
        )  # block [h, j] = V[h, expand[h, j]]
        bias = self.basis @ self.conv.bias.reshape(g - 1, c_out)  # (h, o)
        return lifted.reshape(g * c_out, -1, *w.shape[-2:]), bias.reshape(-1)

    def mix_outputs(self, y: torch.Tensor) -> torch.Tensor:
        """The module's outputs (B G, (G - 1) C_out, H, W) as the path's
        (B, G, C_out, H, W): output copy ``h`` is ``sum_m E[h, m] y[h, m]``."""
        bg, _, h, w = y.shape
        g = self.group.order
        y = y.reshape(bg // g, g, g - 1, self.out_channels, h, w)
        return torch.einsum("bhmoxy,hm->bhoxy", y, self.basis)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, G, C_out, H / stride, W / stride) outputs of (B, G, C_in, H, W) inputs: the
        symmetry-breaking part of a CONV path (:meth:`mix_outputs`)."""
        self.check_input(z)
        if fusable_paths([self]):  # outside per_module_calls
            return convolve_paths(z, [self], self.convolution)
        return self._downsample(self.mix_outputs(self.conv(gathered_copies(z, self.gather))))
