"""Ready networks built from :mod:`ella.nn` layers."""

from ella.models.mixer import DEFAULT_BLOCKS, LayerSpec, Mixer, mixer, plan_layers

__all__ = ["DEFAULT_BLOCKS", "LayerSpec", "Mixer", "mixer", "plan_layers"]
