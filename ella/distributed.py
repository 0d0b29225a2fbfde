"""Data parallelism on PyTorch's own engine (``torch.distributed``), as ella uses it.

Started by ``torchrun --standalone --nproc_per_node N -m ella train ...``, every
process trains the same model on its part of every batch
(``DistributedDataParallel`` averages the gradients), sums its Kronecker
factors and log likelihood with the others' before the evidence is
decomposed, and takes the same hyperparameter steps. What this module gives
the commands and :func:`ella.fit`:

* :class:`World`: this process's rank among ``size`` processes, with the few
  collective operations ella needs (sums, a text broadcast without pickle,
  a bitwise check that a tensor is the same everywhere, "the main process
  first, then the others" with its error passed on);
* :func:`start`: joins the process group torchrun describes in the environment
  (``gloo`` for CPU tensors, ``nccl`` for CUDA tensors where torch has it);
* :func:`global_batches`: one data order for the whole job, so that ``N``
  processes with ``B / N`` images each see the batches one process with ``B``
  would (:meth:`World.shard` cuts each global batch);
* :class:`ShardLoader`: a process's part of a data set with the whole set's
  length, as laplace-torch reads the data-set size;
* :func:`peer_failures`: a collective that fails because another process
  died becomes a :class:`~ella.errors.DistributedError` naming the checkpoint
  to resume from.

In one process (no torchrun) every operation is a no-op and ``World()`` is
rank 0 of 1.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset

from ella.errors import ConfigError, DistributedError, EllaError

__all__ = [
    "batch_sizes",
    "ONE_PROCESS",
    "ShardLoader",
    "ShardedBatchSampler",
    "check_batches",
    "World",
    "current",
    "data_parallel",
    "end_process",
    "global_batches",
    "launched",
    "peer_failures",
    "shard_loader",
    "sharded_batches",
    "start",
    "stop",
]

T = TypeVar("T")

#: how long a collective waits for a silent peer before it fails
TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class World:
    """This process among the ``size`` processes of a job (rank 0 of 1 without torchrun).

    Attributes:
        rank: this process's global rank; rank 0 writes the run directory.
        size: the number of processes.
        local_rank: the rank on this machine (its GPU index).
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Whether this process writes files and shows progress (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether the job has more than one process."""
        return self.size > 1

    def describe(self) -> str:
        """``process R of N``, for messages."""
        return f"process {self.rank} of {self.size}"

    # ------------------------------------------------------------------ data
    def shard(self, n: int) -> range:
        """This process's contiguous part of ``range(n)``: the first ``n % size`` processes
        get one item more (``torch.tensor_split``'s rule); empty when ``n < size``."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))

    def part(self, items: Sequence[T]) -> Sequence[T]:
        """This process's contiguous part (:meth:`shard`) of a sequence or a tensor's rows;
        all of it in one process."""
        span = self.shard(len(items))
        return items[span.start : span.stop]

    def subset(self, dataset: Dataset) -> Dataset:
        """This process's contiguous part (:meth:`shard`) of a map-style data set; the data
        set itself in one process."""
        if not self.distributed:
            return dataset
        return Subset(dataset, list(self.shard(len(dataset))))

    def mean_share(self, mean: torch.Tensor, count: int, total: int) -> torch.Tensor:
        """This process's share of a global batch's mean loss, for the average of the
        processes' gradients (``DistributedDataParallel``): ``mean`` over this process's
        ``count`` examples times ``count * size / total``, so that the average over the
        processes is the mean over all ``total`` examples, however unequal the shards.
        ``mean`` itself in one process."""
        if not self.distributed:
            return mean
        return mean * (count * self.size / total)

    def device(self, device: torch.device) -> torch.device:
        """``device`` for this process: ``cuda`` becomes this process's GPU ``cuda:local_rank``."""
        if self.distributed and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    # ------------------------------------------------------------------ collectives
    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the processes, in place; returns it."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def sum_values(self, *values: float) -> list[float]:
        """The sums over the processes of a few numbers (one float64 all-reduce)."""
        if not self.distributed:
            return [float(v) for v in values]
        return self.sum_(torch.tensor(values, dtype=torch.float64)).tolist()

    def average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Replace every ``.grad`` by its mean over the processes (one all-reduce of the
        gradients flattened together): what ``DistributedDataParallel`` does during the
        backward pass, for a loop whose backward DDP does not support (a second-order
        term such as FoRDE's input gradients)."""
        if not self.distributed:
            return
        grads = [p.grad for p in parameters if p.grad is not None]
        flat = self.sum_(torch.cat([g.reshape(-1) for g in grads])) / self.size
        for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(part.view_as(g))

    def gather(self, tensor: torch.Tensor, dim: int, sizes: list[int]) -> torch.Tensor:
        """The processes' ``tensor`` concatenated along ``dim`` in rank order, where process
        ``r``'s has ``sizes[r]`` entries there (padded for the all-gather, then trimmed);
        detached (no gradient flows to other processes)."""
        tensor = tensor.detach()
        if not self.distributed:
            return tensor
        longest = max(sizes)
        pad = list(tensor.shape)
        pad[dim] = longest - tensor.shape[dim]
        padded = torch.cat([tensor, tensor.new_zeros(pad)], dim=dim).contiguous()
        parts = [torch.empty_like(padded) for _ in range(self.size)]
        dist.all_gather(parts, padded)
        return torch.cat([p.narrow(dim, 0, n) for p, n in zip(parts, sizes, strict=True)], dim)

    def shard_sizes(self, n: int) -> list[int]:
        """The length of every process's :meth:`shard` of ``range(n)``, in rank order."""
        return [len(World(rank, self.size).shard(n)) for rank in range(self.size)]

    def broadcast_text(self, text: str | None) -> str:
        """Rank 0's ``text`` on every process (UTF-8 bytes in tensors, never pickled)."""
        if not self.distributed:
            return text or ""
        data = torch.tensor(list((text or "").encode()) if self.is_main else [], dtype=torch.uint8)
        length = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(length, src=0)
        if not self.is_main:
            data = torch.empty(int(length), dtype=torch.uint8)
        if int(length):
            dist.broadcast(data, src=0)
        return bytes(data.tolist()).decode()

    def main_first(self, work: Callable[[], T]) -> T | None:
        """Run ``work`` on rank 0 alone and pass its outcome on: the other processes wait,
        then raise a :class:`DistributedError` with rank 0's message if it failed. Returns
        ``work()``'s value on rank 0, None elsewhere."""
        if not self.distributed:
            return work()
        error, result = None, None
        if self.is_main:
            try:
                result = work()
            except Exception as err:  # passed on, then raised here too
                error = err
        outcome = self.broadcast_text("ok" if error is None else f"failed: {error}")
        if error is not None:
            raise error
        if outcome != "ok":
            raise DistributedError(f"process 0 stopped the job: {outcome.removeprefix('failed: ')}")
        return result

    def check_identical(self, tensor: torch.Tensor, what: str) -> None:
        """Raise unless ``tensor`` holds the same bits on every process (compared with rank
        0's copy)."""
        if not self.distributed:
            return
        reference = tensor.detach().clone()
        dist.broadcast(reference, src=0)
        differ = torch.tensor(
            [0.0 if torch.equal(reference, tensor.detach()) else 1.0], dtype=torch.float64
        )
        if self.sum_(differ).item():
            gap = float((reference - tensor.detach()).abs().max())
            raise DistributedError(
                f"the {what} differ between the processes ({self.describe()} is {gap:.3g} from "
                "process 0); the processes no longer compute the same thing: please report this"
            )


#: the world of a process that runs alone
ONE_PROCESS = World()


def current() -> World:
    """The :class:`World` of torch's default process group (rank 0 of 1 without one)."""
    if dist.is_available() and dist.is_initialized():
        size = dist.get_world_size()
        return World(dist.get_rank(), size, int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return World()


def launched() -> bool:
    """Whether torchrun started this process as one of several (``WORLD_SIZE`` > 1)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def backend() -> str:
    """``gloo`` for CPU tensors and, where this torch has CUDA and NCCL, ``nccl`` for CUDA
    tensors (one default group serves both)."""
    if torch.cuda.is_available() and dist.is_nccl_available():
        return "cpu:gloo,cuda:nccl"
    return "gloo"


#: set once this process is ending with a peer's failure: torchrun's SIGTERM then no longer
#: raises, so it cannot replace that error (which names the checkpoint) while it unwinds
_ENDING = False


def _stopped_by_launcher(signum, frame) -> None:
    if _ENDING:
        return
    raise DistributedError(
        f"stopped by torchrun (signal {signal.Signals(signum).name}): another process of this "
        "job ended"
    )


def start() -> World:
    """Join the process group that torchrun describes in the environment (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``...), once; rank 0 of 1 when not launched by torchrun.

    On CUDA machines each process uses GPU ``LOCAL_RANK``. A ``SIGTERM`` (torchrun stopping
    the job because another process failed) becomes a :class:`DistributedError`, so the
    process says why it ends.
    """
    if not launched():
        return current()
    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed; run one process")
    if not dist.is_initialized():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        dist.init_process_group(backend=backend(), timeout=TIMEOUT)
        signal.signal(signal.SIGTERM, _stopped_by_launcher)
    return current()


def stop() -> None:
    """Leave the process group after a job that ended well: every process waits for the
    others first (a barrier), since tearing the group down while a peer still works can
    abort this process or that peer (see :func:`end_process`, the safer way to end a
    torchrun job's process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def end_process(status: int) -> int:
    """How a command of a torchrun job ends: it flushes its output and ends the process at
    once with ``status``, after success once every process has finished (a barrier).

    The process group's teardown is skipped because it can abort a process (SIGABRT,
    "terminate called without an active exception") once a peer has already left: seen
    after a failure, and once after success when the peer that finished first had torn
    down its side and exited (seen in ``test_torchrun_ensembles_match_one_process``).
    Every file of the run is written and closed
    before this is called. Without torchrun it just returns ``status``."""
    if not (dist.is_available() and dist.is_initialized()):
        return status
    if status == 0:
        dist.barrier()  # nobody leaves while another process may still need it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _is_peer_failure(err: BaseException) -> bool:
    if isinstance(err, EllaError):
        return False
    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(
        mark in text for mark in ("gloo", "Gloo", "NCCL", "Connection closed", "Connection reset")
    )


@contextmanager
def peer_failures(world: World, note: Callable[[], str]) -> Iterator[None]:
    """Turn a collective's failure (another process died or hung) into a
    :class:`DistributedError` that says ``note()`` (where the last checkpoint is)."""
    global _ENDING
    try:
        yield
    except DistributedError as err:
        _ENDING = True
        raise DistributedError(f"{world.describe()}: {err}; {note()}") from err
    except Exception as err:
        if not (world.distributed and _is_peer_failure(err)):
            raise
        _ENDING = True
        raise DistributedError(
            f"{world.describe()}: another process of this job stopped ({_gist(err)}); {note()}"
        ) from err


def _gist(err: BaseException) -> str:
    """The first sentence of a collective's error, without its source location:
    ``Read error [127.0.0.1]:653: Connection reset by peer``."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    line = re.sub(r"^\[[^\]]*\]\s*", "", text.splitlines()[0])
    return line.split(". ")[0][:200]


def global_batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """The job's batches of one epoch: a permutation of ``range(n)`` drawn from ``generator``
    exactly as ``DataLoader(shuffle=True, generator=generator)`` draws it (the loader's
    iterator first takes one number for its workers' base seed, then its sampler draws the
    permutation), cut into batches of ``batch_size`` (the last one shorter). Every process
    draws the same."""
    torch.empty((), dtype=torch.int64).random_(generator=generator)  # the base seed
    return list(torch.randperm(n, generator=generator).split(batch_size))


def batch_sizes(n: int, batch_size: int) -> list[int]:
    """The sizes of the batches of :func:`global_batches` (the last one shorter)."""
    return [min(batch_size, n - start) for start in range(0, n, batch_size)]


def sharded_batches(
    tensors: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    generator: torch.Generator,
    world: World,
    augment: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]]:
    """This process's part of every (augmented) global batch of an epoch over in-memory
    ``(images, labels)``: the order of :func:`global_batches`, ``augment(x, y)`` applied to
    the whole global batch (the same draws on every process), then :meth:`World.part`;
    the batches are indexed on the images' device.

    Yields:
        ``(x, y, n_global, index)``: this process's images and labels, the size of the
        augmented global batch they are part of, and their indices in ``images``.
    """
    images, labels = tensors
    batches = global_batches(len(labels), batch_size, generator)
    # the epoch's order reaches the images' device in one copy, not one per batch
    order = torch.cat(batches).to(images.device).split([len(b) for b in batches])
    for batch in order:
        x, y = images[batch], labels[batch]
        if augment is not None:
            x, y = augment(x, y)
        yield world.part(x), world.part(y), len(y), world.part(batch)


def data_parallel(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """``model`` wrapped in ``DistributedDataParallel`` in a job of several processes (on
    the GPU of its parameters, if any), else ``model`` itself. Train through the wrapper;
    read and save the weights of ``model``."""
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device = next(model.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def check_batches(n: int, batch_size: int, world: World, drop_last: bool = False) -> None:
    """Refuse, before any work, batches that would leave a process without images: every
    global batch (the last one included) must hold at least one image per process."""
    if not world.distributed:
        return
    last = 0 if drop_last else n % batch_size
    if batch_size < world.size or 0 < last < world.size:
        what = f"batches of {batch_size}" if batch_size < world.size else f"a last batch of {last}"
        raise ConfigError(
            f"{n} training images in {what} leave some of the {world.size} processes without "
            f"images; choose a batch size of at least {world.size} whose last batch has at "
            f"least {world.size} images (or none)"
        )


class ShardedBatchSampler(Sampler[list[int]]):
    """This process's part of every global batch that ``sampler`` and ``batch_size`` make.

    Every process iterates the same ``sampler`` (a ``RandomSampler`` draws its order from
    torch's global generator, seeded alike on every process), cuts the order into global
    batches of ``batch_size`` and keeps its contiguous shard (:meth:`World.shard`) of each.

    Args:
        sampler: the indices in their global order (e.g. the user loader's sampler).
        batch_size: the global batch size ``B``; each process gets about ``B / size``.
        drop_last: drop a last global batch shorter than ``batch_size``.
        world: the processes.
    """

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool, world: World):
        self.sampler, self.batch_size, self.drop_last, self.world = (
            sampler,
            batch_size,
            drop_last,
            world,
        )

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield self._part(batch)
                batch = []
        if batch and not self.drop_last:
            yield self._part(batch)

    def _part(self, batch: list[int]) -> list[int]:
        return self.world.part(batch)

    def __len__(self) -> int:
        return len(self.global_sizes())

    def global_sizes(self) -> list[int]:
        """The size of every global batch of an epoch (each process has its shard)."""
        n = len(self.sampler)
        sizes = [self.batch_size] * (n // self.batch_size)
        if n % self.batch_size and not self.drop_last:
            sizes.append(n % self.batch_size)
        return sizes


def shard_loader(loader: DataLoader, world: World) -> DataLoader:
    """``loader`` for this process of a data-parallel job: the same data set, order and
    global batch size, each process loading its part of every batch
    (:class:`ShardedBatchSampler`; workers, collate function and pinning kept).
    A loader that already shards (a ``DistributedSampler``) is returned as it is."""
    if not world.distributed or isinstance(loader.sampler, DistributedSampler):
        return loader
    if loader.batch_size is None:
        raise ConfigError(
            "under torchrun, ella.fit needs a DataLoader with batch_size (not a batch_sampler) "
            "or one with a DistributedSampler"
        )
    check_batches(len(loader.sampler), loader.batch_size, world, loader.drop_last)
    return DataLoader(
        loader.dataset,
        batch_sampler=ShardedBatchSampler(
            loader.sampler, loader.batch_size, loader.drop_last, world
        ),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        worker_init_fn=loader.worker_init_fn,
    )


class ShardLoader:
    """A process's batches of a data set, presented as the whole set to laplace-torch:
    iterating gives this process's batches, ``dataset`` has the whole set's length (the
    ``N`` of the Kronecker factors' scaling, the same on every process).

    Args:
        loader: this process's batches (e.g. a ``DataLoader`` over its shard).
        total: the number of examples over all processes.
    """

    def __init__(self, loader: Iterable, total: int):
        self.loader = loader
        self.dataset = range(total)

    def __iter__(self) -> Iterator:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)
