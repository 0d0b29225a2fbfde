"""Ensemble prediction and its evaluation: accuracy, NLL, ECE, corruptions, orbit metrics.

The ensemble's predictive distribution is the mean of its members' class
probabilities, ``p(y | x) = 1/M sum_i softmax(f(x; theta_i))`` (Lakshminarayanan
et al. 2017; both papers). Everything here takes an :class:`~ella.ensembles.Ensemble`
in eval mode and standardised images (N, C, H, W).
"""

from __future__ import annotations

import math

import torch

from ella.data.corruptions import CORRUPTIONS, corrupt_standardised
from ella.groups import Group, get_group
from ella.metrics import orbit_outputs, orbit_same_predictions, orbit_symmetric_kl

__all__ = [
    "classification_metrics",
    "corrupted_metrics",
    "ensemble_log_probs",
    "evaluate_ensemble",
    "expected_calibration_error",
    "member_log_probs",
    "orbit_member_log_probs",
    "orbit_metrics",
    "orbit_summary",
]


@torch.no_grad()
def member_log_probs(ensemble, x: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """Log class probabilities of every member, (M, N, K), for images ``x`` (N, C, H, W)."""
    was_training = ensemble.training
    ensemble.eval()
    device = next(ensemble.parameters()).device
    try:
        chunks = [
            ensemble(x[i : i + batch_size].to(device)).log_softmax(-1).cpu()
            for i in range(0, len(x), batch_size)
        ]
    finally:
        ensemble.train(was_training)
    return torch.cat(chunks, dim=1)


def ensemble_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """Log of the mean member probability: (M, N, K) -> (N, K)."""
    return log_probs.logsumexp(0) - math.log(log_probs.shape[0])


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, bins: int = 15) -> float:
    """ECE with ``bins`` equal-width confidence bins (Guo et al. 2017), as the FoRDE paper.

    Args:
        probs: (N, K) predictive probabilities.
        labels: (N,) true classes.
        bins: the number of equal-width confidence bins in [0, 1].
    """
    confidence, predicted = probs.max(-1)
    correct = (predicted == labels).to(probs.dtype)
    edges = torch.linspace(0, 1, bins + 1, dtype=probs.dtype)
    ece = 0.0
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = (confidence > low) & (confidence <= high)
        if inside.any():
            gap = confidence[inside].mean() - correct[inside].mean()
            ece += float(gap.abs()) * float(inside.to(probs.dtype).mean())
    return ece


def classification_metrics(log_probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Accuracy (fraction), mean NLL and ECE of predictive log probabilities (N, K)."""
    if log_probs.dim() != 2 or len(log_probs) != len(labels):
        raise ValueError(
            f"expected log probabilities (N, K) and labels (N,), got {tuple(log_probs.shape)} "
            f"and {tuple(labels.shape)}"
        )
    return {
        "accuracy": float((log_probs.argmax(-1) == labels).double().mean()),
        "nll": float(-log_probs.gather(1, labels[:, None]).mean()),
        "ece": expected_calibration_error(log_probs.exp(), labels),
    }


def evaluate_ensemble(ensemble, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Ensemble metrics on (x, y), plus the members' mean accuracy and NLL."""
    members = member_log_probs(ensemble, x)
    out = classification_metrics(ensemble_log_probs(members), y)
    each = [classification_metrics(m, y) for m in members]
    out["member_accuracy"] = sum(e["accuracy"] for e in each) / len(each)
    out["member_nll"] = sum(e["nll"] for e in each) / len(each)
    return out


def corrupted_metrics(
    ensemble,
    x: torch.Tensor,
    y: torch.Tensor,
    stats: tuple[tuple[float, ...], tuple[float, ...]],
    severities: tuple[int, ...] = (1, 3, 5),
    corruptions: tuple[str, ...] = CORRUPTIONS,
    seed: int = 0,
) -> dict:
    """Metrics on corrupted copies of standardised test images.

    Returns:
        ``{"accuracy", "nll", "ece"}`` averaged over every corruption and
        severity, and ``"by_corruption"``: ``{name: {severity: metrics}}``.
    """
    table: dict[str, dict[int, dict[str, float]]] = {}
    for name in corruptions:
        table[name] = {}
        for severity in severities:
            generator = torch.Generator().manual_seed(seed * 1000 + severity)
            xc = corrupt_standardised(x, name, severity, *stats, generator=generator)
            members = member_log_probs(ensemble, xc)
            table[name][severity] = classification_metrics(ensemble_log_probs(members), y)
    cells = [m for by_severity in table.values() for m in by_severity.values()]
    mean = {k: sum(c[k] for c in cells) / len(cells) for k in ("accuracy", "nll", "ece")}
    return {**mean, "by_corruption": table}


def orbit_member_log_probs(
    ensemble: torch.nn.Module, x: torch.Tensor, group: str | Group
) -> torch.Tensor:
    """Every member's log probabilities over each input's orbit.

    Args:
        ensemble: the members (eval mode is set inside).
        x: images (N, C, H, W).
        group: group acting on the images; element 0 is the identity.

    Returns:
        ``out[g, i, n] = log p_i(g . x_n)``, shape (|G|, M, N, K).
    """
    group = get_group(group)
    m = len(ensemble)

    def predict(z: torch.Tensor) -> torch.Tensor:  # (B, M * K): members side by side
        return member_log_probs(ensemble, z).permute(1, 0, 2).flatten(1)

    orbit = orbit_outputs(predict, x, group)  # (|G|, N, M * K)
    return orbit.reshape(group.order, len(x), m, -1).transpose(1, 2)


def orbit_summary(orbit: torch.Tensor) -> dict:
    """OSP and orbit symmetric KL of an ensemble and of its members, from (|G|, M, N, K).

    OSP (Gerken & Kessel, ICML 2024) counts the ``g`` in ``G`` with
    ``argmax p(g x) == argmax p(x)`` (1 .. |G|); the ensemble's ``p`` is the
    mean member probability. Pass ``orbit[:, :k]`` for the first ``k`` members.

    Returns:
        ``osp`` / ``osp_std`` (mean and standard deviation over inputs) and
        ``orbit_kl`` of the ensemble; ``member_osp`` and ``member_orbit_kl``
        averaged over members, ``member_osps`` each member's mean OSP; ``group_order``.
    """
    if orbit.dim() != 4:
        raise ValueError(
            f"expected orbit log probabilities (|G|, M, N, K), got shape {tuple(orbit.shape)}"
        )
    order, m = orbit.shape[:2]
    mean = orbit.logsumexp(1) - math.log(m)  # (|G|, N, K)
    osp = orbit_same_predictions(mean).double()
    member_osp = [orbit_same_predictions(orbit[:, i]).double().mean() for i in range(m)]
    member_kl = [orbit_symmetric_kl(orbit[:, i]).mean() for i in range(m)]
    return {
        "osp": float(osp.mean()),
        "osp_std": float(osp.std()) if len(osp) > 1 else 0.0,
        "orbit_kl": float(orbit_symmetric_kl(mean).mean()),
        "member_osp": float(sum(member_osp) / m),
        "member_osps": [float(v) for v in member_osp],
        "member_orbit_kl": float(sum(member_kl) / m),
        "group_order": int(order),
    }


def orbit_metrics(ensemble, x: torch.Tensor, group: str | Group) -> dict:
    """:func:`orbit_summary` of the ensemble on images ``x`` (N, C, H, W) over ``group``."""
    return orbit_summary(orbit_member_log_probs(ensemble, x, group))
