"""The full (dense) generalised Gauss-Newton Laplace evidence of a small classifier, with
one prior precision per group of parameters: the reference the Kronecker-factored evidence
of :mod:`ella.marglik` approximates, for networks of a few thousand parameters.

For softmax cross-entropy the GGN is ``G = sum_n J_n^T Lambda_n J_n`` with ``J_n`` the
(K, P) Jacobian of example ``n``'s logits in the parameters and
``Lambda_n = diag(p_n) - p_n p_n^T``. ``Lambda = M M^T`` with the columns
``m_c = sqrt(p_c) (e_c - p)``, so ``G = sum_n (M_n^T J_n)^T (M_n^T J_n)``: the Jacobians come
from ``torch.func`` (``vmap(jacrev(functional_call))`` over the examples), the product is
taken in float64. With ``D = diag(delta)`` (each group's precision on each of its
parameters) and ``mu = 0``, the linearised Laplace evidence is ella's
(``docs/guide/evidence.md``) with ``G`` in place of the Kronecker GGN,

    log p(D | delta) ~= log p(D | theta) - 1/2 sum_g delta_g ||theta_g||^2
                        + 1/2 sum_g P_g log delta_g - 1/2 log det(G + D),

its gradient in ``u_g = log delta_g`` is ``1/2 (gamma_g - delta_g ||theta_g||^2)`` with
``gamma_g = sum_{i in g} [1 - delta_g (G + D)^{-1}_ii]`` the group's effective number of
parameters (the trace of the hat matrix restricted to the group; ella's
``effective_parameters`` is the same quantity for a Kronecker block, computed from its
eigenvalues). Each evaluation is one Cholesky factorisation of the P x P matrix; the
gradient adds the inverse of its factor.

The groups are a :class:`ella.marglik.PriorStructure`'s (by default one per path of every
relaxed layer, one per other module, biases with their weights), in the order of the
model's trainable parameters, so a :class:`ella.PriorLearner`'s ``log_prior`` indexes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jacrev, vmap

from ella.marglik import PriorStructure, aggregate, relative_effective

__all__ = [
    "FullEvidence",
    "effective_report",
    "optimal_log_prior",
    "full_ggn",
    "logit_jacobians",
    "softmax_root",
]


def _trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def logit_jacobians(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits (B, K) of ``x`` and their Jacobians (B, K, P) in the model's trainable
    parameters, flattened and concatenated in ``named_parameters()`` order (the order of
    :class:`~ella.marglik.PriorStructure`), by ``vmap(jacrev(...))`` over the examples.

    The model is called on one example at a time (a batch of one), so a module that mixes
    the examples of a batch (batch norm in training mode) is not supported; ella's relaxed
    layers are per example."""
    params = _trainable(model)
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    buffers = dict(model.named_buffers())

    def logits(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
        return functional_call(model, {**p, **frozen, **buffers}, (xi.unsqueeze(0),))[0]

    def both(p, xi):
        out = logits(p, xi)
        return out, out

    jac, out = vmap(jacrev(both, has_aux=True), in_dims=(None, 0))(params, x)
    b, k = out.shape
    flat = torch.cat([jac[n].reshape(b, k, -1) for n in params], dim=-1)
    return out.detach(), flat.detach()


def softmax_root(logits: torch.Tensor) -> torch.Tensor:
    """``M`` (B, K, K) with ``M M^T = diag(p) - p p^T`` for ``p = softmax(logits)``: column
    ``c`` is ``sqrt(p_c) (e_c - p)``."""
    p = logits.double().softmax(-1)
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    return (eye - p.unsqueeze(-1)) * p.sqrt().unsqueeze(-2)  # [n, i, c] = (d_ic - p_i) sqrt(p_c)


@torch.no_grad()
def full_ggn(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 250
) -> tuple[torch.Tensor, float]:
    """The dense GGN (P, P) of the summed cross-entropy of ``(x, y)`` at the model's
    weights, in float64, and the log likelihood ``sum_n log p(y_n | x_n)`` (a float).

    Evaluated with the model in evaluation mode (as ella's fits are)."""
    was_training = model.training
    model.eval()
    n_params = sum(p.numel() for p in _trainable(model).values())
    G = torch.zeros(n_params, n_params, dtype=torch.float64, device=x.device)
    log_likelihood = 0.0
    try:
        for start in range(0, len(x), batch_size):
            xb, yb = x[start : start + batch_size], y[start : start + batch_size]
            with torch.enable_grad():
                logits, J = logit_jacobians(model, xb)
            root = softmax_root(logits)  # (B, K, K)
            JM = torch.einsum("bkc,bkp->bcp", root, J.double()).reshape(-1, n_params)
            G.addmm_(JM.T, JM)
            log_likelihood -= float(F.cross_entropy(logits.double(), yb, reduction="sum"))
    finally:
        model.train(was_training)
    return 0.5 * (G + G.T), log_likelihood


class FullEvidence:
    """The Laplace evidence with a dense GGN, as a function of the group log precisions.

    Args:
        G: the GGN (P, P), float64 (:func:`full_ggn`).
        theta: the weights (P,) in the GGN's parameter order (the prior is centred at 0).
        group_index: the group of each parameter (P,), long.
        n_groups: the number of groups.
        log_likelihood: ``log p(D | theta)``.
    """

    def __init__(
        self,
        G: torch.Tensor,
        theta: torch.Tensor,
        group_index: torch.Tensor,
        n_groups: int,
        log_likelihood: float,
    ):
        self.G = G.double()
        self.theta = theta.detach().double().to(self.G.device)
        self.group_index = group_index.to(self.G.device)
        self.n_groups = n_groups
        self.log_likelihood = float(log_likelihood)
        #: how many factorisations needed a jitter (:meth:`_cholesky`)
        self.jitters = 0
        ones = torch.ones_like(self.theta)
        self.sizes = torch.zeros(n_groups, dtype=torch.float64, device=self.G.device)
        self.sizes.index_add_(0, self.group_index, ones)
        self.squared_norms = torch.zeros_like(self.sizes).index_add_(
            0, self.group_index, self.theta.square()
        )

    @classmethod
    def of_model(
        cls,
        model: nn.Module,
        prior: PriorStructure,
        x: torch.Tensor,
        y: torch.Tensor,
        batch_size: int = 250,
    ) -> FullEvidence:
        """The evidence of ``model`` on ``(x, y)`` at its current weights, with ``prior``'s
        groups (its tensors must be the model's trainable parameters, in order)."""
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        if names != list(prior.param_names):
            raise ValueError("the prior structure's tensors are not the model's trainable ones")
        G, log_likelihood = full_ggn(model, x, y, batch_size)
        theta = torch.cat([p.detach().reshape(-1) for p in _trainable(model).values()])
        sizes = torch.tensor(prior.numels, device=theta.device)
        index = prior.index.to(theta.device).repeat_interleave(sizes)
        return cls(G, theta, index, prior.n_groups, log_likelihood)

    def _delta(self, log_prior: torch.Tensor) -> torch.Tensor:
        return log_prior.detach().double().to(self.G.device).exp()

    def _cholesky(self, delta: torch.Tensor) -> torch.Tensor:
        """The Cholesky factor of ``G + D``; where rounding makes it fail (a precision near
        zero on a direction without curvature), with a jitter of 1e-12, 1e-10, ... of the
        mean diagonal added and counted in :attr:`jitters`."""
        A = self.G.clone()
        A.diagonal().add_(delta[self.group_index])
        L, info = torch.linalg.cholesky_ex(A)
        jitter = 1e-12 * float(A.diagonal().mean())
        while int(info) != 0:
            self.jitters += 1
            A.diagonal().add_(jitter)
            L, info = torch.linalg.cholesky_ex(A)
            jitter *= 100
        return L

    def terms(self, log_prior: torch.Tensor) -> dict[str, float]:
        """``log_likelihood``, ``log_det`` (``-1/2 [log det(G + D) - log det D]``) and
        ``scatter`` (``-1/2 theta^T D theta``): their sum is the log evidence."""
        delta = self._delta(log_prior)
        L = self._cholesky(delta)
        log_det_posterior = 2.0 * L.diagonal().log().sum()
        log_det_prior = (self.sizes * delta.log()).sum()
        return {
            "log_likelihood": self.log_likelihood,
            "log_det": float(-0.5 * (log_det_posterior - log_det_prior)),
            "scatter": float(-0.5 * (delta * self.squared_norms).sum()),
        }

    def log_marginal_likelihood(self, log_prior: torch.Tensor) -> float:
        return sum(self.terms(log_prior).values())

    def posterior_variances(self, log_prior: torch.Tensor) -> torch.Tensor:
        """``diag((G + D)^{-1})`` (P,), from the inverse of the Cholesky factor."""
        L = self._cholesky(self._delta(log_prior))
        eye = torch.eye(L.shape[0], dtype=L.dtype, device=L.device)
        inverse = torch.linalg.solve_triangular(L, eye, upper=False)  # L^{-1}
        return inverse.square().sum(0)  # (L^{-T} L^{-1})_ii = sum_k (L^{-1})_ki^2

    def effective(self, log_prior: torch.Tensor) -> torch.Tensor:
        """Per parameter ``1 - delta_g(i) (G + D)^{-1}_ii`` (P,): summed over a group, its
        effective number of parameters."""
        delta = self._delta(log_prior)[self.group_index]
        return 1.0 - delta * self.posterior_variances(log_prior)

    def group_effective(self, log_prior: torch.Tensor) -> torch.Tensor:
        """``gamma_g`` per group (n_groups,)."""
        out = torch.zeros_like(self.sizes)
        return out.index_add_(0, self.group_index, self.effective(log_prior))

    def gradient(self, log_prior: torch.Tensor) -> torch.Tensor:
        """``d log p(D | delta) / d log delta_g = 1/2 (gamma_g - delta_g ||theta_g||^2)``."""
        delta = self._delta(log_prior)
        return 0.5 * (self.group_effective(log_prior) - delta * self.squared_norms)

    def hyper_steps(
        self,
        log_prior: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        n_steps: int,
        n_data: int,
    ) -> float:
        """``n_steps`` steps of ``optimizer`` (over the leaf ``log_prior``) on
        ``-log p(D | delta) / n_data``, as :meth:`ella.PriorLearner.hyper_steps` takes them
        with Adam; returns the log evidence after."""
        for _ in range(n_steps):
            optimizer.zero_grad(set_to_none=True)
            grad = -self.gradient(log_prior) / n_data
            log_prior.grad = grad.to(log_prior.dtype).to(log_prior.device)
            optimizer.step()
        return self.log_marginal_likelihood(log_prior)


def optimal_log_prior(
    evidence: FullEvidence,
    log_prior: torch.Tensor,
    max_iterations: int = 100,
    tolerance: float = 1e-6,
    bounds: tuple[float, float] = (-25.0, 25.0),
) -> tuple[torch.Tensor, int]:
    """The log precisions that maximise ``evidence`` (at its fixed GGN and weights), by
    Newton's method in ``u = log delta`` from ``log_prior``, with a halving line search
    and MacKay's fixed point ``delta_g = gamma_g / ||theta_g||^2`` where the Hessian is not
    negative definite; stops when no log precision moves by more than ``tolerance``.

    The Hessian is exact: ``d gamma_g / d u_h = -[g = h] delta_g t_g + delta_g delta_h
    C_gh`` with ``t_g = sum_{i in g} S_ii``, ``C_gh = sum_{i in g, j in h} S_ij^2`` and
    ``S = (G + D)^{-1}``. Returns the log precisions (float64) and the iterations taken."""
    u = log_prior.detach().double().to(evidence.G.device).clone()
    low, high = bounds
    index, n = evidence.group_index, evidence.n_groups
    value = evidence.log_marginal_likelihood(u)
    for iteration in range(1, max_iterations + 1):
        delta = u.exp()
        L = evidence._cholesky(delta)
        eye = torch.eye(L.shape[0], dtype=L.dtype, device=L.device)
        inverse = torch.linalg.solve_triangular(L, eye, upper=False)
        S = inverse.T @ inverse
        t = torch.zeros(n, dtype=u.dtype, device=u.device).index_add_(0, index, S.diagonal())
        gamma = evidence.sizes - delta * t
        grad = 0.5 * (gamma - delta * evidence.squared_norms)
        rows = torch.zeros(n, S.shape[1], dtype=u.dtype, device=u.device)
        rows.index_add_(0, index, S.square())
        C = torch.zeros(n, n, dtype=u.dtype, device=u.device).index_add_(1, index, rows)
        hessian = 0.5 * (
            delta[:, None] * delta[None, :] * C - torch.diag(delta * (t + evidence.squared_norms))
        )
        if bool((torch.linalg.eigvalsh(hessian) < 0).all()):
            step = -torch.linalg.solve(hessian, grad)
        else:  # MacKay's fixed point
            target = gamma.clamp_min(1e-300).log() - evidence.squared_norms.clamp_min(1e-300).log()
            step = target - u
        scale = 1.0
        for _ in range(30):
            candidate = (u + scale * step).clamp(low, high)
            new_value = evidence.log_marginal_likelihood(candidate)
            if new_value >= value:
                break
            scale /= 2
        else:
            return u, iteration
        moved = float((candidate - u).abs().max())
        u, value = candidate, new_value
        if moved < tolerance:
            return u, iteration
    return u, max_iterations


def effective_report(
    prior: PriorStructure, evidence: FullEvidence, log_prior: torch.Tensor
) -> dict[str, list[dict]]:
    """The full GGN's counterpart of :func:`ella.learner.report.effective_parameter_report`: the
    effective parameters of every tensor (``sum_{i in t} 1 - delta (G + D)^{-1}_ii``),
    aggregated per relaxed layer and path by ella's own :func:`ella.marglik.aggregate`,
    with ``"relative"`` (:func:`ella.marglik.relative_effective`) in every layer row.

    ``prior`` must be of ``layer_path`` structure (ella's report groups by layer and path)."""
    per_parameter = evidence.effective(log_prior)
    sizes: Sequence[int] = prior.numels
    effective = [float(t.sum()) for t in per_parameter.split(list(sizes))]
    delta = prior.expand(log_prior.detach().double().exp()).tolist()
    groups = prior.tensor_groups
    layers, others = aggregate(groups, effective, list(sizes), delta)
    relative = relative_effective(prior.param_names, groups, effective, list(sizes))
    for row in layers:
        row["relative"] = relative[row["layer"]]
    return {"layers": layers, "others": others}
