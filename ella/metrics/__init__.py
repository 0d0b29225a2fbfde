"""Measuring the symmetry a model actually has."""

from ella.metrics.orbit import orbit_outputs, orbit_same_predictions, orbit_symmetric_kl

__all__ = ["orbit_outputs", "orbit_same_predictions", "orbit_symmetric_kl"]
