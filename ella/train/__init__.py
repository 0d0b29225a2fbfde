"""Training: MAP and learned layer-wise priors in one loop."""

from ella.train.config import HELP, TrainConfig
from ella.train.loop import (
    Trainer,
    TrainingDivergedError,
    cosine_lr,
    evaluate,
    evidence_epochs,
    train,
)

__all__ = [
    "HELP",
    "TrainConfig",
    "Trainer",
    "TrainingDivergedError",
    "cosine_lr",
    "evaluate",
    "evidence_epochs",
    "train",
]
