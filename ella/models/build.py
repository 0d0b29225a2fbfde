"""The network a run's configuration names: one builder for ``ella train`` and ``ella ensemble``."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from ella.choices import FCMode
from ella.errors import ConfigError
from ella.models.baselines import BASELINE_MODELS
from ella.models.mixer import mixer

__all__ = ["ModelOptions", "build_model", "check_mixer_options"]


class ModelOptions(Protocol):
    """The options of a configuration that describe its network."""

    model: str
    paths: tuple[str, ...]
    group: str
    width: int
    gconv_mode: str
    fc_mode: str
    fc_rank: int
    zero_init: tuple[str, ...]
    norm: str
    downsample: str
    pool: str


def check_mixer_options(config: ModelOptions) -> None:
    """Refuse, before any work, mixer options that cannot go together (ConfigError):
    a path named twice, ``fc_rank`` above 1 without the factorised FC path, the CONV and
    residual paths together, a residual path without the GCONV path beside it or on the
    trivial group, and ``zero_init`` naming every path of a mixed network."""
    if len(set(config.paths)) != len(config.paths):
        repeated = sorted({p for p in config.paths if config.paths.count(p) > 1})
        once = " ".join(dict.fromkeys(config.paths))
        raise ConfigError(
            f"--paths {' '.join(config.paths)} names {', '.join(repeated)} more than once; "
            f"give each path once (--paths {once})"
        )
    if config.fc_rank > 1 and config.fc_mode != FCMode.FACTORIZED:
        raise ConfigError(
            f"--fc-rank {config.fc_rank} sets the factorised FC path's rank; --fc-mode "
            f"{config.fc_mode} has none: use --fc-mode factorized or --fc-rank 1"
        )
    if "conv" in config.paths and "residual" in config.paths:
        raise ConfigError(
            f"--paths {' '.join(config.paths)}: conv and residual together are redundant "
            "(the residual is the part of a CONV path that breaks the group's symmetry); "
            "use --paths gconv residual, or conv gconv for the paper's paths"
        )
    if "residual" in config.paths and "gconv" not in config.paths:
        with_gconv = " ".join(["gconv" if p == "residual" else p for p in config.paths])
        raise ConfigError(
            f"--paths {' '.join(config.paths)}: a residual path is the part of a CONV path "
            "that breaks the group's symmetry, and stands beside the GCONV path that holds "
            "the equivariant part (alone it is a CONV path without its equivariant part); "
            f"use --paths {with_gconv} residual"
        )
    if "residual" in config.paths and config.group == "trivial":
        raise ConfigError(
            "--paths residual needs a group (--group C4 or D4): on the trivial group every "
            "convolution is equivariant and there is nothing for a residual to break"
        )
    if len(config.paths) > 1 and set(config.paths) <= set(config.zero_init):
        raise ConfigError(
            f"--zero-init {' '.join(config.zero_init)} starts every path of --paths "
            f"{' '.join(config.paths)} at zero, so no layer would get a gradient; leave at "
            "least one path out (the default starts only fc at zero)"
        )


def build_model(config: ModelOptions, in_channels: int, num_classes: int, size: int) -> nn.Module:
    """A plain baseline (``mlp``, ``cnn``: ``width`` only) or a mixer with every mixer option
    of ``config`` (paths, group, width, GCONV and FC modes, the paths that start at zero,
    normalisation, downsampling, group pooling)."""
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
        zero_init=config.zero_init,
        norm=config.norm,
        downsample=config.downsample,
        pool=config.pool,
    )
