"""The network a run's configuration names: one builder for ``ella train`` and ``ella ensemble``."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from ella.models.baselines import BASELINE_MODELS
from ella.models.mixer import mixer

__all__ = ["ModelOptions", "build_model"]


class ModelOptions(Protocol):
    """The options of a configuration that describe its network."""

    model: str
    paths: tuple[str, ...]
    group: str
    width: int
    gconv_mode: str
    fc_mode: str
    norm: str
    downsample: str


def build_model(config: ModelOptions, in_channels: int, num_classes: int, size: int) -> nn.Module:
    """A plain baseline (``mlp``, ``cnn``: ``width`` only) or a mixer with every mixer option
    of ``config`` (paths, group, width, GCONV and FC modes, normalisation, downsampling)."""
    if config.model in BASELINE_MODELS:
        return BASELINE_MODELS[config.model](in_channels, num_classes, size, width=config.width)
    return mixer(
        in_channels,
        num_classes,
        size,
        group=config.group,
        paths=config.paths,
        width=config.width,
        gconv_mode=config.gconv_mode,
        fc_mode=config.fc_mode,
        norm=config.norm,
        downsample=config.downsample,
    )
