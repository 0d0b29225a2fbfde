"""Measuring the symmetry a model actually has.

* :mod:`ella.metrics.orbit`: predictions over a group orbit (OSP, symmetric KL);
* :mod:`ella.metrics.geed`: the G-empirical equivariance deviation family of
  Kvinge et al. (2022) -- invariance of outputs and features, channelwise
  equivariance of activations, distances, the normalised variant;
* :mod:`ella.metrics.layers`: one call, :func:`measure_symmetry`, for a
  per-layer table and plot of any model (forward hooks, removed afterwards);
* :mod:`ella.metrics.paths`: how much of each relaxed layer's output each path
  (FC, CONV, GCONV) carries, :func:`path_output_shares`.
"""

from ella.metrics.geed import (
    DISTANCES,
    EquivarianceDeviation,
    channel_cosine_distance,
    channelwise_equivariance,
    cosine_distance,
    deviation_from_orbit,
    equivariance_reference,
    euclidean_distance,
    geed,
    get_distance,
    invariance_reference,
    kl_divergence,
    output_invariance,
    reverse_kl_divergence,
)
from ella.metrics.layers import (
    LayerSymmetry,
    SymmetryReport,
    activation_of,
    default_layers,
    feature_invariance,
    measure_symmetry,
    plot_symmetry,
    record_activations,
)
from ella.metrics.orbit import orbit_outputs, orbit_same_predictions, orbit_symmetric_kl
from ella.metrics.paths import format_path_outputs, path_output_shares

__all__ = [
    "DISTANCES",
    "EquivarianceDeviation",
    "LayerSymmetry",
    "SymmetryReport",
    "activation_of",
    "channel_cosine_distance",
    "channelwise_equivariance",
    "cosine_distance",
    "default_layers",
    "deviation_from_orbit",
    "equivariance_reference",
    "euclidean_distance",
    "feature_invariance",
    "format_path_outputs",
    "geed",
    "get_distance",
    "invariance_reference",
    "kl_divergence",
    "measure_symmetry",
    "orbit_outputs",
    "orbit_same_predictions",
    "orbit_symmetric_kl",
    "output_invariance",
    "path_output_shares",
    "plot_symmetry",
    "record_activations",
    "reverse_kl_divergence",
]
