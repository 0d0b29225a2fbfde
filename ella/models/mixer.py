"""Ready image classifiers built from relaxed layers (one builder for every path mix)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ella.choices import DEFAULT_GROUP, GroupPooling
from ella.groups import Group, layer_group
from ella.nn import PATH_NAMES, GroupPool, Lift, RelaxedLayer
from ella.nn._checks import as_size
from ella.nn.kinds import declared_options
from ella.nn.options import LayerOptions
from ella.testing import equivariance_errors

#: (channel multiplier of ``width``, stride) per layer, as in the ELLA paper's
#: 8-layer "mixer" for 32x32 images: 32 -> 16 -> 8 -> 4 -> 2 -> 1.
DEFAULT_BLOCKS: tuple[tuple[int, int], ...] = (
    (1, 1),
    (2, 2),
    (2, 1),
    (4, 2),
    (4, 1),
    (8, 2),
    (8, 2),
    (16, 2),
)


@dataclass(frozen=True)
class LayerSpec:
    """Shape of one relaxed layer inside a :class:`Mixer`."""

    name: str
    in_channels: int
    out_channels: int
    in_size: tuple[int, int]
    stride: int

    @property
    def out_size(self) -> tuple[int, int]:
        """The output's (H, W): the input's divided by the stride."""
        return self.in_size[0] // self.stride, self.in_size[1] // self.stride


def plan_layers(
    in_channels: int,
    image_size: tuple[int, int],
    width: int,
    blocks: Sequence[tuple[int, int]],
) -> list[LayerSpec]:
    """Channel and size plan of the relaxed layers.

    A stride-2 block whose input has an odd side (e.g. 7x7 after 28 -> 14 -> 7)
    keeps stride 1, so 28x28 and 32x32 inputs use the same block list.
    """
    specs, c, size = [], in_channels, image_size
    for i, (mult, stride) in enumerate(blocks, start=1):
        if stride == 2 and (size[0] % 2 or size[1] % 2 or min(size) < 2):
            stride = 1
        specs.append(LayerSpec(f"layer{i}", c, mult * width, size, stride))
        c, size = specs[-1].out_channels, specs[-1].out_size
    return specs


class Mixer(nn.Module):
    """Lift -> relaxed layers -> group pool -> global average -> MLP head.

    Maps images (B, C, H, W) to logits (B, num_classes). With only GCONV paths
    and ``pool="max"`` or ``"mean"`` the logits are exactly invariant to the group
    (the group pool removes the permutation of copies; everything after it sees an
    invariant tensor). With ``pool="none"`` the head sees every copy's channels
    (``|G| C_last`` features), so it can break the symmetry that the layers keep.

    With ``norm="instance"``, a layer whose output holds a single value per
    channel (trivial group and a 1x1 map, e.g. the last layer at 32x32) is
    left unnormalised: normalising one value would zero it.

    Every layer reads the same options (``options``, a
    :class:`~ella.nn.options.LayerOptions`, or its fields by name as keywords).

    Submodules: ``lift``, ``layer1`` ... ``layerN`` (each a
    :class:`~ella.nn.RelaxedLayer`; also in :attr:`layers`), ``pool``, ``head``
    (Linear, ReLU, Linear). Prior groups are therefore named ``layer3.gconv``.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int | tuple[int, int],
        group: str | Group = DEFAULT_GROUP,
        paths: Sequence[str] = PATH_NAMES,
        width: int = 2,
        blocks: Sequence[tuple[int, int]] = DEFAULT_BLOCKS,
        pool: GroupPooling | str = GroupPooling.MAX,
        head_multiplier: int = 4,
        options: LayerOptions | None = None,
        **values: Any,
    ):
        super().__init__()
        if in_channels < 1 or num_classes < 1 or width < 1:
            raise ValueError(
                f"in_channels, num_classes and width must be positive, got "
                f"{in_channels}, {num_classes}, {width}"
            )
        if not blocks:
            raise ValueError("a mixer needs at least one block")
        options = LayerOptions.given(options, values, declared_options(), "Mixer")
        self.group = layer_group(group)
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.image_size = as_size(image_size)
        self.specs = plan_layers(in_channels, self.image_size, width, blocks)
        self.lift = Lift(self.group, in_channels)
        for s in self.specs:
            # one value per channel (trivial group, 1x1 map) cannot be normalised
            alone = self.group.order * s.out_size[0] * s.out_size[1] == 1
            self.add_module(
                s.name,
                RelaxedLayer(
                    s.in_channels,
                    s.out_channels,
                    s.in_size,
                    group=self.group,
                    paths=paths,
                    stride=s.stride,
                    options=options.replace(norm="none") if alone else options,
                ),
            )
        self.pool = GroupPool(self.group, mode=pool)
        features = self.specs[-1].out_channels * self.pool.copies_kept
        self.head = nn.Sequential(
            nn.Linear(features, head_multiplier * features),
            nn.ReLU(),
            nn.Linear(head_multiplier * features, num_classes),
        )

    @property
    def layers(self) -> dict[str, RelaxedLayer]:
        """The relaxed layers by name (``layer1`` ... ``layerN``), in order."""
        return {s.name: getattr(self, s.name) for s in self.specs}

    @property
    def path_names(self) -> tuple[str, ...]:
        """The paths of the relaxed layers (every layer has the same)."""
        return next(iter(self.layers.values())).path_names

    def check_input(self, x: torch.Tensor) -> None:
        """Raise a ValueError unless ``x`` is a non-empty (B, C, H, W) batch of the
        channels and size this mixer was built for."""
        if x.dim() != 4:
            raise ValueError(f"expected images (B, C, H, W), got shape {tuple(x.shape)}")
        if x.shape[0] == 0:
            raise ValueError("the batch is empty (0 images); pass at least one image")
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"this mixer was built for {self.in_channels} input channel(s), got {x.shape[1]}"
            )
        if tuple(x.shape[-2:]) != self.image_size:
            raise ValueError(
                f"this mixer was built for {self.image_size[0]}x{self.image_size[1]} images, "
                f"got {x.shape[-2]}x{x.shape[-1]}"
            )

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The features (B, C_last) before the head, group-pooled and averaged over
        positions; (B, |G| C_last) with ``pool="none"``."""
        self.check_input(x)
        z = self.lift(x)
        for layer in self.layers.values():
            z = layer(z)
        return self.pool(z).mean(dim=(-2, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, num_classes) logits of (B, C, H, W) images: the head on :meth:`features`."""
        return self.head(self.features(x))

    @torch.no_grad()
    def standardise_head(self, x: torch.Tensor) -> None:
        """Rescale the head's first layer so that the features of ``x`` enter it centred and scaled.

        With ``mu`` the mean of :meth:`features` over the images ``x`` (B, C, H, W)
        and ``s`` their standard deviation between images, pooled over the
        features (one number, so that a feature that hardly varies is not blown
        up), the first linear layer ``W f + b`` becomes ``W (f - mu) / s + b``:
        weight ``W / s``, bias ``b - (W / s) mu``. A data-dependent
        initialisation (Kraehenbuehl et al., ICLR 2016). Why: the group pool and
        the global average leave features that differ little between images at
        initialisation, so the logits hardly depend on the image and the first
        steps do not learn. The network stays
        a per-image function with the same symmetry: the head sees the same
        features, rescaled.

        Args:
            x: at least two training images; 256-512 are plenty.
        """
        if x.shape[0] < 2:
            raise ValueError(f"standardise_head needs at least 2 images, got {x.shape[0]}")
        # in float64 on a copy, so that the result does not depend on the number of threads
        # (a data-parallel job must start from the weights of the one-process job)
        probe = copy.deepcopy(self).double().eval()
        features = probe.features(x.double())
        mean = features.mean(dim=0)
        scale = features.var(dim=0).mean().sqrt()
        if not torch.isfinite(scale) or scale <= 0:
            raise ValueError("the features of x do not vary between images; pass other images")
        first = self.head[0]
        weight = first.weight.double() / scale
        first.bias.copy_(first.bias.double() - weight @ mean)
        first.weight.copy_(weight)

    def invariance_error(self, x: torch.Tensor | None = None) -> float:
        """Largest change of the logits under the group, on ``x`` or random images."""
        if x is None:
            x = torch.randn(4, self.in_channels, *self.image_size)
        return max(equivariance_errors(self, self.group, x).values())


def mixer(
    in_channels: int,
    num_classes: int,
    image_size: int | tuple[int, int],
    group: str | Group = DEFAULT_GROUP,
    paths: Sequence[str] = PATH_NAMES,
    width: int = 2,
    **kwargs,
) -> Mixer:
    """Build a :class:`Mixer` image classifier.

    FC-only, CONV-only, GCONV-only and mixed networks differ only in ``paths``.

    Args:
        in_channels: image channels (1 for MNIST, 3 for CIFAR).
        num_classes: number of logits.
        image_size: ``S`` or ``(H, W)``; 28 and 32 are the usual sizes.
        group: group the input is lifted to (``"trivial"``, ``"C4"``, ``"D4"``).
        paths: non-empty subset of ``("fc", "conv", "gconv")``.
        width: channel multiplier; layer channels are ``width * (1, 2, 2, 4, 4, 8, 8, 16)``.
        **kwargs: further :class:`Mixer` options (``blocks``, ``pool``,
            ``head_multiplier``, ``options``) and the layers' options by name
            (:class:`~ella.nn.options.LayerOptions`: ``kernel_size``, ``fc_mode``,
            ``fc_rank``, ``gconv_mode``, ``downsample``, ``norm``: ``"instance"``
            normalises before every ReLU, ``zero_init``).

    Example:
        >>> model = mixer(1, 10, 28, group="C4", paths=("fc", "conv", "gconv"))
        >>> model(torch.randn(8, 1, 28, 28)).shape
        torch.Size([8, 10])
    """
    return Mixer(in_channels, num_classes, image_size, group, paths, width, **kwargs)
