"""What a selection drops: the unit kinds, each owning its label and how it is parsed.

A selection compares candidate networks that differ in what is held at zero. A *unit* is
one thing a candidate may drop, named by a string in the record:

- :data:`WHOLE_PATHS`, "a path of every layer": a path name (``"conv"``) drops that path
  in every relaxed layer;
- :data:`LAYER_PATHS`, "a path of one layer": a prior group (``"layer3.conv"``) drops that
  path in that layer alone, and every layer keeps one path at least.

Only this module reads a unit's string; the searches, records and answers ask its kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from torch import nn

from ella.marglik import PriorStructure
from ella.nn import PATH_KINDS, RelaxedLayer

__all__ = [
    "LAYER_PATHS",
    "UNIT_KINDS",
    "WHOLE_PATHS",
    "UnitKind",
    "dropped_flags",
    "fitted_paths",
    "layer_groups",
    "relaxed_group_paths",
    "unit_kind",
]


@dataclass(frozen=True)
class UnitKind:
    """How a selection names what it drops.

    Attributes:
        name: the kind's registry key.
        what: the unit in words, for the tables (``"path"``, ``"path of one layer"``).
        per_layer: whether a unit is one layer's (a prior group) or every layer's.
    """

    name: str
    what: str
    per_layer: bool

    def split(self, unit: str) -> tuple[str, str]:
        """``(layer, path)`` of a unit: ``("layer3", "conv")``, or ``("", "conv")`` for a
        path of every layer."""
        if not self.per_layer:
            return "", unit
        layer, _, path = unit.rpartition(".")
        return layer, path

    def label(self, unit: str) -> str:
        """``"CONV"`` for a path, ``"layer3 CONV"`` for a prior group."""
        layer, path = self.split(unit)
        return f"{layer} {path.upper()}" if layer else path.upper()

    def kept_label(self, kept: list[str]) -> str:
        """``CONV+GCONV`` for paths; ``layer1 CONV+GCONV, layer2 GCONV`` for prior groups."""
        layers: dict[str, list[str]] = {}
        for unit in kept:
            layer, path = self.split(unit)
            layers.setdefault(layer, []).append(path.upper())
        if list(layers) == [""]:
            return "+".join(layers[""])
        return ", ".join(f"{layer} {'+'.join(paths)}" for layer, paths in layers.items())

    def droppable(self, kept: list[str]) -> list[str]:
        """What a round may drop from ``kept``: any path while two or more are kept; per
        layer, any group of a layer that keeps two or more."""
        if not self.per_layer:
            return list(kept) if len(kept) > 1 else []
        layers = Counter(self.split(g)[0] for g in kept)
        return [g for g in kept if layers[self.split(g)[0]] > 1]

    def units(self, net: nn.Module, paths: list[str]) -> list[str]:
        """The units of a network whose relaxed layers hold ``paths``: the paths, or the
        prior groups of its relaxed layers (:func:`layer_groups`)."""
        return layer_groups(net) if self.per_layer else list(paths)


WHOLE_PATHS = UnitKind("path", "path", per_layer=False)
LAYER_PATHS = UnitKind("layer_path", "path of one layer", per_layer=True)
#: the unit kinds by name
UNIT_KINDS = {kind.name: kind for kind in (WHOLE_PATHS, LAYER_PATHS)}


def unit_kind(per_layer: bool) -> UnitKind:
    """:data:`LAYER_PATHS` where ``per_layer``, else :data:`WHOLE_PATHS`."""
    return LAYER_PATHS if per_layer else WHOLE_PATHS


def relaxed_group_paths(net: nn.Module) -> dict[str, str]:
    """``{group: path}`` for every prior group of ``net``'s relaxed layers
    (``"layer3.fc": "fc"``, in layer-path groups)."""
    layers = {name for name, module in net.named_modules() if isinstance(module, RelaxedLayer)}
    groups = (g.rpartition(".") for g in PriorStructure(net, "layer_path").names)
    return {f"{layer}.{path}": path for layer, _, path in groups if layer in layers}


def layer_groups(net: nn.Module) -> list[str]:
    """The prior groups of ``net``'s relaxed layers (``"layer3.fc"``), in prior order: what a
    per-layer selection drops one at a time."""
    return list(relaxed_group_paths(net))


def fitted_paths(model: nn.Module) -> list[str]:
    """The paths of ``model``'s relaxed layers, in the order a layer holds them."""
    present = set(relaxed_group_paths(model).values())
    return [p for p in PATH_KINDS if p in present]


def dropped_flags(net: nn.Module, dropped: Collection[str]) -> list[bool]:
    """For each trainable tensor of ``net`` (in the order of its prior groups), whether
    ``dropped`` puts it at zero: a path name (``"fc"``) in every relaxed layer, or a prior
    group of one (``"layer3.fc"``)."""
    paths = relaxed_group_paths(net)
    groups = PriorStructure(net, "layer_path").tensor_groups
    return [g in paths and (g in dropped or paths[g] in dropped) for g in groups]
