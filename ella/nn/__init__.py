"""Drop-in layers with FC, CONV and GCONV paths on lifted tensors (B, |G|, C, H, W)."""

from ella.nn.downsample import PolyphaseDownsample, polyphase_downsample
from ella.nn.lift import GroupPool, Lift
from ella.nn.paths import ConvPath, FCPath, GConvPath, Path, per_module_calls
from ella.nn.relaxed import PATH_NAMES, RelaxedLayer

__all__ = [
    "PATH_NAMES",
    "ConvPath",
    "FCPath",
    "GConvPath",
    "GroupPool",
    "Lift",
    "Path",
    "PolyphaseDownsample",
    "RelaxedLayer",
    "per_module_calls",
    "polyphase_downsample",
]
