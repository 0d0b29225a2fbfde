"""The training steps read nothing back from the device: the number of a tensor's
conversions to Python values (each a host synchronisation on a GPU) made by an epoch does
not grow with its steps, in ``ella train`` and in :func:`ella.fit`."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ella
from ella.train import TrainConfig, Trainer
from ella.train.fit import FitRun
from tests.user_models import user_model

#: the methods by which a tensor's value reaches Python (a device-to-host copy and wait)
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


@contextlib.contextmanager
def host_reads(host: Iterable[torch.Tensor] = ()) -> Iterator[Counter]:
    """Count, by method, the conversions of tensors to Python values in the block, but for
    those of the tensors in ``host``, which stay in host memory on a GPU too."""
    counts: Counter = Counter()
    saved = {name: getattr(torch.Tensor, name) for name in READS}
    skipped = {id(t) for t in host}

    def counting(name, method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if id(self) not in skipped:
                counts[name] += 1
            return method(self, *args, **kwargs)

        return wrapper

    for name, method in saved.items():
        setattr(torch.Tensor, name, counting(name, method))
    try:
        yield counts
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def test_the_counter_sees_a_read_in_a_step():
    with host_reads() as counts:
        loss = torch.ones(3).sum()
        float(loss)
        if torch.isfinite(loss):
            loss.item()
    assert counts == Counter({"__float__": 1, "__bool__": 1, "item": 1})


def optimizer_steps(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Adam's step counters, which torch keeps in host memory on a GPU too (unless asked
    for a ``capturable`` or ``fused`` Adam), so reading them does not wait for the GPU."""
    return [s["step"] for s in optimizer.state.values() if "step" in s]


def train_epoch_reads(train_size: int, **options) -> Counter:
    config = TrainConfig(
        train_size=train_size, test_size=16, width=1, batch_size=8, epochs=2,
        n_epochs_burnin=1, marglik_frequency=1, marglik_subset_size=16, progress=False,
        **options,
    )  # fmt: skip
    trainer = Trainer(config, "unused")
    trainer.train_epoch()  # the first epoch sets the caches (the prior's scales)
    trainer.state.epoch += 1
    optimizers = [o for o in (trainer.optimizer, trainer.eta_optimizer) if o is not None]
    with host_reads([s for o in optimizers for s in optimizer_steps(o)]) as counts:
        trainer.train_epoch()
    return counts


@pytest.mark.parametrize(
    "options",
    [{}, {"augment": "c4", "learn_priors": False}, {"invariance": "augerino", "augment": "none"}],
    ids=["defaults", "c4-map", "augerino"],
)
def test_an_epoch_of_ella_train_reads_the_device_a_fixed_number_of_times(options):
    few, many = train_epoch_reads(32, **options), train_epoch_reads(96, **options)
    assert few == many, f"4 steps read {dict(few)}, 12 steps {dict(many)}"
    assert sum(many.values()) <= 2  # the epoch's sums and non-finite check, in one read


def fit_reads(n_batches: int, monkeypatch) -> Counter:
    """The reads of the second epoch of :func:`ella.fit` (the first makes Adam's state)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8 * n_batches, 1, 8, 8, generator=g), torch.randint(3, (8 * n_batches,))
    train = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    counts: Counter = Counter()
    epoch = FitRun.train_epoch

    def counted(run):
        if run.state.epoch == 0:
            return epoch(run)
        with host_reads(optimizer_steps(run.optimizer)) as reads:
            row = epoch(run)
        counts.update(reads)
        return row

    with monkeypatch.context() as patch:
        patch.setattr(FitRun, "train_epoch", counted)
        ella.fit(user_model(), train, epochs=2, n_epochs_burnin=5, progress=False)
    return counts


def test_an_epoch_of_ella_fit_reads_the_device_a_fixed_number_of_times(monkeypatch):
    few, many = fit_reads(3, monkeypatch), fit_reads(9, monkeypatch)
    assert few == many, f"3 steps read {dict(few)}, 9 steps {dict(many)}"
    # the loader's order and seed (host tensors) and the epoch's one read from the device
    assert sum(many.values()) <= 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_epoch_on_cuda_synchronises_a_fixed_number_of_times():
    """On a GPU, torch's own count: its synchronisation warnings (copies to the host, waits)
    in an epoch of 4 and of 12 steps."""

    def synchronisations(train_size: int) -> list[str]:
        config = TrainConfig(
            train_size=train_size, test_size=16, width=1, batch_size=8, epochs=2,
            n_epochs_burnin=1, marglik_frequency=1, marglik_subset_size=16,
            augment="rotate", progress=False, device="cuda",
        )  # fmt: skip
        trainer = Trainer(config, "unused")
        trainer.train_epoch()
        trainer.state.epoch += 1
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainer.train_epoch()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        return [str(w.message).splitlines()[0] for w in caught]

    few, many = synchronisations(32), synchronisations(96)
    assert len(few) == len(many), f"4 steps: {few}; 12 steps: {many}"


@pytest.mark.parametrize("method", ["de", "forde"])
def test_an_epoch_of_an_ensemble_reads_the_device_a_fixed_number_of_times(method):
    from tests.ensembles.tiny_trainer import tiny_data, trainer

    def reads(n_train: int) -> Counter:
        run = trainer(tiny_data(n_train=n_train), method=method)
        run.train_epoch()
        run.state.epoch += 1
        with host_reads(optimizer_steps(run.optimizer)) as counts:
            run.train_epoch()
        return counts

    few, many = reads(32), reads(96)
    assert few == many, f"2 steps read {dict(few)}, 6 steps {dict(many)}"
