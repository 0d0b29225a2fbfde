"""The network a run's configuration names: one builder for ``ella train`` and ``ella ensemble``."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from ella.choices import FCMode
from ella.errors import ConfigError
from ella.models.baselines import BASELINE_MODELS
from ella.models.mixer import mixer
from ella.nn.kinds import declared_options, path_problems, zero_init_problem
from ella.nn.options import LayerOptions

__all__ = ["ModelOptions", "build_model", "check_mixer_options"]


class ModelOptions(Protocol):
    """The options of a configuration that describe its network: these, and the layers'
    options (:class:`~ella.nn.options.LayerOptions`' fields and those the kinds of path
    declare) by the same names, read by :meth:`~ella.nn.options.LayerOptions.of`."""

    model: str
    paths: tuple[str, ...]
    group: str
    width: int
    pool: str
    fc_rank: int
    fc_mode: str
    zero_init: tuple[str, ...]


def check_mixer_options(config: ModelOptions) -> None:
    """Refuse, before any work, mixer options that cannot go together (ConfigError): the
    rules of the path kinds (:func:`ella.nn.kinds.path_problems`: a path named twice, the
    CONV and residual paths together, a residual path without the GCONV path beside it or
    on the trivial group), ``fc_rank`` above 1 without the factorised FC path, and
    ``zero_init`` naming every path of a mixed network
    (:func:`ella.nn.kinds.zero_init_problem`)."""
    flags = " ".join(config.paths)
    if problems := path_problems(config.paths, trivial_group=config.group == "trivial"):
        first = problems[0]
        if first.fix is None:
            raise ConfigError(f"--paths {flags} needs a group (--group C4 or D4): {first.reason}")
        raise ConfigError(f"--paths {flags}: {first.reason}; use --paths {' '.join(first.fix)}")
    if config.fc_rank > 1 and config.fc_mode != FCMode.FACTORIZED:
        raise ConfigError(
            f"--fc-rank {config.fc_rank} sets the factorised FC path's rank; --fc-mode "
            f"{config.fc_mode} has none: use --fc-mode factorized or --fc-rank 1"
        )
    if reason := zero_init_problem(config.zero_init, config.paths):
        raise ConfigError(
            f"--zero-init {' '.join(config.zero_init)} with --paths {flags}: {reason} "
            "(the default starts only fc at zero)"
        )


def build_model(config: ModelOptions, in_channels: int, num_classes: int, size: int) -> nn.Module:
    """A plain baseline (``mlp``, ``cnn``: ``width`` only) or a mixer with every mixer option
    of ``config`` (paths, group, width, group pooling) and every layer option it holds
    (:meth:`~ella.nn.options.LayerOptions.of`)."""
    if config.model in BASELINE_MODELS:
        return BASELINE_MODELS[config.model](in_channels, num_classes, size, width=config.width)
    return mixer(
        in_channels,
        num_classes,
        size,
        group=config.group,
        paths=config.paths,
        width=config.width,
        pool=config.pool,
        options=LayerOptions.of(config, declared_options()),
    )
