"""The network a run's configuration names: one builder for ``ella train`` and ``ella ensemble``."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from ella.errors import ConfigError
from ella.models.baselines import BASELINE_MODELS
from ella.models.mixer import mixer

__all__ = ["ModelOptions", "build_model", "check_fc_rank"]


class ModelOptions(Protocol):
    """The options of a configuration that describe its network."""

    model: str
    paths: tuple[str, ...]
    group: str
    width: int
    gconv_mode: str
    fc_mode: str
    fc_rank: int
    norm: str
    downsample: str


def check_fc_rank(config: ModelOptions) -> None:
    """``fc_rank`` above 1 needs the factorised FC path (raises ConfigError)."""
    if config.fc_rank > 1 and config.fc_mode != "factorized":
        raise ConfigError(
            f"--fc-rank {config.fc_rank} sets the factorised FC path's rank; --fc-mode "
            f"{config.fc_mode} has none: use --fc-mode factorized or --fc-rank 1"
        )


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
        fc_rank=config.fc_rank,
        norm=config.norm,
        downsample=config.downsample,
    )
