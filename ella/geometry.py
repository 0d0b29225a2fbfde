"""Resampling images under affine maps: the one place ella moves pixels by interpolation.

Convention (used by data variants, interpolated rotation groups and learned
invariance alike): coordinates are ``affine_grid``'s normalised coordinates,
``[-1, 1]`` across the image with ``align_corners=False``, so the origin is the
image centre. A matrix ``theta`` (N, 2, 3) maps *output* coordinates to the
*input* coordinates sampled there. Pixels that come from outside the image are
filled with each image's minimum value (its background for MNIST-like data),
so standardised inputs keep their background after a transform.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["resample_affine", "rotation_matrices", "rotate"]


def resample_affine(x: torch.Tensor, theta: torch.Tensor, mode: str = "bilinear") -> torch.Tensor:
    """Resample ``x`` (N, C, H, W) with affine matrices ``theta`` (N, 2, 3).

    Differentiable in both ``x`` and ``theta`` (bilinear mode). Out-of-image
    pixels get each image's minimum value.
    """
    if x.dim() != 4:
        raise ValueError(f"expected images of shape (N, C, H, W), got shape {tuple(x.shape)}")
    if theta.shape != (len(x), 2, 3):
        raise ValueError(
            f"expected affine matrices of shape ({len(x)}, 2, 3), got {tuple(theta.shape)}"
        )
    background = x.amin(dim=(1, 2, 3), keepdim=True)
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    out = F.grid_sample(x - background, grid, mode=mode, padding_mode="zeros", align_corners=False)
    return out + background


def rotation_matrices(angles: torch.Tensor) -> torch.Tensor:
    """(N, 2, 3) sampling matrices that rotate images by ``angles`` (N,) radians.

    Positive angles turn an image the way ``torch.rot90(x, 1, dims=(-2, -1))``
    does (counter-clockwise as displayed with row 0 at the top).
    """
    cos, sin = torch.cos(angles), torch.sin(angles)
    zero = torch.zeros_like(angles)
    return torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)


def rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate each image of ``x`` (N, C, H, W) by ``angles`` (N,) radians about its centre."""
    return resample_affine(x, rotation_matrices(angles.to(x.dtype)))
