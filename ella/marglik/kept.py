"""The evidence of a network with some of its parameter tensors removed.

A Kronecker-factored Laplace evidence separates into one Occam factor per parameter tensor
(the GGN is block-diagonal over tensors). Removing a tensor (its weights held at zero, its
prior group gone) then removes its two terms and leaves the others:
:func:`tensor_terms` gives them per tensor, :func:`kept_log_evidence` the evidence of what
is left, each kept group's precision at its optimum. Model selection by the evidence
(:func:`ella.selection.select`) compares such networks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ella.marglik.evidence import LaplaceEvidence

__all__ = ["kept_log_evidence", "tensor_terms"]


def tensor_terms(
    evidence: LaplaceEvidence, log_prior_precision: torch.Tensor
) -> list[dict[str, float]]:
    """Per parameter tensor ``t`` of a Kronecker-factored evidence, its two Occam terms.

    Args:
        evidence: a fitted :class:`~ella.marglik.LaplaceEvidence` (Kronecker GGN).
        log_prior_precision: ``(n_groups,)`` log precisions of ``evidence.prior``'s groups.

    Returns:
        One dict per tensor, in ``evidence.prior``'s order: ``"occam"``,
        ``1/2 sum_i log(1 + h lambda_i / delta_t)`` over the eigenvalues of its GGN block,
        and ``"scatter"``, ``1/2 delta_t ||theta_t - mu_t||^2``.
    """
    la = evidence.laplace
    delta = evidence.prior.expand(log_prior_precision.detach().exp()).tolist()
    sizes = [int(n) for n in evidence.prior.numels]
    with torch.no_grad():
        d = (la.mean - la.prior_mean).detach()
        parts = zip(torch.split(d, sizes), evidence.block_eigenvalues(), delta, strict=True)
        return [
            {
                "occam": 0.5 * float(torch.log1p(lam / delta_t).sum()),
                "scatter": 0.5 * delta_t * float(d_t @ d_t),
            }
            for d_t, lam, delta_t in parts
        ]


def kept_log_evidence(
    evidence: LaplaceEvidence, dropped: Sequence[bool], log_prior: torch.Tensor | None = None
) -> float:
    """The Laplace log evidence of the network without the ``dropped`` tensors.

    The evidence is taken at the fitted weights, with each group's prior precision at its
    optimum (:meth:`~ella.marglik.LaplaceEvidence.optimal_log_prior`; the groups
    separate): ``log p(D | theta) - sum_(t kept) (occam_t + scatter_t)``, the terms of
    :func:`tensor_terms`.

    Args:
        evidence: a fitted :class:`~ella.marglik.LaplaceEvidence` (Kronecker GGN), fitted
            with the dropped tensors at zero.
        dropped: one flag per parameter tensor of ``evidence.prior``.
        log_prior: that optimum, if already computed.

    Returns:
        The log evidence in nats.
    """
    if log_prior is None:
        log_prior = evidence.optimal_log_prior()
    total = float(evidence.terms(log_prior)["log_likelihood"])
    for drop, terms in zip(dropped, tensor_terms(evidence, log_prior), strict=True):
        if not drop:
            total -= terms["occam"] + terms["scatter"]
    return total
