"""Training: MAP and learned layer-wise priors in one loop.

The names below load on first use (PEP 562), so that a module that needs only the
options (``ella.engine.schedule``, ``ella.train.config``) does not import laplace-torch
through the loop (``ella ensemble`` needs the options only, and starts sooner).
"""

from importlib import import_module

_SOURCES = {
    "HELP": "ella.train.config",
    "TrainConfig": "ella.train.config",
    "Trainer": "ella.train.loop",
    "TrainingDivergedError": "ella.train.loop",
    "cosine_lr": "ella.train.loop",
    "evaluate": "ella.train.loop",
    "evidence_epochs": "ella.train.loop",
    "train": "ella.train.loop",
}

__all__ = list(_SOURCES)


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module 'ella.train' has no attribute {name!r}")
    return getattr(import_module(_SOURCES[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
