"""The G-empirical equivariance deviation (G-EED) family of Kvinge et al. (2022).

Kvinge, Emerson, Jorgenson, Vasquez, Doster & Lew, "In What Ways Are Deep
Neural Networks Invariant and How Should We Measure This?" (NeurIPS 2022).
For a function ``f``, a finite group ``G`` acting on its inputs and outputs,
data ``D`` and a distance ``m`` (larger = further apart), their eq. (4) is::

    E(f, G) = 1 / (|D| |G|)  sum_{x in D} sum_{g in G}  m(f(g x), g f^(x))

where ``f^`` (their eq. 2) averages ``f(g x)`` over the elements that act
trivially on the output. Two cases cover every use here:

* **invariance** (``G`` acts trivially on the output: logits, softmax
  outputs, pooled features): ``f^(x) = 1/|G| sum_g f(g x)``, the orbit mean;
* **equivariance** under a faithful action on the output (images, lifted
  tensors): ``f^ = f``, so ``m(f(g x), g f(x))``.

Distances ``m(a, b)``, with ``a = f(g x)`` and ``b = g f^(x)``, each zero for
``a == b`` and positive otherwise (:data:`DISTANCES`):

* ``"euclidean"``: ``||a - b||_2`` over all output entries;
* ``"cosine"``: ``1 - cos(a, b)`` over all output entries;
* ``"kl"``: ``KL(a || b) = sum_k a_k log(a_k / b_k)`` for probability vectors
  (for the softmax orbit, its mean over ``g`` is the generalised
  Jensen-Shannon divergence of the orbit's predictions);
* ``"reverse_kl"``: ``KL(b || a)``;
* ``"channel_cosine"``: the channelwise metric of Kvinge et al. eq. (5):
  every channel of a (C, H, W) or lifted (|G|, C, H, W) activation is
  flattened over ``H * W`` and ``m = 1 - 1/C sum_c cos(a_c, b_c)``.

Kvinge et al. enter similarities negated (``-cos``, so an exactly equivariant
layer scores -1); ella adds 1 so that every distance, and every G-EED, is 0
for an exactly symmetric function: ``channel_cosine = 1 + (their eq. 5)``.
A cosine between two all-zero vectors (a dead ReLU channel on both sides)
counts as 1 (identical), between a zero and a non-zero vector as 0.

The **normalised** G-EED divides by the same sum with the reference taken
from a *different* input (``x`` paired with its neighbour in the batch):
how far ``f(g x)`` moves under the group relative to how far outputs of
different inputs are apart. Random-weight networks often map all inputs to
nearly the same output and so have a small G-EED without being invariant
(Kvinge et al., Sec. 5 finding 3); their normalised G-EED stays near 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ella.groups import Action, Group, get_group, group_action
from ella.metrics.orbit import orbit_outputs

__all__ = [
    "DISTANCES",
    "Distance",
    "as_output",
    "batch_indices",
    "EquivarianceDeviation",
    "channel_cosine_distance",
    "channelwise_equivariance",
    "cosine_distance",
    "deviation_from_orbit",
    "equivariance_reference",
    "euclidean_distance",
    "geed",
    "get_distance",
    "invariance_reference",
    "kl_divergence",
    "output_invariance",
    "reverse_kl_divergence",
]

#: ``m(a, b) -> (N,)`` for a batch of outputs ``a, b`` of shape (N, ...).
Distance = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
OutputKind = Literal["logits", "softmax", "probabilities"]


def _check_pair(a: torch.Tensor, b: torch.Tensor, what: str, min_dim: int = 1) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{what}: both sides need the same shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.dim() < min_dim:
        raise ValueError(
            f"{what}: expected at least {min_dim} dimensions (N, ...), got shape {tuple(a.shape)}"
        )


def _cosine_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity along the last axis; 1 for two zero vectors, 0 for one.

    ``dot / sqrt(|a|^2 |b|^2)`` is exactly 1 for ``a == b`` in IEEE arithmetic.
    """
    dot = (a * b).sum(-1)
    aa, bb = a.square().sum(-1), b.square().sum(-1)
    denominator = (aa * bb).sqrt()
    both_zero = (aa == 0) & (bb == 0)
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    similarity = torch.where(denominator > 0, dot / safe, torch.zeros_like(dot))
    return torch.where(both_zero, torch.ones_like(similarity), similarity)


def euclidean_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``||a - b||_2`` per sample: (N, ...), (N, ...) -> (N,)."""
    _check_pair(a, b, "euclidean distance")
    return (a - b).flatten(1).norm(dim=1) if a.dim() > 1 else (a - b).abs()


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``1 - cos(a, b)`` per sample over all entries: (N, ...), (N, ...) -> (N,) in [0, 2]."""
    _check_pair(a, b, "cosine distance", min_dim=2)
    return (1 - _cosine_similarity(a.flatten(1), b.flatten(1))).clamp_min(0)


def _check_probabilities(p: torch.Tensor, what: str) -> None:
    if p.dim() != 2:
        raise ValueError(f"{what}: expected class probabilities (N, K), got shape {tuple(p.shape)}")
    if (p < 0).any() or not torch.allclose(p.sum(-1), torch.ones_like(p[:, 0]), atol=1e-3):
        raise ValueError(
            f"{what}: inputs must be probability vectors (non-negative, summing to 1 over K); "
            "for logits use output='softmax'"
        )


def kl_divergence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``KL(a || b) = sum_k a_k (log a_k - log b_k)`` per sample: (N, K), (N, K) -> (N,).

    ``0 log 0 = 0``; ``inf`` where ``b_k = 0 < a_k``.
    """
    _check_pair(a, b, "KL divergence")
    _check_probabilities(a, "KL divergence")
    _check_probabilities(b, "KL divergence")
    return (torch.xlogy(a, a) - torch.xlogy(a, b)).sum(-1).clamp_min(0)


def reverse_kl_divergence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``KL(b || a)`` per sample: the reference's divergence from the moved prediction."""
    return kl_divergence(b, a)


def channel_cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Channelwise distance of Kvinge et al. eq. (5), shifted by 1 (0 = equal).

    Args:
        a: activations (N, C, H, W), or lifted (N, |G|, C, H, W) whose
            ``|G| * C`` copies and channels all count as channels.
        b: activations of the same shape as ``a``.

    Returns:
        (N,) ``1 - 1/C sum_c cos(a[n, c].flatten(), b[n, c].flatten())``, in [0, 2].
    """
    _check_pair(a, b, "channelwise cosine distance")
    if a.dim() < 4:
        raise ValueError(
            "channelwise cosine distance: expected activations (N, C, H, W) or lifted "
            f"(N, |G|, C, H, W), got shape {tuple(a.shape)}; use 'cosine' for vectors"
        )
    n = a.shape[0]
    similarity = _cosine_similarity(
        a.reshape(n, -1, a.shape[-2] * a.shape[-1]), b.reshape(n, -1, b.shape[-2] * b.shape[-1])
    )
    return (1 - similarity.mean(dim=1)).clamp_min(0)


#: The distances by name (see the module docstring).
DISTANCES: dict[str, Distance] = {
    "euclidean": euclidean_distance,
    "cosine": cosine_distance,
    "kl": kl_divergence,
    "reverse_kl": reverse_kl_divergence,
    "channel_cosine": channel_cosine_distance,
}


def get_distance(distance: str | Distance) -> Distance:
    """A distance from its name in :data:`DISTANCES`, or pass a callable through."""
    if callable(distance):
        return distance
    try:
        return DISTANCES[distance]
    except KeyError:
        raise ValueError(
            f"unknown distance {distance!r}; choose from {', '.join(DISTANCES)}"
        ) from None


@dataclass(frozen=True)
class EquivarianceDeviation:
    """A G-EED with its per-input terms and its different-input baseline.

    Attributes:
        per_input: (N,) ``1/|G| sum_g m(f(g x_n), g f^(x_n))``; their mean is
            Kvinge et al. eq. (4).
        baseline_per_input: (N,) the same with the reference of another input,
            ``1/|G| sum_g m(f(g x_n), g f^(x_n'))`` (``n'`` its batch neighbour).
    """

    per_input: torch.Tensor
    baseline_per_input: torch.Tensor

    @property
    def value(self) -> float:
        """The G-EED, Kvinge et al. eq. (4)."""
        return float(self.per_input.mean())

    @property
    def baseline(self) -> float:
        """Mean distance to the reference of a different input."""
        return float(self.baseline_per_input.mean())

    @property
    def normalized(self) -> float:
        """``value / baseline``: 0 for exact symmetry, about 1 when ``g`` changes the output as
        much as changing the input does; ``nan`` when both are 0 (constant function)."""
        if self.baseline == 0:
            return float("nan") if self.value == 0 else float("inf")
        return self.value / self.baseline

    @staticmethod
    def cat(parts: Sequence[EquivarianceDeviation]) -> EquivarianceDeviation:
        """Join the deviations of consecutive batches of inputs."""
        return EquivarianceDeviation(
            torch.cat([p.per_input for p in parts]),
            torch.cat([p.baseline_per_input for p in parts]),
        )

    def as_dict(self) -> dict[str, float]:
        """``{"geed", "baseline", "normalized"}`` as plain numbers."""
        return {"geed": self.value, "baseline": self.baseline, "normalized": self.normalized}


def invariance_reference(moved: torch.Tensor) -> torch.Tensor:
    """``f^(x)`` of Kvinge et al. eq. (2) for a trivial output action: the orbit mean.

    Args:
        moved: (|G|, N, ...) with ``moved[g, n] = f(g x_n)``.

    Returns:
        (|G|, N, ...) with every ``[g, n]`` equal to ``1/|G| sum_h f(h x_n)``.
    """
    return moved.mean(dim=0, keepdim=True).expand_as(moved)


def equivariance_reference(fx: torch.Tensor, group: str | Group, action: Action) -> torch.Tensor:
    """``g f(x)`` for every element (a faithful output action, so ``f^ = f``).

    Args:
        fx: (N, ...) outputs at the untransformed inputs.
        group: the group.
        action: how it acts on ``fx`` (``"image"``, ``"lifted"`` or ``"invariant"``).

    Returns:
        (|G|, N, ...) with ``[g] = g . fx``.
    """
    group = get_group(group)
    act = group_action(group, action)
    return torch.stack([act(g, fx) for g in group.elements])


def deviation_from_orbit(
    moved: torch.Tensor, reference: torch.Tensor, distance: str | Distance
) -> EquivarianceDeviation:
    """The G-EED terms of Kvinge et al. eq. (4) from stacked orbit outputs.

    Args:
        moved: (|G|, N, ...) ``f(g x_n)``.
        reference: (|G|, N, ...) ``g f^(x_n)`` (:func:`invariance_reference` or
            :func:`equivariance_reference`).
        distance: a name in :data:`DISTANCES` or a callable ``m(a, b) -> (N,)``.

    Returns:
        The per-input deviations and the baseline that pairs ``f(g x_n)`` with
        the reference of ``x_{n-1}`` (cyclically; ``nan`` for a single input).
    """
    m = get_distance(distance)
    if moved.shape != reference.shape or moved.dim() < 2:
        raise ValueError(
            "expected moved and reference outputs of the same shape (|G|, N, ...), got "
            f"{tuple(moved.shape)} and {tuple(reference.shape)}"
        )
    order, n = moved.shape[:2]

    def mean_over_group(ref: torch.Tensor) -> torch.Tensor:
        flat = m(moved.reshape(order * n, *moved.shape[2:]), ref.reshape(order * n, *ref.shape[2:]))
        return flat.reshape(order, n).mean(dim=0)

    per_input = mean_over_group(reference)
    if n > 1:
        baseline = mean_over_group(reference.roll(1, dims=1))
    else:
        baseline = torch.full_like(per_input, float("nan"))
    return EquivarianceDeviation(per_input, baseline)


def batch_indices(n: int, batch_size: int) -> list[torch.Tensor]:
    """Index batches of near-equal size (never a lone trailing input, which has no pair)."""
    if n < 1:
        raise ValueError("need at least one input")
    if batch_size < 2:
        raise ValueError(f"batch_size must be at least 2 (inputs are paired), got {batch_size}")
    return list(torch.arange(n).tensor_split(-(-n // batch_size)))


@torch.no_grad()
def geed(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    group: str | Group,
    *,
    in_action: Action = "image",
    out_action: Action = "invariant",
    distance: str | Distance = "euclidean",
    batch_size: int = 256,
) -> EquivarianceDeviation:
    """G-EED of ``f`` on inputs ``x`` (Kvinge et al. 2022, eq. 4).

    Args:
        f: maps a batch (B, ...) to outputs (B, ...); put a module in eval mode.
        x: inputs (N, ...), e.g. images (N, C, H, W).
        group: the group, or its name.
        in_action: how the group acts on ``x`` (``"image"`` or ``"lifted"``).
        out_action: how it acts on the output; ``"invariant"`` compares with
            the orbit mean (eq. 2), any other action with ``g f(x)``.
        distance: a name in :data:`DISTANCES` or a callable ``m(a, b) -> (N,)``.
        batch_size: inputs per batch (the baseline pairs inputs within a batch).

    Returns:
        The :class:`EquivarianceDeviation` (``.value``, ``.normalized``, per input).
    """
    group = get_group(group)
    get_distance(distance)  # fail before any forward pass
    parts = []
    for index in batch_indices(len(x), batch_size):
        batch = x[index]
        moved = orbit_outputs(f, batch, group, batch_size=len(batch), action=in_action)
        if out_action == "invariant":
            reference = invariance_reference(moved)
        else:
            reference = equivariance_reference(moved[group.identity], group, out_action)
        parts.append(deviation_from_orbit(moved, reference, distance))
    return EquivarianceDeviation.cat(parts)


def channelwise_equivariance(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    group: str | Group,
    *,
    in_action: Action = "image",
    out_action: Action = "image",
    batch_size: int = 256,
) -> EquivarianceDeviation:
    """Channelwise G-EED of convolutional activations (Kvinge et al. eq. 5, plus 1).

    Compares ``f(g x)`` with ``g f(x)`` channel by channel (each channel
    flattened over ``H * W``): 0 for an exactly equivariant ``f``.

    Args:
        f: maps inputs (B, ...) to activations (B, C, H, W) or lifted (B, |G|, C, H, W),
            e.g. a path, a layer, or :func:`ella.metrics.activation_of` ``(model, name)``.
        x: inputs (N, ...).
        group: the group, or its name.
        in_action: how the group acts on ``x``.
        out_action: how it acts on the activations (``"image"`` or ``"lifted"``).
        batch_size: inputs per batch.
    """
    return geed(
        f,
        x,
        group,
        in_action=in_action,
        out_action=out_action,
        distance="channel_cosine",
        batch_size=batch_size,
    )


def as_output(output: OutputKind) -> Callable[[torch.Tensor], torch.Tensor]:
    """The map from a model's output to the output measured: identity or softmax."""
    if output in ("logits", "probabilities"):
        return lambda t: t
    if output == "softmax":
        return lambda t: t.softmax(dim=-1)
    raise ValueError(f"unknown output {output!r}; use 'logits', 'softmax' or 'probabilities'")


def output_invariance(
    predict: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    group: str | Group,
    *,
    output: OutputKind = "logits",
    distance: str | Distance = "euclidean",
    batch_size: int = 256,
) -> EquivarianceDeviation:
    """G-EED invariance of a classifier's outputs (trivial output action, Kvinge et al. eq. 4).

    Args:
        predict: maps images (B, C, H, W) to (B, K); a model in eval mode, an
            ensemble's mean probabilities, ...
        x: images (N, C, H, W).
        group: the group acting on images, or its name.
        output: ``"logits"`` (measure ``predict``'s output as is), ``"softmax"``
            (measure ``softmax(predict(x))``) or ``"probabilities"`` (``predict``
            already returns probabilities).
        distance: ``"euclidean"``, ``"cosine"``; for probabilities also ``"kl"``
            (``KL(p(g x) || p^(x))``) and ``"reverse_kl"`` (``KL(p^(x) || p(g x))``),
            ``p^`` the orbit-mean prediction.
        batch_size: images per batch.
    """
    transform = as_output(output)
    return geed(
        lambda t: transform(predict(t)),
        x,
        group,
        in_action="image",
        out_action="invariant",
        distance=distance,
        batch_size=batch_size,
    )
