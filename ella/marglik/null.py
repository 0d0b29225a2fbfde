"""The model without a network, against which every network's evidence can be read.

A classifier that gives every image the training set's class frequencies has a closed-form
marginal likelihood. A network whose Laplace evidence falls below it is one the evidence
would not use at this number of training images: its Occam factor outweighs its fit.
"""

from __future__ import annotations

import torch

__all__ = ["class_frequency_model"]


def class_frequency_model(labels: torch.Tensor, n_classes: int) -> dict[str, float]:
    """The categorical model of the labels alone, with a uniform Dirichlet prior.

    Args:
        labels: (N,) integer class labels of the training images.
        n_classes: the number of classes ``K`` (a class may have no image).

    Returns:
        ``{"log_likelihood": sum_k n_k log(n_k / N), "log_evidence": ...}``: the log
        likelihood at the class frequencies, and the exact marginal likelihood
        ``log Gamma(K) + sum_k log Gamma(n_k + 1) - log Gamma(N + K)`` (MacKay, Information
        Theory, Inference and Learning Algorithms, 2003, Eq. 23.29 with alpha_k = 1).
    """
    counts = torch.bincount(labels.long().flatten(), minlength=n_classes).double()
    n = counts.sum()
    seen = counts[counts > 0]
    log_likelihood = float((seen * torch.log(seen / n)).sum())
    k = torch.tensor(float(n_classes), dtype=torch.float64)
    log_evidence = torch.lgamma(k) + torch.lgamma(counts + 1).sum() - torch.lgamma(n + k)
    return {"log_likelihood": log_likelihood, "log_evidence": float(log_evidence)}
