"""One configuration trained by ``ella train`` and by :func:`ella.fit` (the session fixture
``one_loop`` of ``tests/conftest.py``), for the tests that they are one loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader

import ella
from ella.data import load_dataset
from ella.engine.schedule import ScheduleConfig
from ella.models.build import build_model
from ella.train import TrainConfig, Trainer
from ella.train.config import HEAD_INIT_IMAGES
from ella.train.fit import FitResult

#: ella train's defaults (the training passes' control variate among them) at a tiny size;
#: no augmentation, since a DataLoader of the images gives them as they are
TINY = dict(
    train_size=48, test_size=32, width=1, epochs=3, batch_size=16, n_epochs_burnin=1,
    marglik_frequency=1, marglik_subset_size=24, marglik_batch_size=24, progress=False,
    augment="none", paths=("conv", "gconv"),
)  # fmt: skip


def fit_as_ella_train_would(config: TrainConfig) -> tuple[FitResult, DataLoader, DataLoader]:
    """``ella.fit`` on the configuration's mixer and data, built as ``ella train`` builds
    them, through ordinary ``DataLoader``s: its result and the loaders."""
    torch.manual_seed(config.seed)
    data = load_dataset(config.dataset, config.data_dir, config.train_size, config.test_size)
    model = build_model(config, data.in_channels, data.num_classes, data.image_size)
    model.standardise_head(data.train.tensors[0][:HEAD_INIT_IMAGES])  # --head-init data
    train = DataLoader(data.train, batch_size=config.batch_size, shuffle=True)
    test = DataLoader(data.test, batch_size=500)
    shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(ScheduleConfig)}
    return ella.fit(model, train, test, ella.FitConfig(**shared)), train, test


class OneLoop(NamedTuple):
    """One configuration trained both ways: ``ella train``'s trainer, its run directory
    and results, and ``ella.fit``'s result with its loaders."""

    trainer: Trainer
    run_dir: Path
    results: dict
    fitted: FitResult
    train: DataLoader
    test: DataLoader


def train_both_ways(run_dir: Path) -> OneLoop:
    """:data:`TINY` trained by ``ella train`` into ``run_dir`` and by ``ella.fit``."""
    config = TrainConfig(**TINY)
    trainer = Trainer(config, run_dir)
    results = trainer.run()
    return OneLoop(trainer, run_dir, results, *fit_as_ella_train_would(config))
