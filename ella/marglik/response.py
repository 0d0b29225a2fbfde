r"""The weights' Laplace response to a change of their prior precisions.

Around a MAP of the prior precision :math:`\delta_\text{old}`, the log posterior is
quadratic with the GGN :math:`H` of the data (the sum over the ``N`` examples), so the MAP
of a new precision :math:`\delta_\text{new}` is, in one step,

.. math::

    \theta_\text{new} - \mu = (H + \delta_\text{new} I)^{-1}
        (H + \delta_\text{old} I)\,(\theta_\text{old} - \mu),

``mu`` the prior's mean. In a tensor's Kronecker eigenbasis (:math:`H \approx B \otimes A`,
eigenvalues :math:`\lambda_{ij} = b_i a_j`) each coordinate is multiplied by
:math:`(\lambda_{ij} + \delta_\text{old}) / (\lambda_{ij} + \delta_\text{new})`: a direction the
data determine (:math:`\lambda \gg \delta`) keeps its value, one they do not is shrunk (or
grown) by the ratio of the precisions at once. Under gradient steps the same direction
moves by a fraction :math:`\text{lr}\,\delta / N` per step, which at a budget of hundreds
of steps leaves it where the optimiser put it.

Exact for a linear-Gaussian model whose weight and bias blocks do not interact (centred
inputs); for a network it is the linearised Laplace's prediction (MacKay 1992).
"""

from __future__ import annotations

import torch

from ella.choices import HessianStructure
from ella.marglik.evidence import LaplaceEvidence
from ella.marglik.laplace_internals import hessian_scale, parameter_dtype

__all__ = ["laplace_response"]


@torch.no_grad()
def laplace_response(
    evidence: LaplaceEvidence,
    old: torch.Tensor,
    new: torch.Tensor,
    mean: torch.Tensor | None = None,
) -> None:
    """Move the evidence's model in place to the new prior's MAP as the fitted Kronecker
    GGN predicts (module docstring), one Kronecker block at a time: on a network with
    factorised FC paths, each per-channel map of :attr:`LaplaceEvidence.view` is a block,
    and the moved maps are written back into the model's stacked tensors.

    Args:
        evidence: a fitted :class:`~ella.marglik.LaplaceEvidence` with the Kronecker
            Hessian, at the model's current weights.
        old: each prior group's precision before the change, (n_groups,).
        new: each prior group's precision after it, (n_groups,).
        mean: the prior's mean of every trainable parameter of the model, flattened in
            ``model.parameters()`` order (n_params,); ``None``: zero.
    """
    if evidence.structure != HessianStructure.KRON:
        raise ValueError("the Laplace response needs the Kronecker Hessian (hessian='kron')")
    la, prior = evidence.laplace, evidence.prior
    if old.shape != (prior.n_groups,) or new.shape != (prior.n_groups,):
        raise ValueError(
            f"give one old and one new precision per prior group ({prior.n_groups}), got "
            f"shapes {tuple(old.shape)} and {tuple(new.shape)}"
        )
    parameters = [p for p in evidence.view.sync().parameters() if p.requires_grad]
    if len(parameters) != len(la.H.eigenvalues):
        raise ValueError(
            f"{len(parameters)} tensors and {len(la.H.eigenvalues)} Kronecker blocks: the "
            "evidence was fitted on another model; fit it again"
        )
    old, new = prior.expand(old), prior.expand(new)
    mean = None if mean is None else evidence.view.vector(mean)
    scale, dtype = hessian_scale(la), parameter_dtype(la)
    offsets = [0]
    for p in parameters:
        offsets.append(offsets[-1] + p.numel())
    changed = (old != new).tolist()
    blocks = zip(parameters, la.H.eigenvalues, la.H.eigenvectors, strict=True)
    for t, (param, values, vectors) in enumerate(blocks):
        if not changed[t]:
            continue
        centre = None if mean is None else mean[offsets[t] : offsets[t + 1]].view_as(param)
        theta = (param if centre is None else param - centre).to(dtype)
        if len(vectors) == 1:  # a bias or other [B] block
            lam = values[0].clamp_min(0) * scale
            q = vectors[0]
            coords = q.T @ theta.reshape(-1)
            moved = q @ (coords * (lam + old[t]) / (lam + new[t]))
        else:
            lam = torch.outer(values[0], values[1]).clamp_min(0) * scale
            qb, qa = vectors
            coords = qb.T @ theta.reshape(qb.shape[0], -1) @ qa
            moved = qb @ (coords * (lam + old[t]) / (lam + new[t])) @ qa.T
        moved = moved.reshape(param.shape).to(param.dtype)
        param.copy_(moved if centre is None else moved + centre)
    evidence.view.write_back()
