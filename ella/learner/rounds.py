"""The data of an evidence round: its subset, the control variate's factor, its batches.

Functions of an :class:`~ella.engine.recipe.EvidenceRecipe` and the training set that
:meth:`ella.learner.PriorLearner.evidence_round` composes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset, default_collate

from ella.choices import Likelihood, SubsetControl
from ella.distributed import ShardLoader, World
from ella.engine.recipe import EvidenceRecipe
from ella.errors import ConfigError
from ella.marglik.control import curvature_ratio, output_hessian_trace

__all__ = [
    "Batches",
    "control_ratio",
    "dataset_labels",
    "evidence_loader",
    "forward_traces",
    "round_subset",
]


class Batches:
    """A list of ``(x, y)`` batches shaped like a loader for laplace-torch: iterable, with
    a ``dataset`` whose length is the number of examples."""

    def __init__(self, batches: Iterable):
        self.batches = [(x, y) for x, y in batches]
        if not self.batches:
            raise ConfigError("the evidence step got no batches; pass a loader with data")
        self.dataset = range(sum(len(y) for _, y in self.batches))

    def __iter__(self) -> Iterator:
        return iter(self.batches)


def dataset_labels(data: Dataset) -> torch.Tensor:
    """The (N,) integer labels of a map-style classification data set (read from its
    tensors where it is a ``TensorDataset``, or a ``Subset`` of one; else item by item)."""
    if isinstance(data, TensorDataset):
        return data.tensors[1]
    if isinstance(data, Subset) and isinstance(data.dataset, TensorDataset):
        return data.dataset.tensors[1][torch.as_tensor(data.indices)]
    return torch.as_tensor([int(data[i][1]) for i in range(len(data))])


@torch.no_grad()
def forward_traces(model: nn.Module, data: Dataset, batch_size: int, world: World) -> torch.Tensor:
    """``1 - sum_c p_c^2`` of every example of ``data`` at the model's current weights
    (evaluation mode), (N,) float64: the auxiliary variable of the ``forward`` control. In
    a data-parallel job each process passes its shard and the traces are summed."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    trace = torch.zeros(len(data), dtype=torch.float64)
    shard = torch.as_tensor(list(world.shard(len(data))), dtype=torch.long)
    images = data.tensors[0] if isinstance(data, TensorDataset) else None
    for index in shard.split(batch_size):
        if images is not None:
            x = images[index]
        else:  # collated by hand: a DataLoader's iterator draws from the global generator
            x = default_collate([data[i] for i in index.tolist()])[0]
        trace[index] = output_hessian_trace(model(x.to(device))).cpu()
    model.train(was_training)
    return world.sum_(trace.to(device)).cpu()


def evidence_loader(data: Dataset, batch_size: int, world: World):
    """A round's batches: a ``DataLoader`` over ``data`` in one process; in a data-parallel
    job this process's contiguous shard, presented as the whole set (``ShardLoader``)."""
    if not world.distributed:
        return DataLoader(data, batch_size=batch_size)
    return ShardLoader(DataLoader(world.subset(data), batch_size=batch_size), total=len(data))


def round_subset(
    recipe: EvidenceRecipe,
    data: Dataset,
    epoch: int,
    likelihood: Likelihood | str,
    labels: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The indices of the round after ``epoch`` (:meth:`EvidenceRecipe.subset`, balanced
    by ``labels`` or the labels read from ``data`` for classification); ``None``: every
    example."""
    classification = likelihood == Likelihood.CLASSIFICATION
    if labels is None and classification and recipe.draws_subset(len(data)):
        labels = dataset_labels(data)
    return recipe.subset(labels if classification else None, len(data), epoch)


def control_ratio(
    recipe: EvidenceRecipe,
    model: nn.Module,
    data: Dataset,
    index: torch.Tensor,
    likelihood: Likelihood | str,
    world: World,
    traces: torch.Tensor | None = None,
) -> float:
    """The control variate's factor (the recipe's ``control``) on the curvature of the
    subset ``index`` of ``data``: 1 without a control or for regression, 1 while
    ``traces`` has NaN entries (no training pass recorded yet)."""
    control = recipe.control
    if control == SubsetControl.NONE or likelihood != Likelihood.CLASSIFICATION:
        return 1.0
    if control == SubsetControl.FORWARD:
        traces = forward_traces(model, data, recipe.batch_size, world)
    elif traces is None:
        raise ConfigError(
            "the training control variate needs the traces of the training passes: "
            "pass traces=... (ella.marglik.control.output_hessian_trace of each "
            "example's logits), or use control='forward'"
        )
    elif traces.isnan().any():  # no training pass recorded yet
        return 1.0
    return curvature_ratio(traces, index)
