"""The four kinds of path of a relaxed layer, on lifted tensors (B, |G|, C, H, W).

Every parameter is the weight or bias of an ``nn.Linear``, an ``nn.Conv2d`` or an
FC path's :class:`~ella.nn.batched.BatchedLinear` (one linear map per channel);
symmetry lives in parameter-free reshapes and gathers around those modules. This
is what lets the Kronecker-factored curvature backends handle every path: sharing a
filter over the group copies is presented to them as a larger batch (KFAC "expand"
over the group axis), and the evidence sees an FC stage's maps as one ``nn.Linear``
per channel (:mod:`ella.marglik.per_channel`).

Paths (van der Ouderaa et al., "Learning Layer-wise Equivariances
Automatically using Gradients", NeurIPS 2023, Sec. 3):

* :class:`FCPath` -- fully connected between whole feature maps, no symmetry.
* :class:`ConvPath` -- convolution over space that mixes the group copies:
  equivariant to (circular) translations only.
* :class:`GConvPath` -- group convolution: exactly equivariant to the group.
* :class:`ResidualConvPath` -- the part of a CONV path that breaks the group's
  symmetry, and only it, meant beside a GCONV path.

A CONV or GCONV path with ``stride=2`` computes at full resolution and halves
its output by ``downsample`` (:mod:`ella.nn.downsample`: one polyphase
component per sample, or 2x2 max); the FC path maps straight to the smaller
output grid.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ella.choices import DEFAULT_GROUP, Downsampling, FCMode, GConvMode
from ella.groups import Group, layer_group
from ella.nn._checks import as_size, check_lifted
from ella.nn.batched import BatchedLinear
from ella.nn.downsample import downsample as downsample_by
from ella.nn.downsample import max_downsample
from ella.nn.padding import circular_pad


@contextmanager
def per_module_calls(model: nn.Module) -> Iterator[None]:
    """Run every path of ``model`` as calls of its own modules (``module(x)``).

    By default a layer's CONV, full GCONV and residual paths share one convolution
    (:func:`convolve_paths`). Curvature backends that hook module calls (ASDL,
    Curvlinops, :mod:`ella.invariance.kfac`) need every module called; inside this
    context each path of ``model`` calls its ``Conv2d``, with the same outputs (up to
    float rounding) and the same parameters, and the per-channel FC paths of
    :mod:`ella.marglik.per_channel` call their ``nn.Linear`` modules one by one. It sets
    each path's ``module_calls`` and restores it on exit, so it nests.
    """
    paths = [m for m in model.modules() if isinstance(m, Path)]
    before = [p.module_calls for p in paths]
    for path in paths:
        path.module_calls = True
    try:
        yield
    finally:
        for path, flag in zip(paths, before, strict=True):
            path.module_calls = flag


class _ContiguousGrad(torch.autograd.Function):
    """Identity forward; the backward hands on its gradient made contiguous, in one copy.

    ``bmm``'s backward, given a strided gradient (a transposed or permuted view,
    as the FC path's channel-major outputs get back from the batch-major layers
    around them), copies it one batch matrix at a time: on the default mixer that
    would be 232 small copies per backward pass.
    """

    generate_vmap_rule = True  # torch.func transforms (vmap, jacrev, jvp) go through it too

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()

    @staticmethod
    def jvp(ctx, tangent: torch.Tensor) -> torch.Tensor:  # forward mode: the identity's
        return tangent


def contiguous_grad(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself; its gradient reaches the ops before it contiguous
    (:class:`_ContiguousGrad`)."""
    return _ContiguousGrad.apply(x)


class Path(nn.Module):
    """Common interface: a map (B, |G|, C_in, H, W) -> (B, |G|, C_out, H/s, W/s).

    A kind of path states its facts as class attributes, which the registry
    (:mod:`ella.nn.kinds`) and the learning-rate rules read; a new kind subclasses this,
    sets them, and implements :meth:`for_layer`, :meth:`output_parameters` and ``forward``.
    """

    #: the path's name in a layer (``layer.paths[kind]``) and among ``--paths``
    kind: ClassVar[str]
    #: kinds a layer holding this path must also hold, each with the reason
    needs: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: kinds a layer holding this path must not hold, each with the reason
    excludes: ClassVar[Mapping[str, str]] = MappingProxyType({})
    #: why this path needs a group other than the trivial one; empty where it does not
    needs_group: ClassVar[str] = ""
    #: whether ``lr_scaling="fan_in_fc"`` scales this path's learning rate by its fan-in
    fan_in_rate: ClassVar[bool] = False
    #: the path's colour in figures of shares
    color: ClassVar[str] = "#666666"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        image_size: int | tuple[int, int],
        group: str | Group,
        stride: int,
        downsample: Downsampling | str = Downsampling.POLYPHASE,
    ):
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ValueError(
                f"channel counts must be positive, got in={in_channels}, out={out_channels}"
            )
        if stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {stride}")
        self.group = layer_group(group)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.in_size = as_size(image_size)
        if self.group.requires_square and self.in_size[0] != self.in_size[1]:
            raise ValueError(
                f"group {self.group.name} rotates images and needs square images, "
                f"got image_size {self.in_size}"
            )
        if stride == 2 and (self.in_size[0] % 2 or self.in_size[1] % 2):
            raise ValueError(f"stride 2 needs an even image size, got {self.in_size}")
        self.stride = stride
        self.downsample = Downsampling.parse(downsample, "downsample")
        #: run as calls of its own modules, not fused (set by :func:`per_module_calls`)
        self.module_calls = False
        self.out_size = (self.in_size[0] // stride, self.in_size[1] // stride)

    @classmethod
    def for_layer(cls, options: Mapping[str, Any], **common: Any) -> Path:
        """The path of a :class:`~ella.nn.RelaxedLayer`: ``common`` its channels, image
        size, group and stride; ``options`` the layer's (``kernel_size``, ``downsample``,
        ``fc_mode``, ``fc_rank``, ``gconv_mode``), of which the path takes its own."""
        raise NotImplementedError

    def rate_copies(self) -> int:
        """How many copies of the layer use each of the path's weights, as the GCONV rate
        rule counts them (``gconv_lr="group_order"`` multiplies the learning rate by it)."""
        return 1

    def check_input(self, z: torch.Tensor) -> None:
        """Raise a ValueError unless ``z`` is (B, |G|, C_in, H, W) for this path."""
        check_lifted(
            z,
            order=self.group.order,
            channels=self.in_channels,
            size=self.in_size,
            where=type(self).__name__,
        )

    def _downsample(self, z: torch.Tensor) -> torch.Tensor:
        return downsample_by(z, self.downsample) if self.stride == 2 else z

    def output_parameters(self) -> list[nn.Parameter]:
        """The last stage's weight and bias: every output of the path is linear in them."""
        raise NotImplementedError

    @torch.no_grad()
    def start_at_zero(self) -> None:
        """Zero :meth:`output_parameters`, so that the path adds nothing until training
        grows it; its other parameters keep their random start, so the last stage gets
        a gradient at once. A layer whose symmetry-breaking paths start at zero begins as
        the symmetric network and breaks the symmetry where the data pulls."""
        for param in self.output_parameters():
            param.zero_()

    def extra_repr(self) -> str:
        """The channels, sizes and group that ``print(module)`` shows."""
        return (
            f"in={self.in_channels}, out={self.out_channels}, size={self.in_size}"
            f"->{self.out_size}, group={self.group.name}"
        )


def _init_conv(conv: nn.Conv2d) -> nn.Conv2d:
    nn.init.kaiming_uniform_(conv.weight, nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


def _check_kernel(kernel_size: int) -> int:
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd number, got {kernel_size}")
    return kernel_size


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
    def for_layer(cls, options: Mapping[str, Any], **common: Any) -> ConvPath:
        """A layer's CONV path: its kernel size and downsampling."""
        return cls(**common, kernel_size=options["kernel_size"], downsample=options["downsample"])

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
        k = _check_kernel(kernel_size)
        g = self.group.order
        self.conv = _init_conv(
            nn.Conv2d(g * in_channels, g * out_channels, k, padding=k // 2, padding_mode="circular")
        )

    def output_parameters(self) -> list[nn.Parameter]:
        """The ``Conv2d``'s weight and bias (the path's only stage)."""
        return [self.conv.weight, self.conv.bias]

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


def _register_copy_order(path: nn.Module, group: Group) -> None:
    """The buffers of a path whose filter blocks are indexed by ``k`` for input copy
    ``j = k h`` of output copy ``h``: ``gather[h, k]``, the input copy ``k h``, and
    ``expand[h, j]``, the block ``k`` that output copy ``h`` applies to input copy ``j``."""
    path.register_buffer("gather", group.cayley_table.t().contiguous(), persistent=False)
    path.register_buffer("expand", torch.argsort(path.gather, dim=1), persistent=False)


def _gathered_copies(z: torch.Tensor, gather: torch.Tensor) -> torch.Tensor:
    """For each output copy ``h``, the input copies in the order ``k h``, stacked as
    channels, with the output copies folded into the batch: (B, G, C, H, W) ->
    (B G, G C, H, W). ``index_select`` has a cheaper backward than ``z[:, idx]``."""
    b, g, c, h, w = z.shape
    return z.index_select(1, gather.flatten()).reshape(b * g, g * c, h, w)


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
    def for_layer(cls, options: Mapping[str, Any], **common: Any) -> GConvPath:
        """A layer's GCONV path: its kernel size, mode and downsampling."""
        return cls(
            **common,
            kernel_size=options["kernel_size"],
            mode=options["gconv_mode"],
            downsample=options["downsample"],
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
        k = _check_kernel(kernel_size)
        fan_copies = self.group.order if self.mode == GConvMode.FULL else 1
        self.conv = _init_conv(
            nn.Conv2d(
                fan_copies * in_channels, out_channels, k, padding=k // 2, padding_mode="circular"
            )
        )
        _register_copy_order(self, self.group)
        #: the convolution this path runs as on its own (:func:`convolve_paths`)
        self.convolution = LiftedConvolution()

    def output_parameters(self) -> list[nn.Parameter]:
        """The group convolution's ``Conv2d`` weight and bias (the path's only stage)."""
        return [self.conv.weight, self.conv.bias]

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
        z = _gathered_copies(z, self.gather) if full else z.reshape(b * g, c, h, w)
        out = self.conv(z).reshape(b, g, self.out_channels, h, w)
        return self._downsample(out)

    def extra_repr(self) -> str:
        """:meth:`Path.extra_repr` with the mode."""
        return f"{super().extra_repr()}, mode={self.mode.value}"


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
    def for_layer(cls, options: Mapping[str, Any], **common: Any) -> ResidualConvPath:
        """A layer's residual path: its kernel size and downsampling."""
        return cls(**common, kernel_size=options["kernel_size"], downsample=options["downsample"])

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
        k = _check_kernel(kernel_size)
        g = self.group.order
        self.register_buffer("basis", residual_basis(g), persistent=False)
        self.conv = _init_conv(
            nn.Conv2d(
                g * in_channels, (g - 1) * out_channels, k, padding=k // 2, padding_mode="circular"
            )
        )
        _register_copy_order(self, self.group)
        #: the convolution this path runs as on its own (:func:`convolve_paths`)
        self.convolution = LiftedConvolution()

    def output_parameters(self) -> list[nn.Parameter]:
        """``theta``: the ``Conv2d``'s weight and bias (the outputs are linear in them)."""
        return [self.conv.weight, self.conv.bias]

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
        return self._downsample(self.mix_outputs(self.conv(_gathered_copies(z, self.gather))))


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
    def for_layer(cls, options: Mapping[str, Any], **common: Any) -> FCPath:
        """A layer's FC path: its mode and rank (it maps straight to the output grid)."""
        return cls(**common, mode=options["fc_mode"], rank=options["fc_rank"])

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


#: the paths whose convolutions :func:`convolve_paths` can run as one
FusedPath = ConvPath | GConvPath | ResidualConvPath


def fusable_paths(paths: Iterable[Path]) -> list[FusedPath]:
    """The CONV, full GCONV and residual paths among ``paths`` that :func:`convolve_paths` can run
    as one convolution: all of them, unless their convolutions differ in kernel, padding,
    dilation or bias or are no ``Conv2d`` (only if changed by hand), or inside
    :func:`per_module_calls`."""
    paths = list(paths)
    if any(p.module_calls for p in paths):
        return []
    chosen = [
        p
        for p in paths
        if isinstance(p, ConvPath | ResidualConvPath)
        or (isinstance(p, GConvPath) and p.mode == GConvMode.FULL)
    ]
    if not all(isinstance(p.conv, nn.Conv2d) for p in chosen):  # a path rebuilt by hand
        return []
    shapes = {
        (p.conv.kernel_size, p.conv.padding, p.conv.padding_mode, p.conv.dilation, p.conv.stride)
        for p in chosen
    }
    if len(shapes) > 1 or any(p.conv.bias is None or p.conv.groups != 1 for p in chosen):
        return []
    return chosen


def adds_filters(paths: list[FusedPath]) -> bool:
    """Whether :func:`convolve_paths` adds the paths' filters (stride 1, or one path) and
    returns their summed output, rather than stacking them (stride 2)."""
    return len(paths) == 1 or paths[0].stride == 1


class LiftedConvolution(nn.Module):
    """One convolution over the lifted channels, a module without parameters: the one that
    :func:`convolve_paths` runs for a layer's fused paths, so that a forward hook reads its
    input ``z`` and output (the native Kronecker factors,
    :class:`ella.marglik.native.NativeGGN`, do).

    ``forward(z, weight, bias, like)``: lifted ``z`` (B, G, C_in, H, W) padded as ``like``
    (an ``nn.Conv2d`` whose padding, padding mode and dilation it takes), convolved with
    ``weight`` (C_out', G C_in, k, k) and ``bias`` (C_out',): (B, C_out', H, W).
    """

    def forward(
        self, z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, like: nn.Conv2d
    ) -> torch.Tensor:
        """(B, C_out', H, W): lifted ``z`` (B, G, C_in, H, W), padded as ``like``, convolved
        with ``weight`` (C_out', G C_in, k, k) and ``bias`` (C_out',)."""
        b, g, c, h, w = z.shape
        x = z.reshape(b, g * c, h, w)
        padding = like.padding
        if like.padding_mode == "circular":  # the same values, a cheaper backward
            x = circular_pad(x, like._reversed_padding_repeated_twice)
            padding = 0
        elif like.padding_mode != "zeros":
            x = F.pad(x, like._reversed_padding_repeated_twice, mode=like.padding_mode)
            padding = 0
        return F.conv2d(x, weight, bias, padding=padding, dilation=like.dilation)


def convolve_paths(
    z: torch.Tensor, paths: list[FusedPath], convolution: LiftedConvolution
) -> torch.Tensor:
    """The sum of the outputs of CONV, full GCONV and residual paths on the same input, from
    one convolution over the lifted channels.

    Every such path is a ``Conv2d`` from the ``G C_in`` lifted input channels to ``G
    C_out`` channels (:meth:`ConvPath.lifted_filter`, :meth:`GConvPath.lifted_filter`,
    :meth:`ResidualConvPath.lifted_filter`).
    With stride 1 their filters are added (a convolution is linear in its filter, so
    ``conv(z, W_1) + conv(z, W_2) = conv(z, W_1 + W_2)``: half the work of two
    convolutions); with stride 2 they are stacked along the output channels and each
    path's part is downsampled on its own, as :meth:`Path.forward` does (a 2x2 maximum,
    which acts plane by plane, over all parts in one call). The input is padded once for
    all paths.

    Args:
        z: lifted input (B, G, C_in, H, W).
        paths: from :func:`fusable_paths` (same conv settings, same stride).
        convolution: the owner's :class:`LiftedConvolution`, which runs it; its output is
            (B, G C_out, H, W) for stride 1 or one path, else (B, P G C_out, H, W).

    Returns:
        (B, G, C_out, H / stride, W / stride).
    """
    b, g, c, h, w = z.shape
    filters = [p.lifted_filter() for p in paths]
    if adds_filters(paths):
        weight, bias = filters[0]
        for w_p, b_p in filters[1:]:
            weight, bias = weight + w_p, bias + b_p
    else:
        weight = torch.cat([w_p for w_p, _ in filters])
        bias = torch.cat([b_p for _, b_p in filters])
    out = convolution(z, weight, bias, paths[0].conv)
    if adds_filters(paths):
        return paths[0]._downsample(out.reshape(b, g, paths[0].out_channels, h, w))
    pooled = all(p.downsample == Downsampling.MAX for p in paths)
    if pooled:  # a 2x2 maximum acts plane by plane: all paths' planes in one call
        out = max_downsample(out)
        h, w = h // 2, w // 2
    parts = [
        part.reshape(b, g, path.out_channels, h, w)
        for path, part in zip(paths, out.chunk(len(paths), dim=1), strict=True)
    ]
    if not pooled:
        parts = [path._downsample(part) for path, part in zip(paths, parts, strict=True)]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total
