r"""The linearised (GLM) Laplace predictive of a classifier, by posterior draws.

With the Laplace posterior :math:`\theta \sim \mathcal N(\theta_*, (H + P)^{-1})` and the
network linearised at :math:`\theta_*` (Immer, Korzepa & Bauer, AISTATS 2021; Laplace
Redux's ``pred_type="glm"``), the predictive of a class is

.. math::

    p(y \mid x) = \mathbb E_{\epsilon}\,
    \mathrm{softmax}\big(f(x, \theta_*) + J(x)\,\epsilon\big)_y,
    \qquad \epsilon \sim \mathcal N\big(0, (H + P)^{-1}\big),

estimated here by ``S`` draws of :math:`\epsilon` from a fitted Kronecker posterior, each
pushed through the Jacobian by one forward-mode product (no Jacobian is formed). Tensors
held at zero (a dropped path) are conditioned on zero: in a block-diagonal posterior their
draws are simply zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, jvp

from ella.marglik.evidence import LaplaceEvidence
from ella.marglik.laplace_internals import parameter_dtype

__all__ = ["DRAWS", "glm_log_likelihood"]

#: posterior draws of the predictive by default
DRAWS = 64


@torch.no_grad()
def glm_log_likelihood(
    evidence: LaplaceEvidence,
    log_prior: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    draws: int = DRAWS,
    seed: int = 0,
    dropped: Sequence[bool] | None = None,
    batch_size: int = 500,
) -> float:
    """The GLM predictive log likelihood of ``(x, y)``, summed over the examples.

    Args:
        evidence: a fitted Kronecker :class:`~ella.marglik.LaplaceEvidence` (classification).
        log_prior: its groups' log precisions (n_groups,), those of the posterior.
        x: inputs (N, ...).
        y: class labels (N,), long.
        draws: posterior draws ``S``. Defaults to :data:`DRAWS`.
        seed: the draws' generator seed (the estimate is a function of it).
        dropped: per tensor of ``evidence.view.network``, whether it is held at zero (its
            draws are zero); ``None``: none.
        batch_size: examples per forward-mode pass.

    Returns:
        ``sum_n log p(y_n | x_n)`` in nats (a float).
    """
    la = evidence.laplace
    la.prior_precision = evidence.prior.expand(log_prior.exp()).to(parameter_dtype(la))
    network = evidence.view.sync().eval()
    trainable = [(n, p) for n, p in network.named_parameters() if p.requires_grad]
    primals = {n: p.detach() for n, p in trainable}
    sizes = [p.numel() for _, p in trainable]
    keep = None
    if dropped is not None:
        keep = torch.cat([torch.full((s,), not d) for s, d in zip(sizes, dropped, strict=True)])
    generator = torch.Generator().manual_seed(seed)
    posterior = la.posterior_precision  # decomposed once, for every draw
    dtype, n_params = parameter_dtype(la), la.mean.numel()
    total = 0.0
    for start in range(0, len(x), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        generator.manual_seed(seed)  # the same draws for every batch

        def logits(params: dict, xb=xb) -> torch.Tensor:
            return functional_call(network, params, (xb,))

        f0 = logits(primals)
        probs = torch.zeros(f0.shape, dtype=torch.float64)
        for _ in range(draws):
            # laplace-torch's KronLaplace.sample, without rebuilding the posterior per draw
            z = torch.randn(1, n_params, dtype=dtype, generator=generator)
            eps = posterior.bmm(z.to(la.mean.device), exponent=-0.5).reshape(-1)
            if keep is not None:
                eps = eps * keep.to(eps)
            tangent = {
                n: e.view_as(primals[n]).to(primals[n])
                for (n, _), e in zip(trainable, eps.split(sizes), strict=True)
            }
            with torch.enable_grad():
                _, jv = jvp(logits, (primals,), (tangent,))
            probs += F.softmax((f0 + jv).double(), dim=-1)
        total += float((probs / draws).gather(1, yb.view(-1, 1)).log().sum())
    return total
