"""Drop-in layers with FC, CONV, GCONV and residual paths on lifted tensors (B, |G|, C, H, W)."""

from ella.nn.downsample import PolyphaseDownsample, polyphase_downsample
from ella.nn.kinds import ALL_PATH_NAMES, PATH_KINDS, PATH_NAMES, path_columns
from ella.nn.lift import GroupPool, Lift
from ella.nn.options import LayerOptions
from ella.nn.paths import ConvPath, FCPath, GConvPath, Path, ResidualConvPath, per_module_calls
from ella.nn.relaxed import RelaxedLayer

__all__ = [
    "ALL_PATH_NAMES",
    "PATH_KINDS",
    "PATH_NAMES",
    "ConvPath",
    "FCPath",
    "GConvPath",
    "GroupPool",
    "LayerOptions",
    "Lift",
    "Path",
    "PolyphaseDownsample",
    "RelaxedLayer",
    "ResidualConvPath",
    "path_columns",
    "per_module_calls",
    "polyphase_downsample",
]
