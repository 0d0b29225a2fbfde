"""``ella train``'s batches: the training images in memory, cut into one global data order
per epoch and augmented on the device.

:class:`ImageBatches` is the :class:`~ella.train.alternating.EpochBatches` part that
:class:`~ella.train.loop.Trainer` gives the loop; :class:`EpochAugmentation` draws an
epoch's augmentation (``--augment``) from the epoch's own generator, so a resumed run
augments exactly as the uninterrupted one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import torch
from torch.utils.data import TensorDataset

from ella.choices import Augmentation
from ella.data.transforms import apply_augmentation, draw_augmentation
from ella.distributed import World, batch_sizes, sharded_batches
from ella.engine.epochs import Stream, epoch_generator
from ella.train.alternating import Batch
from ella.train.input_invariance import InputInvariance

__all__ = ["EpochAugmentation", "ImageBatches", "training_tensors"]

#: a batch's augmentation: images and labels in, augmented images and labels out
Augment = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def training_tensors(train: TensorDataset, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The training images and labels, moved to ``device`` once where they take at most a
    quarter of its free memory (batches are then cut and augmented there), else left in
    host memory (each batch is copied)."""
    x, y = train.tensors
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if x.nbytes + y.nbytes > free // 4:
            return x, y
    return x.to(device), y.to(device)


class EpochAugmentation:
    """The augmentation of each epoch's batches.

    Args:
        method: the augmentation (not ``none``).
        shift: the largest shift in pixels (``--augment-shift``).
        seed: the run's seed.
        n_train: the training images.
        batch_size: the global batch size.
        device: where the images are (the parameters are moved there).
    """

    def __init__(
        self,
        method: Augmentation,
        shift: int,
        seed: int,
        n_train: int,
        batch_size: int,
        device: torch.device,
    ):
        if method == Augmentation.NONE:
            raise ValueError("EpochAugmentation needs --augment other than none")
        self.method, self.shift, self.seed = method, shift, seed
        self.sizes = batch_sizes(n_train, batch_size)
        self.device = device

    def __call__(self, epoch: int) -> Augment:
        """The augmentation of the epoch after ``epoch`` completed ones: each batch's
        parameters drawn up front, in batch order, from the epoch's generator (the draws
        that augmenting the batches in turn makes) and moved to the device in one copy;
        the images are then augmented there, batched."""
        generator = epoch_generator(self.seed, epoch, Stream.AUGMENTATION)
        draws = [draw_augmentation(self.method, n, generator, self.shift) for n in self.sizes]
        params = iter(torch.cat(draws).to(self.device).split(self.sizes))

        def augment_batch(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return apply_augmentation(x, self.method, next(params)), y

        return augment_batch


class ImageBatches:
    """This process's part of every global batch of an epoch, cut from images in memory.

    Args:
        tensors: the (N, C, H, W) training images and their (N,) labels, on the device
            where they fit (the batches are then cut and augmented there).
        batch_size: the global batch size.
        seed: the run's seed (the epoch's data order is drawn from it).
        world: the processes of a data-parallel job.
        augmentation: the epochs' augmentation, or None.
        invariance: an invariant model, whose transformation samples each batch carries.
    """

    def __init__(
        self,
        tensors: tuple[torch.Tensor, torch.Tensor],
        batch_size: int,
        seed: int,
        world: World,
        augmentation: EpochAugmentation | None = None,
        invariance: InputInvariance | None = None,
    ):
        self.tensors, self.batch_size, self.seed, self.world = tensors, batch_size, seed, world
        self.augmentation, self.invariance = augmentation, invariance
        #: where the batches' indices are: with the labels
        self.index_device = tensors[1].device

    def __call__(self, epoch: int, indexed: bool = True) -> Iterator[Batch]:
        """The (augmented) batches of the epoch after ``epoch`` completed ones, always with
        their indices, and an invariant model's transformation samples."""
        n_train = len(self.tensors[1])
        transformations = (
            self.invariance.epoch_transformations(epoch, n_train)
            if self.invariance is not None
            else itertools.repeat(None)
        )
        batches = sharded_batches(
            self.tensors,
            self.batch_size,
            epoch_generator(self.seed, epoch, Stream.DATA_ORDER),
            self.world,
            None if self.augmentation is None else self.augmentation(epoch),
        )
        for x, y, n_batch, index in batches:
            yield Batch(x, y, n_batch, index, next(transformations))
