"""One Kronecker block per kind of module: the native GGN's factors, summed per batch.

* :class:`ModuleBlock`: an ``nn.Linear`` or ``nn.Conv2d`` (heads, user layers, paths run as
  calls of their own modules), caught by forward hooks;
* :class:`FusedPathsBlock`: a relaxed layer's CONV, full GCONV and residual paths, run as
  one convolution (:func:`~ella.nn.paths.convolve_paths`); each kind of path reads that
  convolution through its entry of :data:`FUSED_CURVATURE`;
* :class:`FCPathBlock`: a factorised FC path as the evidence sees it
  (:class:`~ella.marglik.per_channel.PerChannelFCPath`), from four batched products.

:func:`curvature_blocks` assigns every trainable tensor of a network to one block;
:class:`~ella.marglik.native.NativeGGN` sums their factors over the batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ella.groups import Group
from ella.marglik.kfac_products import (
    channel_outer_sum,
    gram,
    input_factor,
    mirror_upper,
    outer_sum,
    upper_gram,
)
from ella.marglik.laplace_internals import mark_permuted
from ella.marglik.per_channel import PerChannelFCPath
from ella.marglik.support import UnsupportedModuleError, check_supported
from ella.nn.paths import (
    ConvPath,
    FusedPath,
    GConvPath,
    LiftedConvolution,
    Path,
    ResidualConvPath,
    adds_filters,
    fusable_paths,
)
from ella.nn.relaxed import RelaxedLayer

__all__ = [
    "FUSED_CURVATURE",
    "FCPathBlock",
    "FusedCurvature",
    "FusedPathsBlock",
    "ModuleBlock",
    "StageCapture",
    "curvature_blocks",
    "fused_curvature",
    "pixel_permutations",
]


class StageCapture:
    """Sets a :class:`~ella.marglik.per_channel.PerChannelFCPath`'s ``_capture`` to a fresh
    dict that its forward fills with the stages' tensors; :meth:`remove` ends it."""

    def __init__(self, path: PerChannelFCPath):
        self.path = path
        path._capture = {}

    def remove(self) -> None:
        """Stop capturing (the handle's ``remove``, as a forward hook's)."""
        self.path._capture = None


class ModuleBlock:
    """An ``nn.Linear`` or ``nn.Conv2d``: one weight block ``[B, A]`` and a bias block ``[B]``."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.inputs: torch.Tensor | None = None
        self.output: torch.Tensor | None = None

    def hook(self) -> Any:
        """Start recording this batch's inputs and outputs; returns the handle to remove."""

        def record(module, inputs, output):
            self.inputs, self.output = inputs[0], output

        return self.module.register_forward_hook(record)

    def outputs(self) -> list[torch.Tensor]:
        """The outputs whose gradients :meth:`output_factor` reads, in its order."""
        return [self.output]

    def input_factor(self) -> tuple[torch.Tensor, int]:
        """``sum a a^T`` over the batch and shared rows, and the number of positions ``L``."""
        return input_factor(self.module, self.inputs)

    def output_factor(
        self, grads: list[torch.Tensor], into: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """``[sum b b^T]`` over the batch and shared rows for one column of the GGN's root
        (added into ``into``'s running sum, in place, when it is given)."""
        (g,) = grads  # (M, d_out) or (M, C_out, H, W)
        total = None if into is None else into[0]
        if isinstance(self.module, nn.Conv2d):
            return [channel_outer_sum(g, total)]
        return [outer_sum(g.reshape(-1, g.shape[-1]).T, total)]  # rows (d_out, M)

    def input_sums(self, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """``[sum a a^T / L]`` of the recorded inputs (added into ``into``'s running sum of
        the earlier chunks of a batch, in place, when it is given)."""
        a, length = self.input_factor()
        return _added([a / length], into)

    def assemble(
        self, a_sums: list[torch.Tensor], b_sums: list[torch.Tensor], n_data: int
    ) -> list[list[torch.Tensor]]:
        """The blocks from the summed factors: weight ``[B, A / N]`` and bias ``[B]``."""
        (a,), (b,) = a_sums, b_sums
        weight = [b, a / n_data]
        if b.numel() == 1 and a.numel() == 1:  # as laplace-torch: a scalar block, unscaled
            weight = [b * a]
        return [weight] + ([[b]] if self.module.bias is not None else [])


def _added(sums: list[torch.Tensor], into: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """``sums``, or ``into`` with ``sums`` added in place when it is given."""
    if into is None:
        return sums
    return [total.add_(s) for total, s in zip(into, sums, strict=True)]


def _permuted_sum(a0: torch.Tensor, gather: torch.Tensor) -> torch.Tensor:
    """``sum_h P_h A_0 P_h^T``: the input factor of a full GCONV filter, whose rows for
    output copy ``h`` are the lifted input's with the copies permuted ``k -> k h``
    (``gather[h, k]``); ``A_0`` (G d, G d) is the factor of the un-permuted rows."""
    g = gather.shape[0]
    d = a0.shape[0] // g
    blocks = a0.reshape(g, d, g, d)
    total = sum(blocks[gather[i]][:, :, gather[i]] for i in range(g))
    return total.reshape(g * d, g * d)


# ------------------------------------------------- each kind of fused path's block
def _as_rows(path: FusedPath, grad: torch.Tensor) -> torch.Tensor:
    return grad


def _copies_as_rows(path: FusedPath, grad: torch.Tensor) -> torch.Tensor:
    """A GCONV filter serves every group copy: the copies are extra rows (KFAC-expand)."""
    m, _, h, w = grad.shape
    return grad.reshape(m * path.group.order, path.out_channels, h, w)


def _weighted_copies_as_rows(path: FusedPath, grad: torch.Tensor) -> torch.Tensor:
    """A residual filter serves copy ``h`` through ``E[h, :]``: copies as rows, weighted."""
    m, _, h, w = grad.shape
    grad = grad.reshape(m, path.group.order, 1, path.out_channels, h, w)
    grad = grad * path.basis[None, :, :, None, None, None]
    return grad.reshape(m * path.group.order, -1, h, w)


def _lifted_patches(path: FusedPath, a0: torch.Tensor) -> torch.Tensor:
    return a0


def _permuted_patches(path: FusedPath, a0: torch.Tensor) -> torch.Tensor:
    """Output copy ``h`` reads the input copies permuted ``k -> k h``."""
    return _permuted_sum(a0, path.gather)


@dataclass(frozen=True)
class FusedCurvature:
    """How the Kronecker block of one kind of fused path reads its layer's one convolution
    (:class:`FusedPathsBlock`).

    Attributes:
        output_rows: ``(path, g)``: the path's part ``g`` (M, G C_out, H, W) of the
            convolution's output gradient as the rows (M', d_out, H, W) whose ``sum b b^T``
            is the path's output factor.
        input_factor: ``(path, A_0)``: the path's input factor from ``A_0``, that of the
            lifted input's patches (G C_in k^2, G C_in k^2).
    """

    output_rows: Callable[[FusedPath, torch.Tensor], torch.Tensor]
    input_factor: Callable[[FusedPath, torch.Tensor], torch.Tensor]


#: Each kind of fused path's block, by class: a new kind that
#: :func:`~ella.nn.paths.convolve_paths` runs adds its entry here.
FUSED_CURVATURE: dict[type[Path], FusedCurvature] = {
    ConvPath: FusedCurvature(_as_rows, _lifted_patches),
    GConvPath: FusedCurvature(_copies_as_rows, _permuted_patches),
    ResidualConvPath: FusedCurvature(_weighted_copies_as_rows, _permuted_patches),
}


def fused_curvature(path: FusedPath) -> FusedCurvature:
    """The entry of :data:`FUSED_CURVATURE` for ``path``'s class (or the nearest base)."""
    for kind in type(path).__mro__:
        if kind in FUSED_CURVATURE:
            return FUSED_CURVATURE[kind]
    raise UnsupportedModuleError(
        f"{type(path).__name__} runs in a layer's fused convolution, but the native KFAC has "
        "no block for it; add its entry to ella.marglik.kfac_blocks.FUSED_CURVATURE"
    )


class FusedPathsBlock:
    """The CONV and full GCONV paths computed as one convolution over the lifted input
    (:func:`~ella.nn.paths.convolve_paths`): a weight block ``[B, A]`` and a bias block
    ``[B]`` per path, from that convolution's input and output.

    * Input: one ``A_0 = sum a a^T / L`` over the lifted input's patches (``G C_in k^2``
      rows). The CONV path's filter multiplies exactly these rows; a full GCONV
      filter multiplies, for output copy ``h``, the rows with copies permuted, so
      ``A = sum_h P_h A_0 P_h^T`` (KFAC-expand over the copies); so does a residual
      filter.
    * Output: the convolution's output gradient ``g`` (B, G C_out, H, W) -- with
      stride 1 the paths' outputs are summed before the layer's scaling, so every
      path has this gradient; with stride 2 each path has its own channels. The
      CONV path's ``B`` sums ``g g^T`` over positions (``G C_out`` rows); a GCONV
      path's ``B`` sums over positions and group copies (``C_out`` rows); a residual
      path's sums over positions and copies ``h`` the rows ``E[h, m] g[h]``
      (``(G - 1) C_out`` rows, :class:`~ella.nn.ResidualConvPath`).

    Args:
        owner: the module whose ``convolution`` (:class:`~ella.nn.paths.LiftedConvolution`)
            runs the paths (a :class:`~ella.nn.RelaxedLayer`, or a lone
            :class:`~ella.nn.GConvPath` or :class:`~ella.nn.ResidualConvPath`); a forward
            hook on it reads the lifted input and the output.
        paths: the fused paths, in forward order.
        trainable: which of them get blocks (a frozen path has none).
    """

    def __init__(self, owner: nn.Module, paths: list[nn.Module], trainable: list[bool]):
        self.owner = owner
        self.paths = paths
        self.trainable = trainable
        self.z: torch.Tensor | None = None  # the last forward's lifted input and output
        self.out: torch.Tensor | None = None

    def hook(self) -> Any:
        """Start recording this batch's inputs and outputs; returns the handle to remove."""

        def record(module, inputs, output):
            self.z, self.out = inputs[0], output

        return self.owner.convolution.register_forward_hook(record)

    def outputs(self) -> list[torch.Tensor]:
        """The outputs whose gradients :meth:`output_factor` reads, in its order."""
        return [self.out]

    def output_factor(
        self, grads: list[torch.Tensor], into: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Per path ``sum b b^T`` for one column of the GGN's root (added into ``into``'s
        running sums, in place, when it is given)."""
        (grad,) = grads  # (M, [P] G C_out, H, W)
        parts = (
            [grad] * len(self.paths) if adds_filters(self.paths) else grad.chunk(len(self.paths), 1)
        )
        factors = []
        for path, g, keep in zip(self.paths, parts, self.trainable, strict=True):
            if not keep:
                continue
            g = fused_curvature(path).output_rows(path, g)
            factors.append(channel_outer_sum(g, None if into is None else into[len(factors)]))
        return factors

    def input_sums(self, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """The input factors ``sum a a^T / L`` of the recorded inputs (added into ``into``'s
        running sums of the earlier chunks of a batch, in place, when it is given)."""
        z = self.z  # (M, G, C_in, H, W)
        m, g, c, h, w = z.shape
        a0, length = input_factor(self.paths[0].conv, z.reshape(m, g * c, h, w))
        a0 = a0 / length
        sums = [
            fused_curvature(path).input_factor(path, a0)
            for path, keep in zip(self.paths, self.trainable, strict=True)
            if keep
        ]
        return _added(sums, into)

    def assemble(
        self, a_sums: list[torch.Tensor], b_sums: list[torch.Tensor], n_data: int
    ) -> list[list[torch.Tensor]]:
        """The blocks from the summed factors, in laplace-torch's ``Kron`` layout."""
        kfacs = []
        for a, b in zip(a_sums, b_sums, strict=True):
            kfacs += [[b, a / n_data], [b]]
        return kfacs


def pixel_permutations(group: Group, size: tuple[int, int]) -> torch.Tensor | None:
    """Per group element ``h``, the pixel permutation ``p_h`` (|G|, H W) with
    ``(h . x).flatten()[i] = x.flatten()[p_h[i]]``, or ``None`` for the trivial group."""
    if group.order == 1:
        return None
    index = torch.arange(size[0] * size[1]).reshape(1, 1, *size)
    return torch.stack([group.act_on_image(h, index).flatten() for h in group.elements])


class FCPathBlock:
    """A factorised FC path: ``C_i`` pixel maps ``[B_i, A_i]`` and ``C_o`` channel maps
    ``[B_o, A_o]``, ``[B_o]`` (bias), all from the stacked stages in four :func:`gram`.

    Where the path's input copies are the group's actions on one image, as the lifted
    images a network's first layer gets (:class:`~ella.nn.Lift`: copy ``h`` is ``h . x``,
    a permutation ``p_h`` of ``x``'s pixels), copy ``h``'s pixel factor is copy 0's
    with rows and columns permuted, ``A_h = A_0[p_h][:, p_h]``: only ``A_0`` is summed
    over the batch, the copies are made once in :meth:`assemble`, and each is marked
    (:func:`~ella.marglik.laplace_internals.mark_permuted`) so that its eigenvalues are
    ``A_0``'s, once confirmed entry for entry. On the default mixer that saves three
    of the four 784 x 784 products and eigendecompositions of the first layer.
    """

    def __init__(self, path: PerChannelFCPath):
        self.path = path
        self.permutations = pixel_permutations(path.group, path.in_size)
        self.copies_permuted = False  # this batch's pixel sums are copy 0's only

    def hook(self) -> Any:
        """Start recording this batch's inputs and outputs; returns the handle to remove."""
        return StageCapture(self.path)

    def outputs(self) -> list[torch.Tensor]:
        """The outputs whose gradients :meth:`output_factor` reads, in its order."""
        return [self.path._capture["stage1"], self.path._capture["out"]]

    def output_factor(
        self, grads: list[torch.Tensor], into: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Per-channel ``sum b b^T`` of both stages for one column of the GGN's root (added
        into ``into``'s running sums, in place, when it is given)."""
        grad_stage1, grad_out = grads  # (Ci, M, Co R), (Co, M, Sout): channel-major
        stage1, out = (None, None) if into is None else into
        # (Ci, CoR, CoR), (Co, So, So): the latter's upper triangle until assembled
        return [gram(grad_stage1, stage1), upper_gram(grad_out, out)]

    def _copies_are_permuted(self, x: torch.Tensor) -> bool:
        """Whether every copy's rows of ``x`` (Ci, M, Sin) are copy 0's, pixels permuted."""
        if self.permutations is None:
            return False
        c = self.path.in_channels
        first = x[:c]
        perms = self.permutations.to(x.device)
        return all(
            torch.equal(x[h * c : (h + 1) * c], first[..., perms[h]]) for h in range(1, len(perms))
        )

    def _all_copies(self, a0: torch.Tensor) -> torch.Tensor:
        """The pixel sums of every copy (G C_in, S, S) from copy 0's (C_in, S, S)."""
        perms = self.permutations.to(a0.device)
        copies = a0[:, perms[:, :, None], perms[:, None, :]]  # (C_in, G, S, S)
        return copies.transpose(0, 1).reshape(-1, *a0.shape[1:])

    def input_sums(self, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """The input factors ``sum a a^T / L`` of the recorded inputs (added into ``into``'s
        running sums of the earlier chunks of a batch, in place, when it is given)."""
        capture = self.path._capture
        x, mixed = capture["x"], capture["mixed"]  # (Ci, M, Sin), (Co, M, Ci R): channel-major
        pixel, channel = (None, None) if into is None else into
        permuted = self._copies_are_permuted(x) and (into is None or self.copies_permuted)
        if pixel is not None and self.copies_permuted and not permuted:
            pixel = self._all_copies(mirror_upper(pixel))  # earlier chunks were copy 0's
        self.copies_permuted = permuted
        rows = x[: self.path.in_channels] if permuted else x
        # (Ci or C_in, Sin, Sin), upper triangle until assembled; (Co, Ci R, Ci R)
        return [upper_gram(rows, pixel), gram(mixed, channel)]

    def assemble(
        self, a_sums: list[torch.Tensor], b_sums: list[torch.Tensor], n_data: int
    ) -> list[list[torch.Tensor]]:
        """The blocks from the summed factors, in laplace-torch's ``Kron`` layout."""
        a_pixel, a_channel = mirror_upper(a_sums[0]) / n_data, a_sums[1] / n_data
        b_pixel, b_channel = b_sums[0], mirror_upper(b_sums[1])
        a_copies = list(self._all_copies(a_pixel) if self.copies_permuted else a_pixel)
        if self.copies_permuted:  # copy h of input channel c is at h C_in + c
            c = self.path.in_channels
            for i in range(c, len(a_copies)):
                mark_permuted(a_copies[i], a_copies[i % c], self.permutations[i // c])
        kfacs = [[bi, ai] for bi, ai in zip(b_pixel, a_copies, strict=True)]
        for bo, ao in zip(b_channel, a_channel, strict=True):
            kfacs += [[bo, ao], [bo]]
        return kfacs


def curvature_blocks(model: nn.Module) -> list[ModuleBlock | FCPathBlock | FusedPathsBlock]:
    """The blocks of ``model`` in ``model.parameters()`` order (checked).

    Raises:
        UnsupportedModuleError: a parameter outside ``nn.Linear``/``nn.Conv2d``, a
            partly frozen module, or parameters in an order the blocks do not follow.
    """
    check_supported(model, stacked=False)
    blocks: list[ModuleBlock | FCPathBlock | FusedPathsBlock] = []
    handled: set[int] = set()  # modules handled by their path's or layer's block
    fused: dict[int, FusedPathsBlock] = {}  # id of a fused path -> its layer's block
    owners: list[int] = []  # id of each block's parameters, in block order

    def trainable_in(module: nn.Module) -> list[int]:
        return [id(p) for p in module.parameters() if p.requires_grad]

    for name, m in model.named_modules():
        if id(m) in handled:
            continue
        # a layer, or a path that runs as a lifted convolution of its own (full GCONV, residual)
        runs_convolution = isinstance(getattr(m, "convolution", None), LiftedConvolution)
        if runs_convolution and id(m) not in fused:
            paths = fusable_paths(m.paths.values() if isinstance(m, RelaxedLayer) else [m])
            keep = [bool(trainable_in(p)) for p in paths]
            if any(keep):
                block = FusedPathsBlock(m, paths, keep)
                fused.update((id(p), block) for p in paths)
        if id(m) in fused:  # the layer's first fused path: one block for all of them
            block = fused[id(m)]
            blocks.append(block)
            for path in block.paths:
                handled.update(id(c) for c in path.modules())
                owners += trainable_in(path)
            continue
        trainable = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if isinstance(m, PerChannelFCPath):
            if trainable_in(m):
                handled.update(id(c) for c in m.modules())
                blocks.append(FCPathBlock(m))
                owners += trainable_in(m)
        elif trainable:
            if isinstance(m, nn.Conv2d) and (m.groups != 1 or isinstance(m.padding, str)):
                raise UnsupportedModuleError(
                    f"{name}: the native KFAC supports Conv2d with groups=1 and integer "
                    f"padding, got groups={m.groups}, padding={m.padding!r}"
                )
            blocks.append(ModuleBlock(m))
            owners += [id(p) for p in trainable]
    if owners != [id(p) for p in model.parameters() if p.requires_grad]:
        raise UnsupportedModuleError(
            "the model's parameters are shared between modules or not in module order; "
            "the native KFAC needs one block per module, in model.parameters() order"
        )
    return blocks
