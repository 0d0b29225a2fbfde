"""A tiny training configuration, shared by the tests that train or build a run in-process."""

from __future__ import annotations

from ella.train import TrainConfig
from tests.cases import PAPER_PATHS


def tiny_config(**overrides) -> TrainConfig:
    """A learned mixer of the paper's paths, width 1, on 48 images for three epochs with
    an evidence round each epoch after the first; ``overrides`` replace any field."""
    values = dict(
        train_size=48,
        test_size=32,
        width=1,
        paths=PAPER_PATHS,
        epochs=3,
        batch_size=16,
        n_epochs_burnin=1,
        marglik_frequency=1,
        n_hypersteps=3,
        marglik_batch_size=48,
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)
