"""A tiny ensemble to train: four classes of random 8x8 images told apart by the signs of
two half-image means, a width-1 trivial-group CONV+FC mixer, and a trainer of three
members for two epochs."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from ella.data import ImageData
from ella.ensembles import EnsembleConfig, EnsembleTrainer
from ella.models import mixer


def tiny_data(n_train=48, n_test=20, size=8, seed=0) -> ImageData:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_train + n_test, 1, size, size, generator=g)
    y = (x[:, 0, : size // 2].mean((1, 2)) > 0).long() + 2 * (
        x[:, 0, :, : size // 2].mean((1, 2)) > 0
    )
    return ImageData(
        "mnist_subset",
        TensorDataset(x[:n_train], y[:n_train]),
        TensorDataset(x[n_train:], y[n_train:]),
        num_classes=4,
    )


def tiny_model():
    return mixer(1, 4, 8, group="trivial", paths=("conv", "fc"), width=1)


def config(**kw) -> EnsembleConfig:
    base = dict(members=3, epochs=2, batch_size=16, lr=3e-3, progress=False,
                corruption_severities=(), seed=0)  # fmt: skip
    return EnsembleConfig(**{**base, **kw})


def trainer(data=None, **kw) -> EnsembleTrainer:
    return EnsembleTrainer(config(**kw), model_fn=tiny_model, data=data or tiny_data())
