"""Affine transformations as exponentials of generators (van der Ouderaa & van der Wilk, UAI 2022).

A transformation is ``T = expm(sum_i eps_i eta_i G_i)`` with one coefficient
``eps_i ~ U[-1, 1]`` per generator ``G_i`` and a learned extent ``eta_i >= 0``
per generator. The six generators, as 3x3 matrices acting on homogeneous
normalised coordinates ``(x, y, 1)``:

========== ====================== =============================================
name       generator              ``eta = 1`` means
========== ====================== =============================================
translate_x ``[[0,0,1],[0,0,0],...]`` shifts up to half the image width
translate_y ``[[0,0,0],[0,0,1],...]`` shifts up to half the image height
rotate     ``[[0,-1,0],[1,0,0],...]`` rotations up to 1 radian (``pi``: all angles)
scale_x    ``[[1,0,0],[0,0,0],...]`` widths scaled by ``e^{-1} .. e^{1}``
scale_y    ``[[0,0,0],[0,1,0],...]`` heights scaled by ``e^{-1} .. e^{1}``
shear      ``[[0,1,0],[0,0,0],...]`` ``x += s y`` with ``|s| <= 1``
========== ====================== =============================================

Convention (one for all of ella, see :mod:`ella.groups`): coordinates are
``affine_grid``'s, ``[-1, 1]`` across the image with ``align_corners=False``,
``x`` along the width and ``y`` down the height; ``T`` maps output
coordinates to the input coordinates sampled there. Because ``eps`` is
symmetric, ``T`` and ``T^{-1} = expm(-sum eps eta G)`` have the same
distribution, so it does not matter whether ``T`` is read as moving pixels or
coordinates, and the sign of ``eta_i`` is irrelevant (we report ``|eta|``).
A pure rotation ``eps eta`` turns the image by that angle counter-clockwise,
as :func:`ella.groups.rotate` and ``torch.rot90`` do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from ella.choices import Generator
from ella.groups import resample_affine

__all__ = [
    "FULL_EXTENTS",
    "GENERATORS",
    "generator_matrices",
    "affine_matrices",
    "transform_images",
    "generator_indices",
    "eta_as_dict",
]

#: The six affine generators, in the order of ``eta`` vectors.
GENERATORS: tuple[str, ...] = Generator.values()

#: Extents of the "full" augmentation baseline: shifts up to a quarter of the
#: image, all rotations, scales and shears up to ``e^{0.5}`` (about 1.65).
FULL_EXTENTS: dict[str, float] = {
    "translate_x": 0.5,
    "translate_y": 0.5,
    "rotate": math.pi,
    "scale_x": 0.5,
    "scale_y": 0.5,
    "shear": 0.5,
}

_ENTRIES = {  # (row, column, value) of the nonzero entries of each generator
    "translate_x": [(0, 2, 1.0)],
    "translate_y": [(1, 2, 1.0)],
    "rotate": [(0, 1, -1.0), (1, 0, 1.0)],
    "scale_x": [(0, 0, 1.0)],
    "scale_y": [(1, 1, 1.0)],
    "shear": [(0, 1, 1.0)],
}


def generator_indices(names: Sequence[str]) -> list[int]:
    """Positions of generator ``names`` in :data:`GENERATORS`; a clear error for unknown names."""
    unknown = [n for n in names if n not in GENERATORS]
    if unknown:
        raise ValueError(f"unknown generator(s) {unknown}; choose from {', '.join(GENERATORS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"generators listed twice: {list(names)}")
    return [GENERATORS.index(n) for n in names]


def generator_matrices(
    dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """The generators as a (6, 3, 3) tensor, in the order of :data:`GENERATORS`."""
    g = torch.zeros(len(GENERATORS), 3, 3, dtype=dtype, device=device)
    for i, name in enumerate(GENERATORS):
        for row, col, value in _ENTRIES[name]:
            g[i, row, col] = value
    return g


def affine_matrices(eps: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    """Sampling matrices ``expm(sum_i eps_i eta_i G_i)[:2]``.

    Args:
        eps: (N, 6) coefficients, normally ``U[-1, 1]``.
        eta: (6,) extents per generator (differentiable).

    Returns:
        (N, 2, 3) matrices for :func:`ella.groups.resample_affine`.
    """
    if eps.dim() != 2 or eps.shape[-1] != len(GENERATORS):
        raise ValueError(f"eps must have shape (N, {len(GENERATORS)}), got {tuple(eps.shape)}")
    if eta.shape != (len(GENERATORS),):
        raise ValueError(f"eta must have shape ({len(GENERATORS)},), got {tuple(eta.shape)}")
    gens = generator_matrices(eta.dtype, eta.device)
    lie = torch.einsum("ni,ijk->njk", eps.to(eta.dtype) * eta, gens)
    return torch.linalg.matrix_exp(lie)[:, :2, :]


def transform_images(x: torch.Tensor, eps: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    """Transform image ``n`` of ``x`` (N, C, H, W) by ``expm(sum_i eps[n, i] eta_i G_i)``.

    Bilinear resampling, out-of-image pixels filled with the image's minimum;
    differentiable in ``x`` and ``eta``.
    """
    if x.dim() != 4:
        raise ValueError(f"expected images of shape (N, C, H, W), got shape {tuple(x.shape)}")
    if len(eps) != len(x):
        raise ValueError(f"need one row of eps per image: {len(eps)} rows for {len(x)} images")
    return resample_affine(x, affine_matrices(eps, eta))


def eta_as_dict(eta: torch.Tensor) -> dict[str, float]:
    """``{generator name: |eta_i|}`` (rotation in radians)."""
    return {name: abs(float(v)) for name, v in zip(GENERATORS, eta.detach().cpu(), strict=True)}


def eta_from_mapping(values: Mapping[str, float], default: float = 0.0) -> torch.Tensor:
    """A (6,) eta from ``{generator name: extent}``; unnamed generators get ``default``."""
    generator_indices(list(values))
    return torch.tensor([float(values.get(n, default)) for n in GENERATORS])
