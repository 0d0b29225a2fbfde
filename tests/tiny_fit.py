"""A tiny classification problem for :func:`ella.fit` and the evidence: ``N`` examples of
four features in ``K`` classes, a small MLP, and fit options that train one round."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

#: the options of a fit of one epoch with one evidence round of one step
FAST = dict(epochs=1, n_epochs_burnin=1, marglik_frequency=1, n_hypersteps=1, progress=False)
N, K = 8, 3  # examples, classes


def tiny_model(outputs: int = K) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, outputs))


def inputs() -> torch.Tensor:
    return torch.randn(N, 4, generator=torch.Generator().manual_seed(1))


def labels() -> torch.Tensor:
    return torch.arange(N) % K


def loader(y: torch.Tensor, **kwargs) -> DataLoader:
    return DataLoader(TensorDataset(inputs(), y), **{"batch_size": 4, **kwargs})
