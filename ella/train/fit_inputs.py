"""What :func:`ella.fit` checks before any work: its loaders and their first batches, the
model, the run directory's arguments; each refusal names the keyword of :func:`ella.fit`
and the fix. ``config`` is a :class:`~ella.train.fit.FitConfig` (a
:class:`~ella.engine.schedule.ScheduleConfig` with the likelihood)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch
from torch import nn
from torch.utils.data import (
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
)

from ella.choices import Likelihood, SubsetControl
from ella.data.datasets import check_labels
from ella.distributed import (
    ONE_PROCESS,
    ShardedBatchSampler,
    World,
    global_batches,
)
from ella.engine.epochs import Stream, epoch_generator
from ella.engine.schedule import ScheduleConfig
from ella.errors import ConfigError, InputDataError
from ella.evidence_rules import CONFIG_NAMES, check_evidence_settings
from ella.train.alternating import (
    order_sampler,
    seeds_its_order,
)

__all__ = [
    "OUTPUT_WIDTH",
    "batch_indices",
    "check_first_batch",
    "check_held_labels",
    "check_loader_kind",
    "check_model",
    "check_path_argument",
    "check_rounds",
    "check_run_arguments",
    "check_test_loader",
    "checked_inputs",
    "checked_labels",
    "held_labels",
    "indexes_batches",
    "n_examples",
    "probe_outputs",
]


def n_examples(loader: Iterable) -> int:
    """The number of training examples of ``train_loader`` (its data set's ``len``), or a
    refusal naming what to give instead."""
    check_loader_kind(loader, "train_loader")
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise ConfigError(
            "train_loader must be a DataLoader (with a .dataset, whose size weighs the prior "
            f"against the likelihood), got a {type(loader).__name__}, a plain iterable; wrap "
            "the data set in torch.utils.data.DataLoader(dataset, batch_size=..., shuffle=True)"
        )
    try:
        n = len(dataset)
    except TypeError:  # an IterableDataset without __len__
        raise ConfigError(
            f"the training data set ({type(dataset).__name__}) has no len(): ella.fit needs "
            "the number of training examples (n_data, which weighs the prior against the "
            "likelihood); give the data set a __len__ that returns it, or use a map-style "
            "Dataset"
        ) from None
    if n == 0:
        raise ConfigError(
            "train_loader's data set is empty: ella.fit needs at least one training example "
            "(check the split or the filter that made it)"
        )
    return n


def check_loader_kind(loader: object, name: str) -> None:
    """Refuse, before any work, a ``name`` (``train_loader``, ``test_loader``) that cannot
    give its batches every epoch: not iterable (a number, a data set without ``__iter__``),
    a string or a mapping (whose iteration gives characters or keys), or an iterator (a
    generator, ``iter(loader)``), which gives its batches once."""
    kind = type(loader).__name__
    train = name == "train_loader"
    what = "a DataLoader" if train else "a DataLoader or a list of batches"
    if isinstance(loader, (str, bytes, Mapping)) or not isinstance(loader, Iterable):
        gives = {str: "characters", bytes: "bytes"}.get(type(loader), "keys")
        why = f" (iterating it gives its {gives})" if isinstance(loader, Iterable) else ""
        shown = repr(loader)
        shown = shown if len(shown) <= 40 else f"{shown[:37]}..."
        must = (
            "a DataLoader of (inputs, targets) batches"
            if train
            else "None, a DataLoader or another iterable of (inputs, targets) batches"
        )
        raise ConfigError(
            f"{name} must be {must}, got the {kind} {shown}{why}; wrap a data set in "
            "torch.utils.data.DataLoader(dataset, batch_size=...)"
        )
    if isinstance(loader, Iterator):
        raise ConfigError(
            f"{name} is an iterator ({kind}), which gives its batches once, and ella.fit reads "
            f"{name} every epoch: pass {what} (something iter() can start again)"
        )


def check_test_loader(loader: Iterable | None) -> None:
    """Refuse, before any training, a test loader that cannot give batches
    (:func:`check_loader_kind`), whose data set is empty or which has no batches
    (``len(test_loader) == 0``), or whose inputs held in memory (a ``TensorDataset``) are
    not finite (:func:`checked_inputs` checks the batches of other data sets as they are
    evaluated)."""
    if loader is None:
        return
    check_loader_kind(loader, "test_loader")
    dataset = getattr(loader, "dataset", None)
    if dataset is not None and hasattr(dataset, "__len__") and len(dataset) == 0:
        raise ConfigError(
            "test_loader's data set is empty: give it test examples, or test_loader=None to "
            "train without a test set"
        )
    try:
        batches = len(loader)
    except TypeError:  # an iterable without len(), or a loader of an IterableDataset
        batches = None
    if batches == 0:
        raise ConfigError(
            f"test_loader has no batches (len(test_loader) == 0, a {type(loader).__name__}): "
            "give it test batches, or test_loader=None to train without a test set"
        )
    if isinstance(dataset, TensorDataset):
        x = dataset.tensors[0]
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            first = int((~torch.isfinite(x)).flatten(1).any(1).nonzero()[0])
            raise InputDataError(
                f"test_loader's data set holds NaN or infinite inputs (the first at example "
                f"{first}): clean or drop those examples"
            )


def checked_inputs(batches: Iterable, what: Callable[[int], str]) -> Iterator:
    """``batches`` of ``(x, y)``, each one's inputs checked to be finite where they are a
    floating tensor in host memory; ``what(i)`` names batch ``i`` in the refusal."""
    for i, batch in enumerate(batches):
        x = batch[0] if isinstance(batch, (tuple, list)) and batch else None
        if (
            isinstance(x, torch.Tensor)
            and x.device.type == "cpu"
            and x.is_floating_point()
            and not bool(torch.isfinite(x).all())
        ):
            raise InputDataError(
                f"{what(i)} holds NaN or infinite inputs: the data, not the training, are not "
                "finite; clean or drop those examples"
            )
        yield batch


def check_rounds(loader: DataLoader, n_data: int, config: ScheduleConfig) -> None:
    """Refuse, before any training, evidence rounds on a subset that the data, the
    Hessian or the loader cannot give: the ``training`` control variate needs the
    indices of the loader's batches (:func:`batch_indices`)."""
    subset, dataset = config.marglik_subset_size, loader.dataset
    if subset is None or subset >= n_data or not config.learn_priors:
        return
    check_evidence_settings(
        CONFIG_NAMES,
        context=f"{n_data} training examples",
        hessian=config.hessian,
        backend=config.backend,
        subset_size=subset,
        n_data=n_data,
    )
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
        raise ConfigError(
            f"the evidence rounds draw {subset} of the {n_data} training examples, which "
            f"needs a map-style dataset (an iterable one has no indices): pass "
            "marglik_subset_size=None to fit every batch"
        )
    traced = config.subset_control == SubsetControl.TRAINING
    if traced and config.likelihood == Likelihood.CLASSIFICATION and not indexes_batches(loader):
        raise ConfigError(
            "subset_control='training' records each example's curvature in the training "
            "passes, which needs the indices of the loader's batches: ella.fit knows them for "
            "a DataLoader(shuffle=True) without a generator of its own, or with shuffle=False; "
            "for this loader pass subset_control='forward' (a pass over the training set at "
            "each round)"
        )


def indexes_batches(loader: Iterable) -> bool:
    """Whether :func:`batch_indices` knows ``loader``'s batches' indices."""
    return seeds_its_order(loader) or (
        isinstance(loader, DataLoader)
        and isinstance(order_sampler(loader), SequentialSampler)
        and loader.batch_size is not None
    )


def batch_indices(
    loader: DataLoader, seed: int, epoch: int, world: World = ONE_PROCESS
) -> list[torch.Tensor]:
    """The indices in ``loader``'s data set of each of its batches in the epoch after
    ``epoch`` completed ones, for a loader of :func:`indexes_batches`: the order of
    :func:`~ella.train.alternating.seed_epoch_order` (:func:`~ella.distributed.global_batches`
    on a generator of the same seed), or the data set's order; this process's part of
    each where the loader was resharded (:func:`~ella.distributed.shard_loader`)."""
    n, size = len(loader.dataset), loader.batch_size
    if isinstance(order_sampler(loader), RandomSampler):
        batches = global_batches(n, size, epoch_generator(seed, epoch, Stream.DATA_ORDER))
    else:
        batches = list(torch.arange(n).split(size))
    if isinstance(loader.batch_sampler, ShardedBatchSampler):
        batches = [world.part(batch) for batch in batches]
    return batches


@torch.no_grad()
def probe_outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model``'s outputs on ``x`` (moved to its device) in evaluation mode, without
    gradients, changing nothing: the mode is restored and torch's random state kept."""
    was_training = model.training
    device = next(model.parameters()).device
    try:
        model.eval()
        with torch.random.fork_rng(devices=[]):
            return model(x.to(device))
    finally:
        model.train(was_training)


def check_first_batch(
    model: nn.Module, loader: Iterable, config: ScheduleConfig, name: str = "train_loader"
) -> int | None:
    """Refuse, before any training step, a loader whose first batch training (or the
    evaluation of a test loader) would fail on or silently misuse: not an ``(x, y)`` pair of
    tensors of one length; for classification labels that are not class indices of the
    model's outputs (one int64 per example, in ``[0, K)`` for ``K`` logits); for regression
    targets of another shape than the outputs (the loss would broadcast them).

    The outputs come from :func:`probe_outputs` (nothing of the model changes); ``name``
    is the argument the messages name (``train_loader`` or ``test_loader``).

    Returns:
        For classification the number of classes (the model's output width), which the
        later batches' labels are checked against (:class:`LoaderBatches`); else
        None.

    Raises:
        InputDataError: naming the problem and the fix.
    """
    what = f"{name}'s first batch"
    with torch.random.fork_rng(devices=[]):  # a shuffling loader draws its order
        batch = next(iter(loader), None)
    if batch is None:
        without = f", or {name}=None to train without a test set" if name == "test_loader" else ""
        raise InputDataError(
            f"{name} yields no batches: a batch_size above the data set's size with "
            f"drop_last=True?{without}"
        )
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        size = f" of {len(batch)} entries" if hasattr(batch, "__len__") else ""
        raise InputDataError(
            f"{what}: {name} must yield (inputs, targets) pairs, got a "
            f"{type(batch).__name__}{size}; make the data set's items (x, y)"
        )
    x, y = batch
    for name, value in (("inputs", x), ("targets", y)):
        if not isinstance(value, torch.Tensor):
            raise InputDataError(
                f"{what}: the {name} must be a tensor, got {type(value).__name__}; "
                "convert them with torch.as_tensor"
            )
    if x.dim() == 0 or y.dim() == 0 or len(x) != len(y):
        raise InputDataError(
            f"{what}: {tuple(x.shape)} inputs but {tuple(y.shape)} targets; give one target "
            "per input (the same first dimension)"
        )
    output = probe_outputs(model, x)
    if config.likelihood == Likelihood.CLASSIFICATION:
        if output.dim() != 2 or len(output) != len(y):
            raise InputDataError(
                f"{what}: classification needs logits (batch, classes) from the model, got "
                f"outputs {tuple(output.shape)} for {len(y)} examples; or use "
                "likelihood='regression'"
            )
        check_labels(y, output.shape[1], what, classes_from=OUTPUT_WIDTH)
        return output.shape[1]
    if output.shape != y.shape:
        raise InputDataError(
            f"{what}: regression needs targets of the outputs' shape {tuple(output.shape)}, "
            f"got {tuple(y.shape)} (they would broadcast); reshape them, e.g. "
            "y.view(len(y), -1), or change the model's outputs"
        )
    return None


#: what sets the number of classes a label is checked against, for the messages
OUTPUT_WIDTH = "the model's output width"


def held_labels(loader: Iterable) -> torch.Tensor | None:
    """All the labels ``loader``'s batches will hold, where they can be read without
    loading its items: the label tensor of a ``TensorDataset`` of pairs (or a ``Subset`` of
    one) batched by the default collation; else None."""
    dataset = getattr(loader, "dataset", None)
    if getattr(loader, "collate_fn", None) is not default_collate:
        return None
    indices = None
    if isinstance(dataset, Subset):
        dataset, indices = dataset.dataset, torch.as_tensor(dataset.indices)
    if not (isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2):
        return None
    labels = dataset.tensors[1]
    return labels if indices is None else labels[indices]


def check_held_labels(loader: Iterable | None, classes: int | None, what: str) -> int | None:
    """Check every label of ``loader`` against ``classes`` at once where they can be read
    (:func:`held_labels`), before any training; return the classes its batches must still
    be checked against (:func:`checked_labels`): None where this checked them all."""
    held = None if loader is None or classes is None else held_labels(loader)
    if held is None:
        return classes
    check_labels(held, classes, what, classes_from=OUTPUT_WIDTH)
    return None


def checked_labels(
    batches: Iterable, classes: int | None, what: Callable[[int], str], note: str = ""
) -> Iterator:
    """``batches`` of ``(x, y)``, each one's labels checked (:func:`check_labels`) against
    ``classes`` where they are in host memory (a check there reads nothing back from a
    device); ``classes=None`` checks nothing. ``what(i)`` names batch ``i`` in the message,
    which ends with ``note``."""
    for i, batch in enumerate(batches):
        y = batch[1] if isinstance(batch, (tuple, list)) and len(batch) == 2 else None
        if classes is not None and isinstance(y, torch.Tensor) and y.device.type == "cpu":
            try:
                check_labels(y, classes, what(i), classes_from=OUTPUT_WIDTH)
            except InputDataError as err:
                raise InputDataError(f"{err}{note}") from None
        yield batch


def check_model(model: object) -> None:
    """Refuse a ``model`` that is not an ``nn.Module`` with parameters to train."""
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"model must be a torch.nn.Module (a network of ella's relaxed layers and/or "
            f"nn.Linear/nn.Conv2d), got {type(model).__name__}"
        )
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(
            f"model ({type(model).__name__}) has no trainable parameters (none, or all with "
            "requires_grad=False): ella.fit learns the priors of a model's weights; give it "
            "a model with weights to train"
        )


def check_path_argument(name: str, value: object, what: str, example: str, other: str = "") -> None:
    """Refuse a path argument ``name`` that is not a ``str`` or ``os.PathLike`` of a
    ``str``, or that names nothing (``""``), naming ``what`` it should be, an ``example``
    of it and what ``other`` value the argument takes (``", or out=None to write nothing"``)."""
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str):
        raise ConfigError(
            f"{name} must be the path of {what} (a str or a pathlib.Path){other}; got the "
            f"{type(value).__name__} {value!r}"
        )
    if not path.strip():
        raise ConfigError(f"{name}={value!r} names nothing: give {what} ({name}={example}){other}")


def check_run_arguments(out: object, resume: object, overwrite: object) -> None:
    """Refuse, before any work, an ``out`` that is not a path (a ``str`` or ``os.PathLike``
    naming a directory), a ``resume`` or ``overwrite`` that is not ``True`` or ``False`` (the
    string ``"no"`` is true to Python, and would start a finished run again), and the
    combinations that cannot be meant: both, or either without ``out``."""
    if out is not None:
        check_path_argument(
            "out", out, "a run directory", "'runs/mine'", ", or out=None to write nothing"
        )
    for name, value in (("resume", resume), ("overwrite", overwrite)):
        if not isinstance(value, bool):
            read = ""
            if isinstance(value, str):
                truth = "true" if value else "false"
                read = f" (a string, which Python reads as {truth} whatever it says)"
            raise ConfigError(
                f"{name} must be True or False, got the {type(value).__name__} {value!r}{read}; "
                f"pass {name}=True or {name}=False"
            )
    if resume and overwrite:
        raise ConfigError(
            "give resume=True or overwrite=True, not both: resume=True continues the run in "
            "out, overwrite=True starts it again"
        )
    for name, value in (("resume", resume), ("overwrite", overwrite)):
        if value and out is None:
            raise ConfigError(f"{name}=True needs out=<run directory> (the run to {name})")
