"""Ready networks built from :mod:`ella.nn` layers."""

from ella.models.baselines import BASELINE_MODELS, cnn, mlp
from ella.models.mixer import DEFAULT_BLOCKS, LayerSpec, Mixer, mixer, plan_layers

__all__ = [
    "BASELINE_MODELS",
    "cnn",
    "mlp",
    "DEFAULT_BLOCKS",
    "LayerSpec",
    "Mixer",
    "mixer",
    "plan_layers",
]
