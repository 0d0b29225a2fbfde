"""Per-sample image transforms for data variants and training-time augmentation.

All act on float batches (N, C, H, W) and draw their parameters from an explicit
``torch.Generator``, so a data variant is the same every time and an
augmented epoch is reproducible (and resumable). Geometric transforms resample
with ``affine_grid``/``grid_sample`` (bilinear, ``align_corners=False``) and fill
with each image's minimum, its background for MNIST-like data.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ella.choices import Augmentation
from ella.groups import get_group, resample_affine
from ella.groups import rotate as _rotate


def _chunked(fn, x: torch.Tensor, *params: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    return torch.cat(
        [fn(x[i : i + chunk], *(p[i : i + chunk] for p in params)) for i in range(0, len(x), chunk)]
    )


def rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate each image by ``angles`` (N,) radians about its centre (:func:`ella.groups.rotate`).

    Positive angles turn the image the way ``torch.rot90(x, 1, dims=(-2, -1))``
    does (counter-clockwise as displayed with row 0 at the top).
    """
    return _chunked(_rotate, x, angles)


def translate(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Shift each image by whole pixels ``shifts`` (N, 2) = (dy, dx), filling with background."""

    def one(xs, s):
        h, w = xs.shape[-2:]
        n = len(xs)
        theta = torch.zeros(n, 2, 3, device=xs.device)
        theta[:, 0, 0] = theta[:, 1, 1] = 1.0
        theta[:, 0, 2] = -2.0 * s[:, 1].float() / w
        theta[:, 1, 2] = -2.0 * s[:, 0].float() / h
        return resample_affine(xs, theta, mode="nearest")

    return _chunked(one, x, shifts)


def scale(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Zoom each image about its centre by ``factors`` (N,) (> 1 enlarges)."""

    def one(xs, f):
        n = len(xs)
        theta = torch.zeros(n, 2, 3, device=xs.device)
        theta[:, 0, 0] = theta[:, 1, 1] = 1.0 / f
        return resample_affine(xs, theta)

    return _chunked(one, x, factors)


def act_per_sample(x: torch.Tensor, group: str, elements: torch.Tensor) -> torch.Tensor:
    """Act on image ``i`` with group element ``elements[i]`` (exact for C4/D4): every
    element acts on the whole batch and each image keeps its own, so that nothing is read
    back from the device."""
    g = get_group(group)
    acted = torch.stack([g.act_on_image(e, x) for e in range(g.order)])
    return acted[elements.to(x.device), torch.arange(len(x), device=x.device)]


def place_in_quadrant(x: torch.Tensor, quadrants: torch.Tensor, out_size: int = 32) -> torch.Tensor:
    """Put each (N, C, S, S) image in quadrant 0..3 of a 2S x 2S canvas, resized to ``out_size``.

    Quadrants: 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right.
    """
    n, c, s, _ = x.shape
    background = x.amin(dim=(1, 2, 3), keepdim=True)
    canvas = background.expand(n, c, 2 * s, 2 * s).clone()
    for q in range(4):
        idx = (quadrants == q).nonzero().flatten()
        r, col = divmod(q, 2)
        canvas[idx, :, r * s : (r + 1) * s, col * s : (col + 1) * s] = x[idx]
    return F.interpolate(canvas, size=(out_size, out_size), mode="bilinear", antialias=True)


# ---------------------------------------------------------------- random parameters
def random_angles(n: int, degrees: float, generator: torch.Generator) -> torch.Tensor:
    """(n,) angles in radians, uniform in [-degrees, degrees]."""
    return (torch.rand(n, generator=generator) * 2 - 1) * math.radians(degrees)


def random_shifts(n: int, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """(n, 2) integer pixel shifts, uniform in [-max_shift, max_shift] on each axis."""
    return torch.randint(-max_shift, max_shift + 1, (n, 2), generator=generator)


def random_scales(n: int, low: float, high: float, generator: torch.Generator) -> torch.Tensor:
    """(n,) scale factors, log-uniform in [low, high]."""
    return torch.exp(torch.empty(n).uniform_(math.log(low), math.log(high), generator=generator))


AUGMENTATIONS = Augmentation.values()


def draw_augmentation(
    kind: str, n: int, generator: torch.Generator, max_shift: int = 4
) -> torch.Tensor | None:
    """The parameters of ``kind``'s augmentation of ``n`` images, drawn from ``generator``
    (on the CPU): group elements (n,) for ``c4``/``d4``, angles (n,) for ``rotate``, shifts
    (n, 2) for ``translate``, factors (n,) for ``scale``; None for ``none``.

    Drawing an epoch's batches one after the other gives the draws that augmenting them
    one after the other gives, so they can be drawn up front and moved to the device once.
    """
    kind = Augmentation.parse(kind, "augmentation")
    if kind == Augmentation.NONE:
        return None
    if kind in (Augmentation.C4, Augmentation.D4):
        return torch.randint(get_group(kind).order, (n,), generator=generator)
    if kind == Augmentation.ROTATE:
        return random_angles(n, 180.0, generator)
    if kind == Augmentation.TRANSLATE:
        return random_shifts(n, max_shift, generator)
    if kind == Augmentation.SCALE:
        return random_scales(n, 0.8, 1.25, generator)
    raise ValueError(f"unknown augmentation {kind!r}; choose from {', '.join(AUGMENTATIONS)}")


def apply_augmentation(x: torch.Tensor, kind: str, params: torch.Tensor | None) -> torch.Tensor:
    """Augment the batch ``x`` with the parameters :func:`draw_augmentation` drew for it,
    on ``x``'s device, batched."""
    kind = Augmentation.parse(kind, "augmentation")
    if kind == Augmentation.NONE:
        return x
    params = params.to(x.device)
    if kind in (Augmentation.C4, Augmentation.D4):
        return act_per_sample(x, kind, params)
    if kind == Augmentation.ROTATE:
        return rotate(x, params)
    if kind == Augmentation.TRANSLATE:
        return translate(x, params)
    if kind == Augmentation.SCALE:
        return scale(x, params)
    raise ValueError(f"unknown augmentation {kind!r}; choose from {', '.join(AUGMENTATIONS)}")


def augment(
    x: torch.Tensor, kind: str, generator: torch.Generator, max_shift: int = 4
) -> torch.Tensor:
    """Training-time augmentation of a batch, drawn independently per image.

    ``kind``: ``none``; ``c4``/``d4`` (a random exact group element); ``rotate``
    (angle U[-180, 180] degrees); ``translate`` (shift U{-max_shift..max_shift}
    pixels along each axis); ``scale`` (factor log-uniform in [0.8, 1.25]).
    """
    return apply_augmentation(x, kind, draw_augmentation(kind, len(x), generator, max_shift))
