"""What every path of a relaxed layer shares: the :class:`Path` base, its facts as
class attributes, and the helpers of the paths' convolutions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, ClassVar

import torch
from torch import nn

from ella.choices import Downsampling
from ella.groups import Group, layer_group
from ella.nn._checks import as_size, check_lifted
from ella.nn.downsample import downsample as downsample_by
from ella.nn.options import LayerOptions


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
    #: options of this kind's own, name -> default: a layer's keyword and a configuration's
    #: field of that name reach :meth:`for_layer` as ``options.own[name]``
    own_options: ClassVar[Mapping[str, Any]] = MappingProxyType({})

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
    def for_layer(cls, options: LayerOptions, **common: Any) -> Path:
        """The path of a :class:`~ella.nn.RelaxedLayer`: ``common`` its channels, image
        size, group and stride; ``options`` the layer's
        (:class:`~ella.nn.options.LayerOptions`), of which the path takes its own."""
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

    def fuses(self) -> bool:
        """Whether :func:`~ella.nn.paths.fused.convolve_paths` may run this path's
        convolution together with the layer's other such paths (it has a
        ``lifted_filter``); a path that does not runs on its own. Defaults to False."""
        return False

    def extra_repr(self) -> str:
        """The channels, sizes and group that ``print(module)`` shows."""
        return (
            f"in={self.in_channels}, out={self.out_channels}, size={self.in_size}"
            f"->{self.out_size}, group={self.group.name}"
        )


def init_conv(conv: nn.Conv2d) -> nn.Conv2d:
    """``conv`` with He-uniform weights (ReLU gain) and zero bias, the paths' initialisation."""
    nn.init.kaiming_uniform_(conv.weight, nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


def check_kernel(kernel_size: int) -> int:
    """``kernel_size``, refused unless a positive odd number (a centred filter)."""
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd number, got {kernel_size}")
    return kernel_size


def register_copy_order(path: nn.Module, group: Group) -> None:
    """The buffers of a path whose filter blocks are indexed by ``k`` for input copy
    ``j = k h`` of output copy ``h``: ``gather[h, k]``, the input copy ``k h``, and
    ``expand[h, j]``, the block ``k`` that output copy ``h`` applies to input copy ``j``."""
    path.register_buffer("gather", group.cayley_table.t().contiguous(), persistent=False)
    path.register_buffer("expand", torch.argsort(path.gather, dim=1), persistent=False)


def gathered_copies(z: torch.Tensor, gather: torch.Tensor) -> torch.Tensor:
    """For each output copy ``h``, the input copies in the order ``k h``, stacked as
    channels, with the output copies folded into the batch: (B, G, C, H, W) ->
    (B G, G C, H, W). ``index_select`` has a cheaper backward than ``z[:, idx]``."""
    b, g, c, h, w = z.shape
    return z.index_select(1, gather.flatten()).reshape(b * g, g * c, h, w)
