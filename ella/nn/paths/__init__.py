"""The four kinds of path of a relaxed layer, on lifted tensors (B, |G|, C, H, W).

Every parameter is the weight or bias of an ``nn.Linear``, an ``nn.Conv2d`` or an
FC path's :class:`~ella.nn.batched.BatchedLinear` (one linear map per channel);
symmetry lives in parameter-free reshapes and gathers around those modules. This
is what lets the Kronecker-factored curvature backends handle every path: sharing a
filter over the group copies is presented to them as a larger batch (KFAC "expand"
over the group axis), and the evidence sees an FC stage's maps as one ``nn.Linear``
per channel (:mod:`ella.marglik.per_channel`).

Paths (van der Ouderaa et al., "Learning Layer-wise Equivariances
Automatically using Gradients", NeurIPS 2023, Sec. 3):

* :class:`FCPath` -- fully connected between whole feature maps, no symmetry.
* :class:`ConvPath` -- convolution over space that mixes the group copies:
  equivariant to (circular) translations only.
* :class:`GConvPath` -- group convolution: exactly equivariant to the group.
* :class:`ResidualConvPath` -- the part of a CONV path that breaks the group's
  symmetry, and only it, meant beside a GCONV path.

A CONV or GCONV path with ``stride=2`` computes at full resolution and halves
its output by ``downsample`` (:mod:`ella.nn.downsample`: one polyphase
component per sample, or 2x2 max); the FC path maps straight to the smaller
output grid.
"""

from __future__ import annotations

from ella.nn.paths.base import Path, contiguous_grad, per_module_calls
from ella.nn.paths.conv import ConvPath
from ella.nn.paths.fc import FCPath, by_output
from ella.nn.paths.fused import (
    FusedPath,
    LiftedConvolution,
    adds_filters,
    convolve_paths,
    fusable_paths,
)
from ella.nn.paths.gconv import GConvPath
from ella.nn.paths.residual import ResidualConvPath, residual_basis

__all__ = [
    "ConvPath",
    "FCPath",
    "FusedPath",
    "GConvPath",
    "LiftedConvolution",
    "Path",
    "ResidualConvPath",
    "adds_filters",
    "by_output",
    "contiguous_grad",
    "convolve_paths",
    "fusable_paths",
    "per_module_calls",
    "residual_basis",
]
