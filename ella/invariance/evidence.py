"""The Laplace log evidence of an invariant classifier, differentiable in ``eta`` and the priors.

    log p(D | eta, delta) ~= log p(D | theta*, eta) - 1/2 [ log det(H_eta + P) - log det P
                             + theta*^T P theta* ]

with ``H_eta`` the Kronecker-factored GGN of the averaged predictor
(:func:`ella.invariance.kfac.kron_factors`) at the current weights
``theta*``, and ``P = diag(delta)`` from a :class:`~ella.marglik.PriorStructure`
of the wrapped network. Each weight block contributes
``sum_ij log(lambda^G_i lambda^A_j + delta)`` and each bias block
``sum_i log(lambda^G_i + delta)``, the eigenvalues coming from ``eigvalsh``,
whose gradient needs no eigenvalue gaps (Immer et al., NeurIPS 2022, Sec. 3;
the same formula laplace-torch's ``KronLaplace`` evaluates, which a test
checks).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ella.choices import GGN
from ella.invariance.kfac import kron_factors, module_blocks
from ella.invariance.model import InvariantClassifier
from ella.marglik.backends import check_n_data
from ella.marglik.per_channel import PerChannelView
from ella.marglik.priors import PriorStructure

__all__ = ["InvarianceEvidence"]


@contextlib.contextmanager
def _network(model: InvariantClassifier, net: nn.Module) -> Iterator[None]:
    """``model`` classifying with ``net`` (the evidence's view of its network) inside."""
    own = model.net
    model.net = net
    try:
        yield
    finally:
        model.net = own


class InvarianceEvidence:
    """Differentiable KFAC Laplace evidence of an :class:`InvariantClassifier`.

    Unlike :class:`ella.marglik.LaplaceEvidence`, nothing is fitted once and
    reused: the Kronecker factors depend on ``eta`` through the transformed
    inputs, so every evaluation recomputes them (with the graph) on the data
    it is given.

    Args:
        model: the invariant classifier; its ``net`` must consist of
            ``nn.Linear``/``nn.Conv2d`` parameters (checked).
        prior: prior groups over ``model.net``'s parameters.
        ggn: ``"exact"``, ``"mc"``, ``"stratified"`` or ``"auto"`` (stratified). Defaults
            to ``"exact"``, as :class:`~ella.marglik.LaplaceEvidence`: the evidence itself;
            ``ella train`` passes its recipe's estimator.
    """

    def __init__(self, model: InvariantClassifier, prior: PriorStructure, ggn: str = "exact"):
        ggn = GGN.parse(ggn, "GGN type").for_backend("native")  # ella's own factors
        self.model = model
        #: the network as the factors see it (per-channel FC maps)
        self.view = PerChannelView(model.net)
        self.prior = self.view.prior(prior)
        self.ggn = ggn
        self.blocks = module_blocks(self.view.network)
        n_tensors = sum(1 + (m.bias is not None) for _, m in self.blocks)
        if n_tensors != self.prior.n_tensors:
            raise ValueError(
                f"the prior has {self.prior.n_tensors} tensors but the network's Linear/Conv2d "
                f"modules have {n_tensors}; build the PriorStructure from model.net"
            )
        self._eigenvalues: list[torch.Tensor] | None = None

    def log_marginal_likelihood(
        self,
        log_prior_precision: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        eps: torch.Tensor,
        n_data: int | None = None,
        eta: torch.Tensor | None = None,
        batch_size: int = 500,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Log evidence on ``(x, y)``, scaled to ``n_data`` points; differentiable.

        Args:
            log_prior_precision: (n_groups,) log precisions of ``prior``'s groups.
            x: images (n, C, H, W); a subset of the training set, or all of it.
            y: labels (n,).
            eps: (n S, 6) transformation coefficients, image-major (fixed
                noise makes the estimate a deterministic function of ``eta``).
            n_data: training-set size ``N``; the likelihood and ``G`` are
                scaled by ``N / n`` (default ``n``: no scaling).
            eta: extents (6,) (default: the model's buffer).
            batch_size: images per forward pass.
            generator: random generator for ``ggn="mc"`` or ``"stratified"``.

        Returns:
            Scalar log evidence.
        """
        n = len(x)
        if len(y) != n or len(eps) % n:
            raise ValueError(f"got {n} images, {len(y)} labels and {len(eps)} rows of eps")
        n_data = n if n_data is None else check_n_data(n_data)
        samples = len(eps) // n
        eta = self.model.eta if eta is None else eta
        keep_graph = torch.is_grad_enabled()  # the GGN needs autograd even when the caller does not
        nll = 0.0
        a_sums: list | None = None
        g_sums: list | None = None
        net = self.view.sync()
        for i in range(0, n, batch_size):
            xb, yb = x[i : i + batch_size], y[i : i + batch_size]
            eb = eps[i * samples : (i + batch_size) * samples]
            with torch.enable_grad(), _network(self.model, net):
                logits, a_b, g_b = kron_factors(
                    net,
                    lambda xb=xb, eb=eb: self.model(xb, eps=eb, eta=eta),
                    samples,
                    ggn=self.ggn,
                    generator=generator,
                    create_graph=keep_graph,
                    modules=self.blocks,
                )
            if not keep_graph:
                logits, a_b, g_b = logits.detach(), [a.detach() for a in a_b], g_b
            nll = nll + F.cross_entropy(logits, yb, reduction="sum")
            a_sums = a_b if a_sums is None else [s + t for s, t in zip(a_sums, a_b, strict=True)]
            g_sums = g_b if g_sums is None else [s + t for s, t in zip(g_sums, g_b, strict=True)]
        scale = n_data / n
        delta = self.prior.expand(log_prior_precision.exp())
        params = list(net.parameters())
        log_det_posterior, eigenvalues, t = 0.0, [], 0
        for (_, module), a_sum, g_sum in zip(self.blocks, a_sums, g_sums, strict=True):
            lam_a = torch.linalg.eigvalsh(a_sum / n).clamp_min(0)
            lam_g = torch.linalg.eigvalsh(g_sum * scale).clamp_min(0)
            weight_eigs = torch.outer(lam_g, lam_a).flatten()
            eigenvalues.append(weight_eigs.detach())
            log_det_posterior = log_det_posterior + torch.log(weight_eigs + delta[t]).sum()
            t += 1
            if module.bias is not None:
                eigenvalues.append(lam_g.detach())
                log_det_posterior = log_det_posterior + torch.log(lam_g + delta[t]).sum()
                t += 1
        numels = torch.tensor(self.prior.numels, dtype=delta.dtype, device=delta.device)
        log_det_prior = (numels * delta.log()).sum()
        scatter = sum((d * p.detach().square().sum()) for d, p in zip(delta, params, strict=True))
        self._eigenvalues = eigenvalues
        return -scale * nll - 0.5 * (log_det_posterior - log_det_prior + scatter)

    def block_eigenvalues(self) -> list[torch.Tensor]:
        """Eigenvalues of each parameter tensor's GGN block at the last evaluation."""
        if self._eigenvalues is None:
            raise RuntimeError("evaluate log_marginal_likelihood first")
        return self._eigenvalues
