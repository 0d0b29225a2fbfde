"""``ella train`` and :func:`ella.fit` are one loop: the same mixer, data, options and
seed give the same weights, precisions, evidence and test accuracy through either."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import DataLoader

import ella
from ella.data import load_dataset
from ella.engine.schedule import ScheduleConfig
from ella.models.build import build_model
from ella.train import TrainConfig, Trainer
from ella.train.config import HEAD_INIT_IMAGES

TINY = dict(
    train_size=48, test_size=32, width=1, epochs=3, batch_size=16, n_epochs_burnin=1,
    marglik_frequency=1, marglik_subset_size=24, marglik_batch_size=24, progress=False,
    augment="none",  # a DataLoader of the images gives them as they are
)  # fmt: skip


def fit_as_ella_train_would(config: TrainConfig) -> ella.train.fit.FitResult:
    """``ella.fit`` on the configuration's mixer and data, built as ``ella train`` builds
    them, through ordinary ``DataLoader``s."""
    torch.manual_seed(config.seed)
    data = load_dataset(config.dataset, config.data_dir, config.train_size, config.test_size)
    model = build_model(config, data.in_channels, data.num_classes, data.image_size)
    model.standardise_head(data.train.tensors[0][:HEAD_INIT_IMAGES])  # --head-init data
    train = DataLoader(data.train, batch_size=config.batch_size, shuffle=True)
    test = DataLoader(data.test, batch_size=500)
    shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(ScheduleConfig)}
    return ella.fit(model, train, test, ella.FitConfig(**shared))


@pytest.mark.parametrize("control", ["training", "forward"])
def test_ella_train_and_ella_fit_give_the_same_run(tmp_path, control):
    config = TrainConfig(**TINY, subset_control=control)
    trainer = Trainer(config, tmp_path / "train")
    results = trainer.run()
    fitted = fit_as_ella_train_would(config)

    assert fitted.log_marglik_epochs == results["log_marglik_epochs"] == [1, 2, 3]
    assert fitted.log_marglik == results["log_marglik"]
    assert fitted.prior_precision == results["prior_precision"]
    for (name, a), b in zip(trainer.net.named_parameters(), fitted.model.parameters(), strict=True):
        assert torch.equal(a, b), name
    rows = trainer.state.metrics  # bit for bit: one loop, not two that agree
    for key in ("train_nll", "train_accuracy", "test_accuracy", "test_nll", "curvature_ratio"):
        assert [r[key] for r in fitted.metrics] == [r[key] for r in rows], key
