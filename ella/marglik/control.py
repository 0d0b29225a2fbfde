r"""A control variate for the subset evidence: the ratio estimator of the curvature's scale.

The subset evidence (:meth:`ella.marglik.LaplaceEvidence.fit` with ``n_data``) fits the
GGN on ``M`` of the ``N`` training images and scales it by ``N / M``. Most of its noise is
a common scale: one shift of a round's optimal log precisions shared by every prior group,
which follows how hard the drawn images are. The trace of the softmax
likelihood's output Hessian,

.. math::

    t_n = \operatorname{tr}\left(\operatorname{diag}(p_n) - p_n p_n^\top\right)
        = 1 - \sum_c p_{nc}^2,

is cheap (the logits alone) and measures it: the log of the subset's mean ``t`` over all
images' follows the shift closely.

The ratio estimator of survey sampling (Cochran, *Sampling Techniques*, 3rd ed., 1977,
ch. 6) uses a known total of an auxiliary variable: the GGN of the subset times
``sum_all t / sum_subset t`` instead of ``N / M``. It removes the part of the noise that
``t`` predicts, with a bias of order ``1 / M``.
"""

from __future__ import annotations

import torch

__all__ = ["curvature_ratio", "output_hessian_trace"]


def output_hessian_trace(logits: torch.Tensor) -> torch.Tensor:
    """``1 - sum_c p_c^2`` per row: the trace of the softmax cross-entropy's Hessian in the
    logits, ``diag(p) - p p^T``.

    Args:
        logits: (B, C) logits.

    Returns:
        (B,) traces in ``[0, 1 - 1/C]``.
    """
    p = torch.softmax(logits.detach().double(), dim=-1)
    return 1.0 - p.square().sum(dim=-1)


def curvature_ratio(trace: torch.Tensor, subset: torch.Tensor) -> float:
    """The factor on ``N / M`` that the ratio estimator applies to a subset's curvature:
    ``mean(trace) / mean(trace[subset])``.

    Args:
        trace: (N,) the auxiliary variable of every training image (non-negative), e.g.
            :func:`output_hessian_trace`.
        subset: (M,) indices of the images the evidence is fitted on.

    Returns:
        The factor; 1 where the subset's traces sum to zero (nothing to scale) or the
        subset is every image.
    """
    if trace.ndim != 1 or (trace < 0).any() or not torch.isfinite(trace).all():
        raise ValueError("trace must be a finite, non-negative (N,) tensor")
    picked = trace[subset]
    if len(picked) == 0:
        raise ValueError("the subset is empty")
    if float(picked.sum()) <= 0.0:
        return 1.0
    return float(trace.double().mean() / picked.double().mean())
