"""ella's own Kronecker-factored GGN: batched factors for every layer ella builds.

A curvature backend for laplace-torch (``KronLaplace(..., backend=NativeGGN)``,
the :class:`laplace.curvature.CurvatureInterface` that AsdlGGN and
CurvlinopsGGN also implement), so the rest of laplace-torch (log marginal
likelihood, posterior) works unchanged. It returns the same factors as
laplace-torch's AsdlGGN (Martens & Grosse, "Optimizing Neural Networks with
Kronecker-factored Approximate Curvature", ICML 2015; KFAC-expand for shared
weights, Eschenhagen et al., NeurIPS 2023), computed differently:

* an ``nn.Linear``/``nn.Conv2d`` (heads, CONV and GCONV paths, user layers) is
  one block whose input and output are caught by forward hooks; a CONV or
  GCONV filter shared over group copies and positions sees them as extra rows
  ("expand"), exactly as ASDL sees the folded batch;
* a factorised FC path, as the evidence sees it
  (:class:`~ella.marglik.per_channel.PerChannelFCPath`), is handled as a whole: its two
  stages are two ``bmm`` over stacked weights, and the factors of all its
  ``2 C`` per-channel modules come from four batched products (no module is
  called or hooked one by one), which is what makes the fit cheap;
* the GGN's square root ``J^T L^{1/2}`` enters one column at a time (``K - 1``
  backward passes for the exact GGN of ``K`` classes, the rank of the softmax
  Hessian, :func:`softmax_hessian_root`; each column's output
  gradients are reduced to ``b b^T`` sums before the next, so memory holds one
  column's gradients) or as one Monte-Carlo column (``stochastic=True``: a
  label sampled from the model's predictive).

Per batch and module with input rows ``a`` (``L`` positions) and output
gradient rows ``b``, summed over the batch, the shared rows and the GGN's
columns: weight ``[B, A / N]`` with ``B = sum b b^T`` and ``A = sum a a^T / L``;
bias ``[B]`` (laplace-torch's ``AsdlGGN.kron`` layout, ``N`` the data-set size).
Factors are accumulated as sums over batches; no per-example Jacobian of the
network is ever formed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from laplace.curvature import CurvatureInterface
from laplace.utils.matrix import Kron
from torch import nn

from ella.choices import GConvMode, Likelihood
from ella.errors import EvidenceError
from ella.groups import Group
from ella.marglik.laplace_internals import mark_permuted, own_copies
from ella.marglik.per_channel import PerChannelFCPath
from ella.marglik.support import UnsupportedModuleError, check_supported
from ella.nn.paths import GConvPath, ResidualConvPath, adds_filters, fusable_paths
from ella.nn.relaxed import RelaxedLayer

__all__ = ["NativeGGN", "curvature_blocks", "stratified_root"]


# ---------------------------------------------------------------- blocks
def gram(rows: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_n conj(r_n) r_n^T`` for each of ``K`` stacks of rows: (K, N, d) -> (K, d, d),
    added in place into ``into`` (K, d, d) when it is given (and returned).

    One ``bmm`` over a contiguous copy of the rows. ``einsum`` on the same operands
    (e.g. ``"mkx,mky->kxy"`` on activations laid out (N, K, d)) hands ``bmm`` strided
    batches that it copies matrix by matrix, which is slower on the default mixer's FC
    factors and more so on the complex cross-spectra of :func:`circular_patch_gram`.
    Adding into a running sum with ``baddbmm_`` saves writing each product and reading
    it back for the sum.
    """
    rows = rows.contiguous()
    if into is None:
        return torch.bmm(rows.conj().transpose(1, 2), rows)
    return into.baddbmm_(rows.conj().transpose(1, 2), rows)


#: from this size on, the FC paths' pixel factors are summed as their upper block triangle
#: (:func:`upper_gram`) and completed once per batch (:func:`mirror_upper`)
UPPER_GRAM_MIN_SIZE = 512


def _upper_blocks(d: int, depth: int = 2) -> tuple[list[slice], list[tuple[slice, slice]]]:
    """A ``d x d`` matrix halved ``depth`` times: the diagonal blocks' ranges, and the
    (rows, columns) ranges of the off-diagonal blocks above the diagonal."""
    diagonal, upper = [slice(0, d)], []
    for _ in range(depth):
        halves = []
        for block in diagonal:
            mid = (block.start + block.stop) // 2
            top, bottom = slice(block.start, mid), slice(mid, block.stop)
            upper.append((top, bottom))
            halves += [top, bottom]
        diagonal = halves
    return diagonal, upper


def upper_gram(rows: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`gram` of real rows (K, N, d), from ``d >= UPPER_GRAM_MIN_SIZE`` on only its
    blocks on and above the diagonal: 10 of 16 blocks of a quarter of ``d`` each, the
    blocks below left as they are (zero where ``into`` is not given) until
    :func:`mirror_upper` completes the sum. The products' FLOPs fall to 5/8.
    """
    d = rows.shape[-1]
    if d < UPPER_GRAM_MIN_SIZE:
        return gram(rows, into)
    rows = rows.contiguous()
    if into is None:
        into = rows.new_zeros(rows.shape[0], d, d)
    diagonal, upper = _upper_blocks(d)
    for r, c in [(b, b) for b in diagonal] + upper:
        into[:, r, c].baddbmm_(rows[..., r].transpose(1, 2), rows[..., c])
    return into


def mirror_upper(total: torch.Tensor) -> torch.Tensor:
    """A sum of :func:`upper_gram` products (K, d, d) made whole, in place: each block
    below the diagonal becomes the transpose of its mirror image above it."""
    d = total.shape[-1]
    if d >= UPPER_GRAM_MIN_SIZE:
        for r, c in _upper_blocks(d)[1]:
            total[:, c, r] = total[:, r, c].transpose(1, 2)
    return total


def _outer_sum(rows: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``rows @ rows.T`` for rows (d, n): (d, d), added in place into ``into`` if given."""
    if into is None:
        return rows @ rows.T
    return into.addmm_(rows, rows.T)


def _channel_outer_sum(grad: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """``sum g g^T`` over examples and positions of a conv output gradient: (M, C, *) ->
    (C, C), added in place into ``into`` if given.

    One small product per example, summed, reads the gradient where it lies; gathering
    it channel-major first, ``(C, M H W)``, for one product would copy it.
    """
    per_example = grad.reshape(grad.shape[0], grad.shape[1], -1)  # (M, C, P)
    total = torch.bmm(per_example, per_example.transpose(1, 2)).sum(0)
    return total if into is None else into.add_(total)


def _patches(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """The patches ``conv`` multiplies, (M, L, C k_h k_w), padded by its own padding mode."""
    if conv.padding_mode != "zeros":
        x = F.pad(x, conv._reversed_padding_repeated_twice, mode=conv.padding_mode)
        padding = 0
    else:
        padding = conv.padding
    return F.unfold(x, conv.kernel_size, conv.dilation, padding, conv.stride).transpose(1, 2)


def _is_circular_same(conv: nn.Conv2d) -> bool:
    """A stride-1, undilated conv with circular "same" padding (every ella path's conv)."""
    kh, kw = conv.kernel_size
    return (
        conv.padding_mode == "circular"
        and tuple(conv.stride) == (1, 1)
        and tuple(conv.dilation) == (1, 1)
        and tuple(conv.padding) == (kh // 2, kw // 2)
        and kh % 2 == 1
        and kw % 2 == 1
    )


def circular_patch_gram(x: torch.Tensor, kernel_size: tuple[int, int]) -> torch.Tensor:
    """``sum_{m,p} a_{m,p} a_{m,p}^T`` over the circular "same" patches ``a`` of ``x``
    without unfolding them: ``(C k_h k_w, C k_h k_w)``, in ``F.unfold``'s (c, i, j) order.

    With circular padding and stride 1 the patches cover every position, so the
    entry for kernel offsets ``(i, j)`` and ``(i', j')`` depends only on their
    difference: ``A[(c,i,j),(c',i',j')] = R_{cc'}((i'-i) mod H, (j'-j) mod W)`` with
    the circular cross-correlation ``R_{cc'}(d) = sum_{m,q} x[m,c,q] x[m,c',q+d]``.
    By the cross-correlation theorem ``R_{cc'} = IDFT(sum_m conj(X_{mc}) X_{mc'})``
    with ``X = DFT_2(x)``: one batched ``C x M`` by ``M x C`` complex product per
    frequency, about ``2 C^2 M H W`` multiply-adds against ``(9 C)^2 M H W`` for the
    gram of the unfolded 3x3 patches, and no unfolded copy of the input.

    Args:
        x: input (M, C, H, W) of the convolution (before padding).
        kernel_size: ``(k_h, k_w)``, both odd.
    """
    m, c, h, w = x.shape
    kh, kw = kernel_size
    spectrum = torch.fft.rfft2(x).flatten(2).permute(2, 0, 1)  # (F, M, C), F = H (W // 2 + 1)
    cross = gram(spectrum).permute(1, 2, 0)  # (C, C', F): sum_m conj(X_mc) X_mc'
    r = torch.fft.irfft2(cross.reshape(c, c, h, -1), s=(h, w))  # (C, C', H, W): R_{cc'}(d)
    i, j = torch.arange(kh, device=x.device), torch.arange(kw, device=x.device)
    di = ((i[None, :] - i[:, None]) % h)[:, None, :, None]  # [i, ., i', .] -> i' - i
    dj = ((j[None, :] - j[:, None]) % w)[None, :, None, :]  # [., j, ., j'] -> j' - j
    entries = r[:, :, di, dj]  # (C, C', k_h, k_w, k_h', k_w') as [c, c', i, j, i', j']
    return entries.permute(0, 2, 3, 1, 4, 5).reshape(c * kh * kw, c * kh * kw)


def input_factor(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``sum a a^T`` over the rows ``a`` that ``module``'s weight multiplies in
    ``module(x)``, and the number ``L`` of rows per example.

    The rows are a Linear's inputs (``L = 1``; extra leading axes count as examples),
    or a conv's patches at its ``L`` output positions, with the module's own padding
    mode (circular padding wraps; the stock backends unfold with zero padding
    whatever the mode).
    """
    if isinstance(module, nn.Conv2d):
        if _is_circular_same(module):
            return circular_patch_gram(x, module.kernel_size), x.shape[-2] * x.shape[-1]
        patches = _patches(module, x)  # (M, L, d_in)
        rows = patches.reshape(-1, patches.shape[-1])
        return rows.T @ rows, patches.shape[1]
    rows = x.reshape(-1, x.shape[-1])
    return rows.T @ rows, 1


class _StageCapture:
    """Sets a :class:`~ella.marglik.per_channel.PerChannelFCPath`'s ``_capture`` to a fresh
    dict that its forward fills with the stages' tensors; :meth:`remove` ends it."""

    def __init__(self, path: PerChannelFCPath):
        self.path = path
        path._capture = {}

    def remove(self) -> None:
        self.path._capture = None


class _ModuleBlock:
    """An ``nn.Linear`` or ``nn.Conv2d``: one weight block ``[B, A]`` and a bias block ``[B]``."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.inputs: torch.Tensor | None = None
        self.output: torch.Tensor | None = None

    def hook(self) -> Any:
        def record(module, inputs, output):
            self.inputs, self.output = inputs[0], output

        return self.module.register_forward_hook(record)

    def outputs(self) -> list[torch.Tensor]:
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
            return [_channel_outer_sum(g, total)]
        return [_outer_sum(g.reshape(-1, g.shape[-1]).T, total)]  # rows (d_out, M)

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


class _ConvPathsBlock:
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
        def record(module, inputs, output):
            self.z, self.out = inputs[0], output

        return self.owner.convolution.register_forward_hook(record)

    def outputs(self) -> list[torch.Tensor]:
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
            if isinstance(path, GConvPath):  # group copies are extra rows
                m, _, h, w = g.shape
                g = g.reshape(m * path.group.order, path.out_channels, h, w)
            elif isinstance(path, ResidualConvPath):  # copies as rows, weighted by E[h, :]
                m, _, h, w = g.shape
                g = g.reshape(m, path.group.order, 1, path.out_channels, h, w)
                g = g * path.basis[None, :, :, None, None, None]
                g = g.reshape(m * path.group.order, -1, h, w)
            factors.append(_channel_outer_sum(g, None if into is None else into[len(factors)]))
        return factors

    def input_sums(self, into: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        z = self.z  # (M, G, C_in, H, W)
        m, g, c, h, w = z.shape
        a0, length = input_factor(self.paths[0].conv, z.reshape(m, g * c, h, w))
        a0 = a0 / length
        sums = [
            _permuted_sum(a0, path.gather) if isinstance(path, GConvPath | ResidualConvPath) else a0
            for path, keep in zip(self.paths, self.trainable, strict=True)
            if keep
        ]
        return _added(sums, into)

    def assemble(
        self, a_sums: list[torch.Tensor], b_sums: list[torch.Tensor], n_data: int
    ) -> list[list[torch.Tensor]]:
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


class _FCPathBlock:
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
        return _StageCapture(self.path)

    def outputs(self) -> list[torch.Tensor]:
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


def curvature_blocks(model: nn.Module) -> list[_ModuleBlock | _FCPathBlock | _ConvPathsBlock]:
    """The blocks of ``model`` in ``model.parameters()`` order (checked).

    Raises:
        UnsupportedModuleError: a parameter outside ``nn.Linear``/``nn.Conv2d``, a
            partly frozen module, or parameters in an order the blocks do not follow.
    """
    check_supported(model, stacked=False)
    blocks: list[_ModuleBlock | _FCPathBlock | _ConvPathsBlock] = []
    handled: set[int] = set()  # modules handled by their path's or layer's block
    fused: dict[int, _ConvPathsBlock] = {}  # id of a fused path -> its layer's block
    owners: list[int] = []  # id of each block's parameters, in block order

    def trainable_in(module: nn.Module) -> list[int]:
        return [id(p) for p in module.parameters() if p.requires_grad]

    for name, m in model.named_modules():
        if id(m) in handled:
            continue
        lone_gconv = (
            isinstance(m, ResidualConvPath)
            or (isinstance(m, GConvPath) and m.mode == GConvMode.FULL)
        ) and id(m) not in fused
        if isinstance(m, RelaxedLayer) or lone_gconv:
            paths = fusable_paths(m.paths.values() if isinstance(m, RelaxedLayer) else [m])
            keep = [bool(trainable_in(p)) for p in paths]
            if any(keep):
                block = _ConvPathsBlock(m, paths, keep)
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
                blocks.append(_FCPathBlock(m))
                owners += trainable_in(m)
        elif trainable:
            if isinstance(m, nn.Conv2d) and (m.groups != 1 or isinstance(m.padding, str)):
                raise UnsupportedModuleError(
                    f"{name}: the native KFAC supports Conv2d with groups=1 and integer "
                    f"padding, got groups={m.groups}, padding={m.padding!r}"
                )
            blocks.append(_ModuleBlock(m))
            owners += [id(p) for p in trainable]
    if owners != [id(p) for p in model.parameters() if p.requires_grad]:
        raise UnsupportedModuleError(
            "the model's parameters are shared between modules or not in module order; "
            "the native KFAC needs one block per module, in model.parameters() order"
        )
    return blocks


# ---------------------------------------------------------------- the backend
@contextmanager
def _weights_out_of_graph(model: nn.Module) -> Iterator[None]:
    """``requires_grad=False`` on ``model``'s trainable parameters for the block, restored
    after it (parameters that were frozen stay frozen)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def softmax_hessian_root(p: torch.Tensor) -> torch.Tensor:
    """``K - 1`` columns ``v`` per example with ``sum_v v v^T = diag(p) - p p^T``, the
    Hessian of the cross-entropy in the logits: (K - 1, M, K) for probabilities (M, K).

    The ``K`` columns ``sqrt(p_c) (e_c - p)``, i.e. ``L = (I - p 1^T) diag(sqrt p)``,
    square to the Hessian but are linearly dependent: ``L sqrt(p) = 0``. Rotating
    them by an orthogonal ``Q`` whose last column is ``sqrt(p)`` (``|sqrt p| = 1``)
    leaves ``L Q Q^T L^T`` unchanged and makes the last column zero, so the first
    ``K - 1`` columns of ``L Q`` give the same GGN with one backward pass fewer per
    batch. ``Q`` is the Householder reflection ``I - 2 u u^T / u^T u`` with
    ``u = sqrt(p) + e_K``, which maps ``sqrt(p)`` to ``-e_K`` (``u^T u >= 2``: no
    cancellation, however confident the prediction).
    """
    m, k = p.shape
    if k == 1:  # one class: the Hessian is zero; one zero column keeps the factors' shapes
        return torch.zeros(1, m, 1, dtype=p.dtype, device=p.device)
    root = p.sqrt()
    lower = (torch.eye(k, dtype=p.dtype, device=p.device) - p[:, :, None]) * root[:, None, :]
    u = root.clone()
    u[:, -1] += 1.0
    # L Q e_j for j < K, with Q e_j = e_j - 2 u u_j / (u^T u)
    lu = lower @ u[:, :, None]  # (M, K, 1)
    scale = 2.0 / (u * u).sum(-1)  # (M,)
    columns = lower[:, :, :-1] - scale[:, None, None] * lu * u[:, None, :-1]  # (M, K, K-1)
    return columns.permute(2, 0, 1)


def stratified_root(
    p: torch.Tensor,
    generator: torch.Generator | None = None,
    others: torch.Tensor | None = None,
) -> torch.Tensor:
    """Two columns ``v`` per example whose ``sum_v v v^T`` is, in expectation over one
    sampled label, the cross-entropy's Hessian ``diag(p) - p p^T``: (2, M, K) for
    probabilities (M, K).

    The Hessian is ``sum_c p_c (e_c - p)(e_c - p)^T``. The MC GGN samples one class
    ``c ~ p`` and keeps ``(e_c - p)(e_c - p)^T``; on a confident prediction it almost
    always draws the predicted class, whose column is small, and rarely another, whose
    column is large, so its estimate is heavy-tailed. This estimator splits the sum into two
    strata (stratified sampling): the most probable class ``c*`` exactly,
    ``sqrt(p_c*) (e_c* - p)``, and one class ``c'`` drawn from the others with probability
    ``p_c' / (1 - p_c*)``, weighted by ``sqrt(1 - p_c*)``. Its expectation is the Hessian
    term for term, and its second column is zero where ``p_c* = 1``.

    Args:
        p: the predictive probabilities (M, K), each row summing to 1.
        generator: for the sampled labels (``None``: torch's global generator).
        others: (M,) the second column's classes instead of sampling them (for tests:
            enumerating them gives the expectation exactly).
    """
    top = p.argmax(-1)  # (M,)
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    top_mass = p.gather(-1, top[:, None]).squeeze(-1)  # (M,)
    rest = p.scatter(-1, top[:, None], 0.0)  # the other classes' probabilities
    rest_mass = (1.0 - top_mass).clamp(min=0.0)
    if others is None and p.shape[-1] == 1:
        others = top  # one class: the second column has weight 0
    elif others is None:
        # a row without mass outside its top class gets weight 0; sample it uniformly
        free = rest.detach()
        empty = free.sum(-1, keepdim=True) <= 0
        weights = torch.where(empty, torch.ones_like(free).scatter(-1, top[:, None], 0.0), free)
        others = torch.multinomial(weights, 1, generator=generator).squeeze(-1)
    first = top_mass.sqrt()[:, None] * (eye[top] - p)
    second = rest_mass.sqrt()[:, None] * (eye[others] - p)
    return torch.stack([first, second])


class NativeGGN(CurvatureInterface):
    """laplace-torch curvature backend with ella's batched Kronecker factors (``kron`` only).

    Args:
        model: the network (``nn.Linear``/``nn.Conv2d`` parameters, ella's paths).
        likelihood: ``"classification"`` or ``"regression"``.
        stochastic: one Monte-Carlo column of the GGN's square root per example
            (a label drawn from the model's predictive, ``e_y - p``; for
            regression ``eps ~ N(0, I)``) instead of the exact ``K`` columns.
        stratified: the two columns of :func:`stratified_root` per example
            (classification only) instead of the exact ``K`` columns.
        chunk_size: at most this many examples per forward/backward inside a batch, in
            chunks of equal size (the factors are sums, so the chunking changes time and
            memory, not the result). The default cuts an evidence batch of
            ``TrainConfig.marglik_batch_size`` images into three: on the default mixer
            the fastest of the chunkings measured, with the fit's peak memory within 1.5
            times a training epoch's.
        last_layer: not supported (the whole network).
        subnetwork_indices: not supported (the whole network).
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: str,
        last_layer: bool = False,
        subnetwork_indices: torch.LongTensor | None = None,
        dict_key_x: str = "input_ids",
        dict_key_y: str = "labels",
        stochastic: bool = False,
        stratified: bool = False,
        chunk_size: int = 170,
    ):
        if last_layer or subnetwork_indices is not None:
            raise ValueError("the native backend computes the whole network's curvature only")
        if stratified and (stochastic or likelihood != Likelihood.CLASSIFICATION):
            raise ValueError("the stratified GGN is a classification GGN, not also MC")
        super().__init__(model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y)
        self.stochastic = stochastic
        self.stratified = stratified
        self.chunk_size = int(chunk_size)
        self.blocks = curvature_blocks(model)

    def _columns(self, f: torch.Tensor) -> torch.Tensor:
        """Columns ``v`` (V, M, K) of the loss Hessian's square root in function space."""
        # Monte-Carlo samples are drawn as ASDL draws them (the same torch.distributions
        # calls on the global generator), so a seeded fit samples the same labels.
        if not bool(torch.isfinite(f).all()):  # refused here, before a sampler fails on NaN
            raise EvidenceError(
                "the network's outputs are not finite at these weights, so the GGN cannot be "
                "computed. Training probably diverged: try a smaller --lr"
            )
        if self.likelihood == Likelihood.REGRESSION:
            if self.stochastic:
                f = f.detach()
                return (torch.distributions.Normal(f, 1.0).sample() - f)[None]
            return torch.eye(f.shape[-1], dtype=f.dtype, device=f.device)[:, None, :].expand(
                -1, f.shape[0], -1
            )
        p = f.detach().softmax(-1)
        if self.stratified:
            return stratified_root(p)
        if self.stochastic:
            y = torch.distributions.Categorical(p).sample()
            return (F.one_hot(y, p.shape[-1]).to(p.dtype) - p)[None]
        return softmax_hessian_root(p)

    def _output_factors(
        self,
        f: torch.Tensor,
        outputs: list[torch.Tensor],
        columns: torch.Tensor,
        totals: list[list[torch.Tensor]] | None = None,
    ) -> list[list[torch.Tensor]]:
        """Per block, ``sum b b^T`` with ``b = J_out^T v`` summed over the columns ``v``,
        added in place into the running ``totals`` of earlier chunks when given; one
        backward pass per column, each column's gradients reduced before the next."""
        for i, v in enumerate(columns):
            grads = torch.autograd.grad(
                f, outputs, grad_outputs=v, retain_graph=i < len(columns) - 1
            )
            with torch.no_grad():
                per_block, start = [], 0
                for j, block in enumerate(self.blocks):
                    n = len(block.outputs())
                    into = None if totals is None else totals[j]
                    per_block.append(block.output_factor(list(grads[start : start + n]), into))
                    start += n
            # the first column's sums become the running totals the next columns add into
            totals = own_copies(per_block) if totals is None else per_block
        return totals

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The network's outputs on ``x`` and the blocks' captured outputs, with a graph
        that runs from the input only.

        The factors need gradients with respect to the captured outputs, never the
        weights', so the weights are taken out of the graph for the forward and the
        input put in: the weight-side operations (stacking the FC paths' per-channel
        weights, building the lifted filters) are not recorded, which makes the forward
        cheaper. Where a captured output does not depend on the input differentiably (an
        integer input, a ``detach`` inside the model), the forward is run again with the
        weights in the graph.
        """
        if x.is_floating_point() or x.is_complex():
            with _weights_out_of_graph(self.model):
                f = self.model(x.detach().requires_grad_())
            outputs = self._captured_outputs()
            if f.requires_grad and all(t.requires_grad for t in outputs):
                return f, outputs
        f = self.model(x)
        return f, self._captured_outputs()

    def _captured_outputs(self) -> list[torch.Tensor]:
        """The outputs the blocks captured in the last forward, block after block."""
        return [t for block in self.blocks for t in block.outputs()]

    def _chunk_sums(
        self,
        x: torch.Tensor,
        a_totals: list[list[torch.Tensor]] | None = None,
        b_totals: list[list[torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        """Outputs, and per block the input and output factor sums of one chunk, added in
        place into the earlier chunks' ``a_totals`` and ``b_totals`` when given."""
        handles = [block.hook() for block in self.blocks]
        try:
            with torch.enable_grad():
                f, outputs = self._forward(x)
                b_sums = self._output_factors(f, outputs, self._columns(f), b_totals)
            with torch.no_grad():
                a_sums = [
                    block.input_sums(None if a_totals is None else a_totals[j])
                    for j, block in enumerate(self.blocks)
                ]
        finally:
            for handle in handles:
                handle.remove()
        if a_totals is None:  # the first chunk's sums become the running totals
            a_sums = own_copies(a_sums)
        return f.detach(), a_sums, b_sums

    def kron(
        self, x: torch.Tensor, y: torch.Tensor, N: int, **kwargs: Any
    ) -> tuple[torch.Tensor, Kron]:
        """Loss and Kronecker factors of one batch (``AsdlGGN.kron``'s layout and scaling),
        computed over equal chunks of at most ``chunk_size`` examples (same sums, less
        memory), each chunk's sums added in place into the batch's."""
        a_total = b_total = None
        outputs = []
        for xc in torch.tensor_split(x, max(1, -(-len(x) // self.chunk_size))):
            f, a_total, b_total = self._chunk_sums(xc, a_total, b_total)
            outputs.append(f)
        kfacs = []
        for block, a, b in zip(self.blocks, a_total, b_total, strict=True):
            kfacs += block.assemble(a, b, N)
        target = y if self.likelihood == Likelihood.REGRESSION else y.view(-1)
        loss = self.lossfunc(torch.cat(outputs), target)
        return self.factor * loss, Kron(kfacs)

    def full(self, x, y, **kwargs):
        """Refused: the native backend gives Kronecker factors only (:meth:`kron`)."""
        raise ValueError("the native backend gives Kronecker factors only; use --hessian kron")

    def diag(self, x, y, **kwargs):
        """Refused: the native backend gives Kronecker factors only (:meth:`kron`)."""
        raise ValueError("the native backend gives Kronecker factors only; use --hessian kron")
