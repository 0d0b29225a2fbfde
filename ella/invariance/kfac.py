"""Differentiable Kronecker factors of the GGN for models that average over input transformations.

The stock KFAC backends (ASDL, Curvlinops) compute their factors from
detached activations, so the log evidence they give has no gradient with
respect to anything that changes the *inputs*, such as the extents ``eta``
of learned invariance. Here the factors are computed with plain autograd,
``create_graph=True``, for ``nn.Linear`` and ``nn.Conv2d`` modules called as
``module(x)``, so ``d log p(D | eta) / d eta`` flows through them (Immer,
van der Ouderaa, Rätsch, Fortuin & van der Wilk, "Invariance Learning in Deep
Neural Networks with Differentiable Laplace Approximations", NeurIPS 2022,
Sec. 3).

**Averaging over transformations (KFAC-reduce).** The invariant predictor is
``f(x) = 1/S sum_s g(T_s x)``. Its Jacobian for a linear layer is
``sum_s b_s a_s^T``, with ``a_s`` the layer input for sample ``s`` and ``b_s``
the gradient at its output (which includes the ``1/S``). We approximate it by
``(sum_s b_s)(1/S sum_s a_s)^T``, exact when the copies agree (``eta = 0``);
this is KFAC-reduce of Eschenhagen et al. (NeurIPS 2023) for the sample axis.
All other shared axes (a folded group axis, conv positions) use KFAC-expand,
as the stock backends do.

**Scaling** follows ASDL as laplace-torch uses it, so that with one sample and
the whole data set the blocks equal the stock ones (a test checks this): for
a module with input rows ``a`` and output-gradient rows ``b`` (one column of
the GGN's square root at a time),

* weight block ``G (x) A`` with ``G = sum b b^T`` over data, shared positions
  and GGN columns and ``A = sum a a^T / (n L)`` (``L`` = number of conv output
  positions, 1 for ``nn.Linear``);
* bias block ``G``.

When the factors come from ``n`` of ``N`` training points, ``G`` is scaled by
``N / n``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ella.choices import GGN
from ella.marglik.native import stratified_root
from ella.marglik.support import check_supported
from ella.nn.paths import per_module_calls

__all__ = ["KronBlock", "kron_factors", "module_blocks"]


@dataclass
class KronBlock:
    """The Kronecker factors of one module: ``weight ~ G (x) A``, ``bias ~ G``.

    Attributes:
        name: module name in the model.
        G: (d_out, d_out) output-gradient factor.
        A: (d_in, d_in) input factor (``d_in = C_in k_h k_w`` for a conv).
        has_bias: whether the module has a bias block.
    """

    name: str
    G: torch.Tensor
    A: torch.Tensor
    has_bias: bool


def module_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The parameterised ``nn.Linear``/``nn.Conv2d`` modules, in ``model.parameters()`` order.

    Raises:
        UnsupportedModuleError: if another module type holds parameters.
        ValueError: for conv settings these factors do not cover (groups, string padding).
    """
    check_supported(model, stacked=False)
    modules = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, (nn.Linear, nn.Conv2d)) and any(p.requires_grad for p in m.parameters())
    ]
    order = [id(p) for p in model.parameters() if p.requires_grad]
    flat = [id(p) for _, m in modules for p in m.parameters() if p.requires_grad]
    if order != flat:  # pragma: no cover - shared or reordered parameters
        raise ValueError("parameters are shared between modules or not in module order")
    for name, m in modules:
        if isinstance(m, nn.Conv2d) and (m.groups != 1 or isinstance(m.padding, str)):
            raise ValueError(
                f"{name}: differentiable KFAC supports Conv2d with groups=1 and integer "
                f"padding, got groups={m.groups}, padding={m.padding!r}"
            )
        if not m.weight.requires_grad or (m.bias is not None and not m.bias.requires_grad):
            raise ValueError(f"{name}: freeze whole modules, not only weight or bias")
    return modules


def _input_rows(module: nn.Module, x: torch.Tensor, n: int, s: int) -> tuple[torch.Tensor, int]:
    """Layer inputs as (n, S, R, d_in) with ``R`` shared positions, and ``L``."""
    if isinstance(module, nn.Linear):
        return x.reshape(n, s, -1, x.shape[-1]), 1
    if module.padding_mode != "zeros":
        x = F.pad(x, module._reversed_padding_repeated_twice, mode=module.padding_mode)
        padding = 0
    else:
        padding = module.padding
    cols = F.unfold(x, module.kernel_size, module.dilation, padding, module.stride)  # (M, D, L)
    length = cols.shape[-1]
    cols = cols.reshape(n, s, -1, cols.shape[1], length).transpose(-1, -2)  # (n, S, k, L, D)
    return cols.reshape(n, s, -1, cols.shape[-1]), length


def _output_rows(module: nn.Module, g: torch.Tensor, n: int, s: int) -> torch.Tensor:
    """Output gradients as (n, S, R, d_out)."""
    if isinstance(module, nn.Conv2d):
        g = g.flatten(2).transpose(1, 2)  # (M, L, C_out)
    return g.reshape(n, s, -1, g.shape[-1])


def kron_factors(
    model: nn.Module,
    forward: Callable[[], torch.Tensor],
    n_samples: int,
    ggn: str = "exact",
    generator: torch.Generator | None = None,
    create_graph: bool = True,
    modules: list[tuple[str, nn.Module]] | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Unscaled Kronecker sums of one batch, differentiable in whatever ``forward`` depends on.

    Args:
        model: the network whose ``nn.Linear``/``nn.Conv2d`` modules are hooked.
        forward: runs the predictor on the batch and returns averaged logits
            (n, K); inside, ``model`` must be called once on the (n S, ...)
            transformed inputs, ordered image-major (all samples of image 0
            first), and every module must see rows ordered the same way.
        n_samples: ``S``, transformed copies per image.
        ggn: ``"exact"`` (K backward passes, ``diag(p) - p p^T``), ``"mc"``
            (one sampled class, ``(e_y - p)(e_y - p)^T`` in expectation) or
            ``"stratified"`` (two passes, :func:`ella.marglik.native.stratified_root`).
        generator: random generator for the sampled classes.
        create_graph: keep the graph for gradients of the factors.
        modules: ``module_blocks(model)``, when the caller has it already.

    Returns:
        ``(logits, A_sums, G_sums)``: logits (n, K), per module
        ``sum a a^T / L`` and ``sum b b^T`` over this batch (not yet divided by
        the number of data points), in :func:`module_blocks` order.
    """
    modules = module_blocks(model) if modules is None else modules
    records: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(module, inputs, output):
        records[id(module)] = (inputs[0], output)

    handles = [m.register_forward_hook(hook) for _, m in modules]
    try:
        with per_module_calls(model):  # each path calls its own modules
            logits = forward()
    finally:
        for h in handles:
            h.remove()
    missing = [name for name, m in modules if id(m) not in records]
    if missing:
        raise ValueError(f"modules not called during the forward pass: {missing}")
    n = logits.shape[0]
    probs = logits.softmax(-1)
    ggn = GGN.parse(ggn, "GGN type")
    if ggn == GGN.EXACT:
        eye = torch.eye(probs.shape[-1], dtype=probs.dtype, device=probs.device)
        columns = [probs[:, c : c + 1].sqrt() * (eye[c] - probs) for c in range(probs.shape[-1])]
    elif ggn == GGN.STRATIFIED:
        columns = list(stratified_root(probs, generator))
    else:  # mc
        y = torch.multinomial(probs.detach(), 1, generator=generator).squeeze(1)
        columns = [F.one_hot(y, probs.shape[-1]).to(probs.dtype) - probs]

    a_sums = []
    for _, m in modules:
        rows, length = _input_rows(m, records[id(m)][0], n, n_samples)
        mean = rows.mean(1).reshape(-1, rows.shape[-1])  # reduce over samples
        a_sums.append(mean.T @ mean / length)
    outputs = [records[id(m)][1] for _, m in modules]
    g_sums = [0.0] * len(modules)
    for v in columns:
        grads = torch.autograd.grad(
            logits, outputs, grad_outputs=v, retain_graph=True, create_graph=create_graph
        )
        for i, ((_, m), g) in enumerate(zip(modules, grads, strict=True)):
            b = _output_rows(m, g, n, n_samples).sum(1)  # reduce over samples
            b = b.reshape(-1, b.shape[-1])
            g_sums[i] = g_sums[i] + b.T @ b
    return logits, a_sums, g_sums
