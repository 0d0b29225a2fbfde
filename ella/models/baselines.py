"""Plain networks (no relaxed layers) for baselines and for learned input invariance.

Both consist of ``nn.Linear``/``nn.Conv2d`` modules called as ``module(x)``,
so every Kronecker-factored evidence in ella supports them.
"""

from __future__ import annotations

from torch import nn

__all__ = ["mlp", "cnn", "BASELINE_MODELS"]


def mlp(in_channels: int, num_classes: int, image_size: int, width: int = 2) -> nn.Sequential:
    """Two hidden ReLU layers of ``128 width`` units on the flattened image (B, C, S, S)."""
    hidden = 128 * width
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_channels * image_size * image_size, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def cnn(in_channels: int, num_classes: int, image_size: int, width: int = 2) -> nn.Sequential:
    """Two 5x5 conv + ReLU + 2x2 max-pool stages (``8 width``, ``16 width`` channels), a head."""
    c1, c2 = 8 * width, 16 * width
    side = image_size // 4
    return nn.Sequential(
        nn.Conv2d(in_channels, c1, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * side * side, num_classes),
    )


BASELINE_MODELS = {"mlp": mlp, "cnn": cnn}
