"""Corrupted test images for robustness evaluation, in torch.

After Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common
Corruptions and Perturbations" (ICLR 2019), whose CIFAR-10-C / CIFAR-100-C the
FoRDE paper (Trinh et al., ICLR 2024) evaluates on. The full -C sets are not
available offline, so ella builds corrupted test sets on the fly from any
test set: each corruption maps images in [0, 1] (N, C, H, W) to images in
[0, 1] of the same shape, at severities 1 (mild) to 5 (strong), with noise
drawn from an explicit generator (the same corrupted set every time).

Severity parameters are on the scale of the CIFAR-10-C ones (noise standard
deviations 0.04-0.10, blur sigma 0.4-1 pixel, contrast factors 0.75-0.15, ...);
brightness is additive in [0, 1] here, not a change of the HSV value channel.
These are not the published CIFAR-10-C images, and numbers on them are not
comparable one to one with the papers' -C results.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "CORRUPTIONS",
    "SEVERITIES",
    "corrupt",
    "corrupt_standardised",
]

SEVERITIES = (1, 2, 3, 4, 5)

#: per-corruption parameter at severities 1..5
PARAMETERS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # noise std
    "shot_noise": (500.0, 250.0, 100.0, 75.0, 50.0),  # photons per unit intensity
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # fraction of salt-and-pepper pixels
    "speckle_noise": (0.06, 0.10, 0.12, 0.16, 0.20),  # multiplicative noise std
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # blur sigma in pixels
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor towards each image's mean
    "brightness": (0.05, 0.10, 0.15, 0.20, 0.30),  # added intensity
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # resolution factor
}


def _gaussian_noise(x, c, g):
    return x + c * torch.randn(x.shape, generator=g, dtype=x.dtype)


def _shot_noise(x, c, g):
    return torch.poisson(x.clamp_min(0) * c, generator=g) / c


def _impulse_noise(x, c, g):
    u = torch.rand(x.shape, generator=g, dtype=x.dtype)
    out = x.clone()
    out[u < c / 2] = 0.0
    out[(u >= c / 2) & (u < c)] = 1.0
    return out


def _speckle_noise(x, c, g):
    return x + x * c * torch.randn(x.shape, generator=g, dtype=x.dtype)


def _gaussian_blur(x, sigma, g):
    radius = max(1, math.ceil(3 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=x.dtype)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    k = k / k.sum()
    c = x.shape[1]
    padded = F.pad(x, (radius, radius, radius, radius), mode="replicate")
    out = F.conv2d(padded, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(out, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def _contrast(x, c, g):
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * c + mean


def _brightness(x, c, g):
    return x + c


def _pixelate(x, c, g):
    # resolution loss: antialiased bilinear down to a factor c, bilinear back up. CIFAR-10-C's
    # box down/up sampling damages 28-32 pixel images non-monotonically in c (non-integer ratios)
    h, w = x.shape[-2:]
    size = (max(1, int(h * c)), max(1, int(w * c)))
    small = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    return F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False)


_FUNCTIONS: dict[str, Callable] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "speckle_noise": _speckle_noise,
    "gaussian_blur": _gaussian_blur,
    "contrast": _contrast,
    "brightness": _brightness,
    "pixelate": _pixelate,
}
CORRUPTIONS: tuple[str, ...] = tuple(_FUNCTIONS)


def corrupt(
    x: torch.Tensor, name: str, severity: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Corrupt images in [0, 1].

    Args:
        x: images (N, C, H, W) with values in [0, 1].
        name: one of :data:`CORRUPTIONS`.
        severity: 1 (mild) to 5 (strong).
        generator: random generator for the noise corruptions (default: seed 0).

    Returns:
        Corrupted images (N, C, H, W), clipped to [0, 1].
    """
    if name not in _FUNCTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose from {', '.join(CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, got {severity}")
    if x.dim() != 4:
        raise ValueError(f"expected images of shape (N, C, H, W), got shape {tuple(x.shape)}")
    if x.numel() and (x.min() < 0 or x.max() > 1):
        raise ValueError(
            "corruptions act on images in [0, 1]; for standardised images use "
            "corrupt_standardised(x, name, severity, mean, std)"
        )
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    out = _FUNCTIONS[name](x, PARAMETERS[name][severity - 1], generator)
    return out.clamp(0.0, 1.0)


def corrupt_standardised(
    x: torch.Tensor,
    name: str,
    severity: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Corrupt standardised images ``(x01 - mean) / std``: undo, corrupt in [0, 1], redo.

    Args:
        x: standardised images (N, C, H, W), e.g. an :class:`~ella.data.ImageData` test set.
        name: the corruption, as in :func:`corrupt`.
        severity: its severity, as in :func:`corrupt`.
        mean: per-channel means used to standardise ``x``
            (:func:`ella.data.datasets.standardisation`).
        std: per-channel standard deviations used to standardise ``x``.
        generator: the random draws' generator, as in :func:`corrupt`.
    """
    m = torch.tensor(mean, dtype=x.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, -1, 1, 1)
    x01 = (x * s + m).clamp(0.0, 1.0)
    return (corrupt(x01, name, severity, generator) - m) / s
