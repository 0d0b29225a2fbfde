"""Evaluation of a model on held-out batches, shared by ``ella train`` and :func:`ella.fit`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from ella.distributed import ONE_PROCESS, World

__all__ = ["evaluate_batches"]


@torch.no_grad()
def evaluate_batches(
    model: nn.Module,
    batches: Iterable,
    sum_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    classification: bool = True,
    world: World = ONE_PROCESS,
) -> dict[str, float]:
    """Mean loss (and accuracy) of ``model`` in evaluation mode over ``batches`` of
    ``(x, y)``; in a data-parallel job each process passes its shard and the sums are
    shared. The model's training mode is restored.

    Args:
        model: the network (on its device; the batches are moved there).
        batches: ``(x, y)`` pairs.
        sum_loss: ``f(outputs, y)``, the batch's summed loss (e.g. cross-entropy with
            ``reduction="sum"``).
        classification: also count ``argmax(outputs) == y``; the loss is then named
            ``nll``, else ``loss``.
        world: the processes whose sums are shared.

    Returns:
        ``{"accuracy": ..., "nll": ...}`` for classification, else ``{"loss": ...}``.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    # summed on the device in float64 (as Python floats would be) and read once
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    n = 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        outputs = model(x)
        sums[0] += sum_loss(outputs, y).double()
        if classification:
            sums[1] += (outputs.argmax(1) == y).sum()
        n += len(y)
    total, correct = sums.tolist()
    total, correct, n = world.sum_values(total, correct, n)
    model.train(was_training)
    if not classification:
        return {"loss": total / n}
    return {"accuracy": correct / n, "nll": total / n}
