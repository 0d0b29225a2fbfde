"""Finite groups that act on square images and on lifted tensors.

A group here is a finite set of elements ``0 .. order-1`` with a Cayley table
(``compose``), an action on image batches ``(B, C, H, W)``, and the induced
action on *lifted* tensors ``(B, |G|, C, H, W)``.

Lifting (see :class:`ella.nn.Lift`) stores, at group index ``h``, the image
acted on by ``h``: ``lift(x)[:, h] = h . x``. Acting on the input with ``g``
therefore only permutes the group axis::

    lift(g . x)[:, h] = (h g) . x = lift(x)[:, h g]

so ``g`` acts on a lifted tensor ``z`` by ``(g . z)[:, h] = z[:, h g]``. This
is the "rotated-frame" representation of the ELLA reference code: no spatial
transform is needed on lifted tensors, and every operation that treats the
group copies identically (a shared filter, a pointwise nonlinearity, a
per-sample downsampling whose choice does not depend on the order of copies)
is exactly equivariant.

Only :meth:`Group.act_on_image` depends on how elements move pixels, so a new
group (for example an interpolated, approximately equivariant ``C_N``) needs
a Cayley table and an image action, and nothing in :mod:`ella.nn` changes.

Images are moved by interpolation in one place, :func:`resample_affine` (used by data
variants, interpolated rotation groups and learned invariance alike). Its convention:
coordinates are ``affine_grid``'s normalised coordinates, ``[-1, 1]`` across the image with
``align_corners=False``, so the origin is the image centre. A matrix ``theta`` (N, 2, 3)
maps *output* coordinates to the *input* coordinates sampled there. Pixels that come from
outside the image are filled with each image's minimum value (its background for
MNIST-like data), so standardised inputs keep their background after a transform.
"""

from __future__ import annotations

import functools
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import cached_property
from typing import Literal

import torch
import torch.nn.functional as F

__all__ = [
    "resample_affine",
    "rotate",
    "rotation_matrices",
    "Group",
    "MatrixGroup",
    "TrivialGroup",
    "CircularTranslations",
    "C4",
    "D4",
    "RotationGroup",
    "get_group",
    "layer_group",
    "available_groups",
    "Action",
    "ACTIONS",
    "group_action",
]


# ---------------------------------------------------------------- resampling images
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


class Group(ABC):
    """A finite group acting on images.

    Subclasses provide :attr:`order`, :meth:`compose` and :meth:`act_on_image`;
    everything else (inverse, the lifted action, the regular permutations) is
    derived from the Cayley table.
    """

    #: short name used by :func:`get_group`, e.g. ``"C4"``.
    name: str = ""
    #: whether :meth:`act_on_image` needs square images.
    requires_square: bool = False
    #: whether every element moves pixels exactly (no interpolation); ella's layers
    #: accept only such groups (:func:`layer_group`).
    exact: bool = True

    @property
    @abstractmethod
    def order(self) -> int:
        """Number of elements |G|."""

    @abstractmethod
    def compose(self, a: int, b: int) -> int:
        """Index of the product ``a b`` (act with ``b`` first, then ``a``)."""

    @abstractmethod
    def _act_on_image(self, g: int, x: torch.Tensor) -> torch.Tensor:
        """Act with element ``g`` on a validated image batch (B, C, H, W)."""

    # ------------------------------------------------------------------ derived
    @property
    def elements(self) -> list[int]:
        """Element indices ``0 .. order-1``; ``0`` is the identity."""
        return list(range(self.order))

    @property
    def identity(self) -> int:
        """The index of the identity element (always 0)."""
        return 0

    @cached_property
    def cayley_table(self) -> torch.Tensor:
        """(|G|, |G|) long tensor with ``table[a, b] = compose(a, b)``."""
        n = self.order
        return torch.tensor(
            [[self.compose(a, b) for b in range(n)] for a in range(n)], dtype=torch.long
        )

    def inverse(self, g: int) -> int:
        """Index of the inverse of ``g``."""
        row = self.cayley_table[g]
        return int((row == self.identity).nonzero()[0, 0])

    def check_image(self, x: torch.Tensor) -> None:
        """Raise a clear error if ``x`` is not an image batch this group can act on."""
        if x.dim() != 4:
            raise ValueError(
                f"expected an image batch of shape (B, C, H, W), got shape {tuple(x.shape)}"
            )
        if self.requires_square and x.shape[-1] != x.shape[-2]:
            raise ValueError(
                f"group {self.name} rotates images and needs square images, got "
                f"H x W = {x.shape[-2]} x {x.shape[-1]}; crop or pad the input to a square"
            )

    def act_on_image(self, g: int, x: torch.Tensor) -> torch.Tensor:
        """Act with element ``g`` on an image batch.

        Args:
            g: element index in ``0 .. order-1``.
            x: images of shape (B, C, H, W).

        Returns:
            ``g . x``, same shape as ``x``.
        """
        self._check_element(g)
        self.check_image(x)
        return self._act_on_image(g, x)

    def lifted_permutation(self, g: int) -> torch.Tensor:
        """Permutation ``p`` with ``(g . z)[:, h] = z[:, p[h]]``, i.e. ``p[h] = h g``."""
        self._check_element(g)
        return self.cayley_table[:, g].clone()

    def act_on_lifted(self, g: int, z: torch.Tensor) -> torch.Tensor:
        """Act with ``g`` on a lifted tensor (B, |G|, C, H, W) by permuting the group axis."""
        if z.dim() != 5 or z.shape[1] != self.order:
            raise ValueError(
                f"expected a lifted tensor of shape (B, {self.order}, C, H, W) for group "
                f"{self.name}, got shape {tuple(z.shape)}"
            )
        return z[:, self.lifted_permutation(g).to(z.device)]

    def _check_element(self, g: int) -> None:
        if not 0 <= int(g) < self.order:
            raise ValueError(f"group {self.name} has elements 0..{self.order - 1}, got {g}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, order={self.order})"


class TrivialGroup(Group):
    """The group with one element; acts as the identity on any image."""

    name = "trivial"

    @property
    def order(self) -> int:
        """The number of elements, 1."""
        return 1

    def compose(self, a: int, b: int) -> int:
        """The identity's index 0, the only product."""
        return 0

    def _act_on_image(self, g: int, x: torch.Tensor) -> torch.Tensor:
        return x


class MatrixGroup(Group):
    """A finite group of exact pixel-grid symmetries given by 2x2 integer matrices.

    Element ``k`` is ``R^r F^f`` for its ``(r, f)`` in :attr:`generators_powers`,
    where ``R`` is a 90-degree counter-clockwise rotation (``torch.rot90`` on the
    last two axes) and ``F`` a reflection of the width axis (``torch.flip``).
    Composition is matrix multiplication, so the Cayley table is exact.
    """

    requires_square = True
    _R = torch.tensor([[0, -1], [1, 0]])
    _F = torch.tensor([[-1, 0], [0, 1]])

    def __init__(self, name: str, powers: list[tuple[int, int]]):
        self.name = name
        self.generators_powers = powers
        self._matrices = [
            torch.linalg.matrix_power(self._R, r) @ torch.linalg.matrix_power(self._F, f)
            for r, f in powers
        ]
        self._index = {tuple(m.flatten().tolist()): i for i, m in enumerate(self._matrices)}
        if len(self._index) != len(powers):
            raise ValueError(f"elements of {name} are not distinct")

    @property
    def order(self) -> int:
        """The number of matrices, 4 for C4 and 8 for D4."""
        return len(self._matrices)

    def compose(self, a: int, b: int) -> int:
        """The index of the matrix product ``M_a M_b`` (``b`` first, then ``a``)."""
        product = self._matrices[a] @ self._matrices[b]
        try:
            return self._index[tuple(product.flatten().tolist())]
        except KeyError:  # pragma: no cover - only for a malformed element list
            raise ValueError(f"{self.name} is not closed under composition") from None

    def _act_on_image(self, g: int, x: torch.Tensor) -> torch.Tensor:
        r, f = self.generators_powers[g]
        if f:
            x = torch.flip(x, dims=(-1,))
        return torch.rot90(x, k=r, dims=(-2, -1))


class CircularTranslations(Group):
    """Circular pixel shifts of an ``H x W`` grid (the group Z_H x Z_W).

    Element ``g`` is the shift ``(dy, dx) = divmod(g, W)``, acting with
    ``torch.roll``. It acts on lifted tensors by shifting every group copy in
    the same way (it commutes with a rotation group's permutation of copies
    only through a CONV or GCONV path, which is what the tests check). Used to
    test the translation equivariance of CONV paths.
    """

    name = "translations"

    def __init__(self, height: int, width: int):
        self.height, self.width = int(height), int(width)

    @property
    def order(self) -> int:
        """The number of shifts, ``H W``."""
        return self.height * self.width

    def shift(self, g: int) -> tuple[int, int]:
        """The ``(dy, dx)`` shift of element ``g``."""
        return divmod(int(g), self.width)

    def compose(self, a: int, b: int) -> int:
        """The index of the shift ``a`` plus ``b``, modulo the grid's size."""
        (ya, xa), (yb, xb) = self.shift(a), self.shift(b)
        return ((ya + yb) % self.height) * self.width + (xa + xb) % self.width

    def _roll(self, g: int, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[-2:]) != (self.height, self.width):
            raise ValueError(
                f"translations of a {self.height}x{self.width} grid cannot act on size "
                f"{tuple(x.shape[-2:])}"
            )
        return torch.roll(x, shifts=self.shift(g), dims=(-2, -1))

    def _act_on_image(self, g: int, x: torch.Tensor) -> torch.Tensor:
        return self._roll(g, x)

    def act_on_lifted(self, g: int, z: torch.Tensor) -> torch.Tensor:
        """Shift every group copy of ``z`` (..., H, W) by ``g``, leaving the group axis."""
        self._check_element(g)
        return self._roll(g, z)


class RotationGroup(Group):
    """The cyclic group ``C_N`` of rotations by multiples of ``360/N`` degrees.

    Element ``k`` rotates by ``2 pi k / N`` counter-clockwise (as ``rot90``).
    Rotations by multiples of 90 degrees use ``torch.rot90`` and are exact;
    the others resample bilinearly (:func:`ella.groups.rotate`, corners
    filled with each image's minimum), so for ``N = 8, 16`` the action is only
    approximately a group action: ``act(a, act(b, x))`` differs from
    ``act(a b, x)`` by interpolation error. This is the "interpolated
    rotation" the emergent-equivariance paper uses for C8 and C16, and why
    even an exactly C4-equivariant network scores below ``|G|`` there.
    """

    requires_square = True

    def __init__(self, n: int):
        if int(n) < 1:
            raise ValueError(f"a rotation group needs n >= 1 elements, got {n}")
        self.n = int(n)
        self.name = f"C{self.n}"
        self.exact = 4 % self.n == 0  # only multiples of 90 degrees

    @property
    def order(self) -> int:
        """The number of rotations, ``N``."""
        return self.n

    def compose(self, a: int, b: int) -> int:
        """The index ``(a + b) mod N`` of rotating by ``b`` then ``a``."""
        return (a + b) % self.n

    def angle(self, g: int) -> float:
        """Rotation angle of element ``g`` in radians."""
        return 2 * math.pi * int(g) / self.n

    def is_exact(self, g: int) -> bool:
        """Whether element ``g`` moves pixels exactly (a multiple of 90 degrees)."""
        return (4 * int(g)) % self.n == 0

    def _act_on_image(self, g: int, x: torch.Tensor) -> torch.Tensor:
        if self.is_exact(g):
            return torch.rot90(x, k=(4 * int(g)) // self.n, dims=(-2, -1))
        angles = torch.full((len(x),), self.angle(g), dtype=x.dtype, device=x.device)
        return rotate(x, angles)


def C4() -> MatrixGroup:
    """Cyclic group of the four 90-degree rotations (``rot90``)."""
    return MatrixGroup("C4", [(r, 0) for r in range(4)])


def D4() -> MatrixGroup:
    """Dihedral group of the square: four rotations and four reflections."""
    return MatrixGroup("D4", [(r, f) for f in range(2) for r in range(4)])


_REGISTRY = {"trivial": TrivialGroup, "C4": C4, "D4": D4}
_ROTATIONS = re.compile(r"c(\d+)")
#: the largest N of ``C<N>``: finer rotations (under 6 degrees) move a 28-pixel image's
#: border by under 1.5 pixels, and every measurement's cost grows with N
MAX_ROTATIONS = 64


def available_groups() -> list[str]:
    """Names accepted by :func:`get_group` besides ``C<N>`` (interpolated rotations)."""
    return list(_REGISTRY)


@functools.cache
def _named_group(key: str) -> Group:
    """One instance per exact group (they hold no state that changes)."""
    return _REGISTRY[key]()


def get_group(group: str | Group) -> Group:
    """Return a group from its name or pass one through.

    Names: ``"trivial"``, ``"C4"`` and ``"D4"`` (exact pixel symmetries, the
    groups ella's layers lift to), and ``"C<N>"`` for any other ``N`` (e.g.
    ``"C8"``, ``"C16"``; ``N`` up to :data:`MAX_ROTATIONS`): rotations by ``360/N``
    degrees with interpolation, see :class:`RotationGroup`. Case does not matter.
    """
    if isinstance(group, Group):
        return group
    name = str(group).lower()
    key = {n.lower(): n for n in _REGISTRY}.get(name)
    if key is not None:
        return _named_group(key)
    match = _ROTATIONS.fullmatch(name)
    if match and int(match.group(1)) > MAX_ROTATIONS:
        raise ValueError(
            f"group {group!r} has {int(match.group(1))} elements; C<N> takes N up to "
            f"{MAX_ROTATIONS} (rotations by {360 / MAX_ROTATIONS:.3g} degrees or more)"
        )
    if match and int(match.group(1)) >= 1:
        return RotationGroup(int(match.group(1)))
    raise ValueError(
        f"unknown group {group!r}; available groups: {', '.join(available_groups())}, "
        "or C<N> for N-fold interpolated rotations (e.g. C8, C16)"
    )


def layer_group(group: str | Group) -> Group:
    """The group for ella's layers (lifting, relaxed layers, pooling): exact groups only.

    Interpolated rotation groups (``C8``, ``C16``, any ``C<N>`` with N not dividing 4)
    move pixels only approximately, so a "GCONV-only" network over them would not
    be invariant (a C8 mixer's invariance error is about 0.08); they are refused
    here and remain available for augmentation and the symmetry metrics.
    """
    group = get_group(group)
    if not group.exact:
        raise ValueError(
            f"ella's layers need a group that acts exactly on pixels (trivial, C4 or D4); "
            f"{group.name} rotates by interpolation. Use it for augmentation or metrics only"
        )
    return group


#: How a group acts on a tensor, by name: ``"image"`` on (B, C, H, W) batches,
#: ``"lifted"`` on lifted tensors (B, |G|, C, H, W), ``"invariant"`` not at all.
Action = Literal["image", "lifted", "invariant"]
ACTIONS: tuple[str, ...] = ("image", "lifted", "invariant")


def group_action(group: str | Group, kind: Action) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """The map ``(g, t) -> g . t`` for the action named ``kind``.

    Args:
        group: a group or its name.
        kind: ``"image"`` (:meth:`Group.act_on_image`), ``"lifted"``
            (:meth:`Group.act_on_lifted`) or ``"invariant"`` (the trivial
            action, ``g . t = t``).

    Raises:
        ValueError: for any other ``kind``.
    """
    group = get_group(group)
    if kind == "image":
        return group.act_on_image
    if kind == "lifted":
        return group.act_on_lifted
    if kind == "invariant":
        return lambda g, t: t
    raise ValueError(f"unknown action {kind!r}; use one of {', '.join(map(repr, ACTIONS))}")
