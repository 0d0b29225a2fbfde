"""Drop-in layers with FC, CONV and GCONV paths on lifted tensors (B, |G|, C, H, W)."""

from ella.nn.downsample import PolyphaseDownsample, polyphase_downsample
from ella.nn.lift import GroupPool, Lift
from ella.nn.paths import ConvPath, FCPath, GConvPath, Path
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
    "polyphase_downsample",
]
