"""The settings of ``experiments.layer_reduction`` that its summary reads as well: the data
sets, seeds and budgets, the 27 per-layer architectures and how they are named and keyed
in the results files (one module both import, so that neither imports the other)."""

from __future__ import annotations

import itertools

from experiments.miniature import Budget

DATASETS = ("mnist", "rotated_mnist")
SEEDS = (0, 1)
LR = 3e-3
BOTH = ("conv", "gconv")
#: what a layer may keep
CHOICES: tuple[tuple[str, ...], ...] = (BOTH, ("conv",), ("gconv",))
N_LAYERS = 3
#: every per-layer architecture, the full network first
ARCHITECTURES: tuple[tuple[tuple[str, ...], ...], ...] = tuple(
    itertools.product(CHOICES, repeat=N_LAYERS)
)
FULL = ARCHITECTURES[0]
ESTIMATORS = ("dense", "dense_layer", "layer_kron", "layer_kron_nocross", "per_tensor")
#: a retrained candidate below this validation accuracy has collapsed (chance is 0.1)
COLLAPSE = 0.2
BUDGET = Budget(train_size=2000, validation_size=500, epochs=300, check_epochs=300)
DRY = Budget(
    train_size=64, validation_size=32, epochs=3, burnin=1, frequency=1, batch_size=32,
    check_epochs=3,
)  # fmt: skip
Architecture = tuple[tuple[str, ...], ...]


def tag(arch: Architecture) -> str:
    """``conv+gconv/conv/gconv``: each layer's paths."""
    return "/".join("+".join(layer) for layer in arch)


def short(arch: Architecture) -> str:
    """``B C G``: both, CONV, GCONV per layer."""
    return " ".join({BOTH: "B", ("conv",): "C", ("gconv",): "G"}[layer] for layer in arch)


def dropped(arch: Architecture) -> list[tuple[int, str]]:
    """The (layer, path) groups ``arch`` removes from the full network."""
    return [(i, p) for i, layer in enumerate(arch) for p in BOTH if p not in layer]


def without(arch: Architecture, layer: int, path: str) -> Architecture:
    return tuple(
        tuple(p for p in kept if p != path) if i == layer else kept for i, kept in enumerate(arch)
    )


def key(dataset: str, seed: int, arch: Architecture, budget: Budget, what: str = "net") -> str:
    return f"{what}/{dataset}/seed{seed}/{tag(arch)}/lr{LR:g}/{budget.tag('learned')}"
