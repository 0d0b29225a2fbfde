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
network is ever formed. The blocks are :mod:`ella.marglik.kfac_blocks`', their products
:mod:`ella.marglik.kfac_products`'.
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

from ella.choices import Likelihood
from ella.errors import EvidenceError
from ella.marglik.kfac_blocks import curvature_blocks
from ella.marglik.laplace_internals import own_copies
from ella.runtime.timing import section

__all__ = ["NativeGGN", "softmax_hessian_root", "stratified_root"]


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
    r"""A root of the cross-entropy's Hessian in the logits, ``K - 1`` columns per example.

    (K - 1, M, K) columns :math:`v` for probabilities (M, K), with

    .. math::

        \sum_v v v^\top = \operatorname{diag}(p) - p p^\top.

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

    @section("output factors (backward passes, products)")
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

    @section("forward")
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

    @section("native factors")
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
        raise ValueError("the native backend gives Kronecker factors only; use 'kron'")

    def diag(self, x, y, **kwargs):
        """Refused: the native backend gives Kronecker factors only (:meth:`kron`)."""
        raise ValueError("the native backend gives Kronecker factors only; use 'kron'")
