"""``ella.fit``: learn the layer-wise priors of your own model on your own DataLoader.

The whole alternating job for any ``nn.Module`` made of ella's relaxed layers
and/or ``nn.Linear``/``nn.Conv2d`` layers, on the loop that ``ella train`` runs
(:class:`~ella.train.alternating.AlternatingRun`): MAP epochs with the prior term of a
:class:`~ella.learner.PriorLearner`, its evidence rounds on the schedule of
:class:`~ella.engine.schedule.ScheduleConfig` (``ella train``'s recipe by default: a
class-balanced subset of 500 examples per round, the stratified GGN, the training
passes' control variate, half the way to each round's optimum), test metrics per epoch, and
optionally a run directory with a checkpoint after every epoch and exact resume.

Seeding is ``ella train``'s (:mod:`ella.train.alternating`): seed torch's global
generator before building the model; a ``DataLoader(shuffle=True)`` without a
generator of its own draws each epoch's order from the epoch's data-order generator
(its generators are unset again when :func:`fit` returns); each checkpoint holds the
global generator's state, so a resumed run equals the uninterrupted one. A loader
with its own generator or sampler draws its own order: make it a function of the
epoch for an exact resume.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
)

from ella import distributed
from ella.choices import Likelihood, SubsetControl
from ella.distributed import (
    ONE_PROCESS,
    ShardedBatchSampler,
    World,
    data_parallel,
    shard_loader,
)
from ella.engine.evaluation import evaluate_batches
from ella.engine.recipe import LOOP_CONTROL
from ella.engine.schedule import (
    SCHEDULE_HELP,
    NoEvidenceRoundWarning,
    ScheduleConfig,
    make_optimizer,
    no_round_note,
)
from ella.errors import ConfigError
from ella.io import load_state, save_json
from ella.learner import PriorLearner
from ella.learner.report import save_figure
from ella.options import option
from ella.rundir import RESULTS, checkpoint_note
from ella.train.alternating import (
    AlternatingRun,
    AlternatingState,
    Batch,
    data_loss,
    order_sampler,
    seed_epoch_order,
    seeds_its_order,
)
from ella.train.fit_inputs import (
    batch_indices,
    check_first_batch,
    check_held_labels,
    check_model,
    check_path_argument,
    check_rounds,
    check_run_arguments,
    check_test_loader,
    checked_inputs,
    checked_labels,
    n_examples,
)

__all__ = ["FIT_HELP", "FitConfig", "FitResult", "FitRun", "fit"]


#: what each option of :class:`FitConfig` (a keyword of :func:`fit`) means
FIT_HELP: dict[str, str] = {
    **SCHEDULE_HELP,
    "likelihood": "classification (logits and integer labels, cross-entropy) or regression "
    "(outputs and targets, a Gaussian likelihood)",
    "sigma_noise": "the Gaussian likelihood's noise scale (regression)",
}


@dataclass
class FitConfig(ScheduleConfig):
    """The schedule of :class:`ScheduleConfig` plus the likelihood of the targets.

    ``likelihood="classification"``: logits (B, K) and integer labels (B,), loss
    cross-entropy. ``"regression"``: outputs and targets (B, D), loss
    ``||f - y||^2 / (2 sigma_noise^2)`` per example (a Gaussian likelihood).
    """

    COMMAND: ClassVar[str | None] = "ella.fit"

    likelihood: Likelihood = Likelihood.CLASSIFICATION
    sigma_noise: float = option(1.0, greater_than=0)
    # ella train's: the training passes' traces (the loop knows each batch's indices for
    # a DataLoader with shuffle=True and no generator of its own, or with shuffle=False)
    subset_control: SubsetControl = LOOP_CONTROL

    def evidence_settings(self) -> dict[str, object]:
        """The schedule's settings and the likelihood (the stratified GGN samples class
        labels), so a regression with that estimator is refused before training."""
        return {**super().evidence_settings(), "likelihood": self.likelihood}


@dataclass
class FitResult:
    """What :func:`fit` learned and measured.

    Attributes:
        model: the trained model (the object passed in).
        priors: the :class:`~ella.learner.PriorLearner` (precisions, last evidence).
        prior_precision: ``{group: delta}``; ``prior_variance``: ``{group: 1/delta}``.
        effective_parameters: one row per relaxed layer (FC/CONV/GCONV shares in
            percent, effective parameters and prior variance per path), from the
            evidence at the final weights and priors (the initial priors where
            ``priors_learned`` is False).
        effective_parameters_other: the same per other module (heads, plain layers).
        log_marglik: log evidence after each evidence step, at ``log_marglik_epochs``.
        prior_convergence: whether the precisions had settled by the last round
            (:func:`~ella.learner.prior_convergence`).
        metrics: one dict per epoch (train loss, for classification train accuracy, lr,
            test metrics, log evidence).
        shares_history: the mean FC/CONV/GCONV shares after each evidence round,
            ``[{"epoch": ..., "fc": ..., "conv": ..., "gconv": ...}]``.
        training_collapse: the largest fall of the training accuracy below its best so
            far when it reached 20 points, else None (classification only;
            :func:`~ella.engine.health.training_collapse`).
        config: the run's :class:`FitConfig` (the recipe :func:`ella.select` trains its
            candidates with).
        priors_learned: whether an evidence round learned the priors: False for
            ``learn_priors=False``, and where ``epochs`` ended before the schedule's first
            round (:func:`fit` warns before training, with a
            :class:`~ella.engine.schedule.NoEvidenceRoundWarning`): the model is then a
            MAP network under its initial ``prior_precision``, and ``log_marglik`` is
            empty.
    """

    model: nn.Module
    priors: PriorLearner
    prior_precision: dict[str, float]
    prior_variance: dict[str, float]
    effective_parameters: list[dict]
    effective_parameters_other: list[dict]
    log_marglik: list[float]
    log_marglik_epochs: list[int]
    prior_convergence: dict = field(default_factory=dict)
    metrics: list[dict] = field(default_factory=list)
    shares_history: list[dict] = field(default_factory=list)
    training_collapse: dict | None = None
    config: FitConfig | None = None
    priors_learned: bool = False

    def plot(self, path: str | Path) -> Path:
        """Write the figure ``ella train`` writes (``effective_parameters.png``): stacked bars
        of each relaxed layer's shares of the effective parameters by path, and beside them
        the per-parameter measure (:func:`ella.learner.report.save_figure`), as PNG.

        Raises:
            ConfigError: ``path`` is not a file's path (a ``str`` or ``os.PathLike``), or the
                model has no relaxed layers, or no evidence was fitted.
        """
        check_path_argument("path", path, "the PNG file to write", "'shares.png'")
        if Path(path).is_dir():
            raise ConfigError(
                f"path={str(path)!r} is a directory: give the PNG file to write in it "
                f"(path={str(Path(path) / 'shares.png')!r})"
            )
        if not self.effective_parameters:
            raise ConfigError(
                "the result has no per-layer shares to plot: its model has no relaxed layers "
                "(ella.nn.RelaxedLayer), or no evidence was fitted (learn_priors=False)"
            )
        return save_figure(self.as_dict(), path)

    def as_dict(self) -> dict:
        """Plain JSON values (everything but the model, the learner and the config)."""
        return {
            "prior_precision": self.prior_precision,
            "prior_variance": self.prior_variance,
            "effective_parameters": self.effective_parameters,
            "effective_parameters_other": self.effective_parameters_other,
            "log_marglik": self.log_marglik,
            "log_marglik_epochs": self.log_marglik_epochs,
            "prior_convergence": self.prior_convergence,
            "metrics": self.metrics,
            "shares_history": self.shares_history,
            "training_collapse": self.training_collapse,
            "priors_learned": self.priors_learned,
        }


@torch.no_grad()
def evaluate_loader(
    model: nn.Module,
    loader: Iterable,
    config: FitConfig,
    world: World = ONE_PROCESS,
    classes: int | None = None,
) -> dict[str, float]:
    """Mean loss (and accuracy for classification) over ``loader`` (in a data-parallel job
    each process evaluates its shard of the loader's data set, and the sums are shared);
    with ``classes``, a label outside ``[0, classes)`` is an :class:`InputDataError`
    naming its batch (:func:`checked_labels`)."""
    if world.distributed and isinstance(loader, DataLoader):
        loader = _test_shard(loader, world)

    def name(i: int) -> str:
        return f"test_loader's batch {i + 1}"

    return evaluate_batches(
        model,
        checked_labels(checked_inputs(loader, name), classes, name),
        lambda outputs, y: data_loss(outputs, y, config.likelihood, config.sigma_noise) * len(y),
        classification=config.likelihood == Likelihood.CLASSIFICATION,
        world=world,
    )


def _test_shard(loader: DataLoader, world: World) -> DataLoader:
    """This process's contiguous part of a test loader's data set, in the loader's batches
    (a loader with a ``DistributedSampler`` shards already)."""
    if isinstance(loader.sampler, DistributedSampler):
        return loader
    part = world.subset(loader.dataset)
    return DataLoader(part, batch_size=loader.batch_size or 1, collate_fn=loader.collate_fn)


class LoaderBatches:
    """The batches of a user's ``DataLoader`` (the :class:`~ella.train.alternating.EpochBatches`
    part of :func:`fit`): in the order of the epoch's generator where the run draws it
    (:func:`seed_epoch_order`), a ``DistributedSampler`` told the epoch, each batch's
    labels checked against ``classes``.

    Args:
        loader: the loader the run reads (resharded over the processes where needed).
        user_loader: the loader the user gave (its order is given back at the end).
        seed: the run's seed.
        world: the processes of a data-parallel job.
        classes: the classes every batch's labels are checked against, or None.
        note: what a refused batch's message adds (where the checkpoint is).
        device: where the batches' indices are put.
    """

    def __init__(
        self,
        loader: DataLoader,
        user_loader: DataLoader,
        seed: int,
        world: World,
        classes: int | None,
        note: str,
        device: torch.device,
    ):
        self.loader, self.user_loader, self.seed, self.world = loader, user_loader, seed, world
        self.classes, self.note = classes, note
        self.index_device = device
        #: whether the run draws the loader's order (:func:`seed_epoch_order`)
        self.seeds_order = seeds_its_order(user_loader)

    def __call__(self, epoch: int, indexed: bool) -> Iterator[Batch]:
        """The loader's batches of the epoch after ``epoch`` completed ones, with the
        loader's indices where ``indexed`` (checked by :func:`check_rounds`)."""
        if self.seeds_order:
            seed_epoch_order(self.loader, self.seed, epoch)
        sampler = getattr(self.loader, "sampler", None)
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        size = self.world.size
        # the global batch sizes when the loader was resharded here (the shards differ by
        # at most one example); else every process has len(y) of each batch
        resharded = getattr(self.loader, "batch_sampler", None)
        sizes = resharded.global_sizes() if isinstance(resharded, ShardedBatchSampler) else None
        indices = batch_indices(self.loader, self.seed, epoch, self.world) if indexed else None

        def what(i: int) -> str:
            return f"train_loader's batch {i + 1} in epoch {epoch + 1}"

        for i, (x, y) in enumerate(checked_labels(self.loader, self.classes, what, self.note)):
            n_global = len(y) * size if sizes is None else sizes[i]
            yield Batch(x, y, n_global, None if indices is None else indices[i])

    def release(self) -> None:
        """Give the user's loader back its own unseeded order."""
        if self.seeds_order:
            for loader in (self.loader, self.user_loader):
                loader.generator = None
            order_sampler(self.loader).generator = None


class FitRun(AlternatingRun):
    """:func:`fit`'s run: the one loop (:class:`~ella.train.alternating.AlternatingRun`)
    on a user's model and ``DataLoader``, given :class:`LoaderBatches`; its checkpoint
    holds the learner's state dict.

    ``classes`` and ``test_classes`` are what the training and test batches' labels are
    checked against (:func:`fit` sets them from the first batch's outputs where it could
    not check the labels at once: :func:`check_held_labels`); None checks nothing.
    """

    def __init__(
        self,
        model: nn.Module,
        priors: PriorLearner,
        train_loader: DataLoader,
        test_loader: Iterable | None,
        config: FitConfig,
        out: str | Path | None,
        world: World,
        classes: int | None = None,
        test_classes: int | None = None,
    ):
        out = Path(out) if out is not None else None
        loader = shard_loader(train_loader, world)
        device = next(model.parameters()).device
        note = f" (training stopped there; {checkpoint_note(out)})"

        def test() -> dict[str, float]:
            return evaluate_loader(model, test_loader, config, world, test_classes)

        super().__init__(
            config=config,
            model=model,
            priors=priors,
            optimizer=make_optimizer(model, config),
            train_data=train_loader.dataset,
            batches=LoaderBatches(loader, train_loader, config.seed, world, classes, note, device),
            out=out,
            world=world,
            state=AlternatingState(),
            train_model=data_parallel(model, world),
            likelihood=config.likelihood,
            sigma_noise=config.sigma_noise,
            evaluations={"test": test} if test_loader is not None else None,
            divergence_hint="Try a smaller lr.",
        )
        self.steps_per_epoch = len(loader)

    @property
    def train_loader(self) -> DataLoader:
        """The loader the run reads (the user's, resharded over the processes where needed)."""
        return self.batches.loader

    def checkpoint_entries(self) -> dict:
        """The weights, their optimiser, the learner's state dict, the traces and the
        generator's state."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "priors": self.priors.state_dict(),
            "output_trace": self.output_trace,
            # the GGN samples its labels from the global generator: a resumed run
            # continues its stream, so it equals the uninterrupted one
            "rng_state": torch.get_rng_state(),
        }

    def restore_entries(self, ckpt: dict) -> None:
        """Load what :meth:`checkpoint_entries` saved."""
        load_state(self.model, ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.priors.load_state_dict(ckpt["priors"])
        self.output_trace = ckpt["output_trace"]
        torch.set_rng_state(ckpt["rng_state"])


def fit(
    model: nn.Module,
    train_loader: Iterable,
    test_loader: Iterable | None = None,
    config: FitConfig | None = None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    **options: Any,
) -> FitResult:
    """Train ``model`` with learned layer-wise priors (the alternating ELLA loop).

    Args:
        model: any network of ella's relaxed layers and/or ``nn.Linear``/``nn.Conv2d``
            (on the device it should train on).
        train_loader: a ``DataLoader`` of ``(x, y)`` batches; also the evidence's data.
        test_loader: optional; evaluated after every epoch: a ``DataLoader`` or another
            iterable of ``(x, y)`` batches that can be iterated again (a list, not a
            generator).
        config: a :class:`FitConfig`; or give its options as keywords
            (``fit(model, loader, epochs=20, n_epochs_burnin=5)``).
        out: a run directory (a ``str`` or ``os.PathLike``) for ``config.json``,
            ``checkpoint.pt`` (every epoch), ``metrics.jsonl`` and ``results.json``;
            ``None`` writes nothing.
        resume: ``True`` continues the run in ``out`` from its checkpoint (the same model
            architecture, loaders and configuration).
        overwrite: ``True`` starts again in an ``out`` that holds a run (not with
            ``resume``).
        **options: the fields of :class:`FitConfig` by name, instead of ``config`` (the API
            reference lists them with their defaults).

    Returns:
        A :class:`FitResult`.

    Raises:
        ConfigError: bad options, arguments or loaders, each named as its keyword (before
            any training): an unknown option; ``resume`` or ``overwrite`` not ``True`` or
            ``False``; ``out`` not a path; a loader that is not iterable, an iterator, or
            without batches.
        InputDataError: the first training or test batch is not ``(x, y)`` of one length,
            or its labels are not class indices of the model's outputs (int64, one per
            example, in ``[0, K)`` for ``K`` logits), or its regression targets not of the
            outputs' shape (before any training).
        TrainingDivergedError: the loss or the evidence stopped being finite (the
            last epoch's checkpoint is kept).

    Warns:
        NoEvidenceRoundWarning: before training, where the priors are to be learned but
            ``epochs`` end before the schedule's first evidence round
            (:func:`~ella.engine.schedule.no_round_note`: the epochs it needs, and
            ``learn_priors=False`` for a MAP network by intent); the result then has
            ``priors_learned=False``.
    """
    check_model(model)
    config = _fit_config(config, options)
    check_run_arguments(out, resume, overwrite)
    n_data = n_examples(train_loader)
    check_test_loader(test_loader)
    check_rounds(train_loader, n_data, config)
    priors = PriorLearner.from_config(
        model, n_data, config, likelihood=config.likelihood.value, sigma_noise=config.sigma_noise
    )
    classes = check_first_batch(model, train_loader, config)
    check_classes = check_held_labels(train_loader, classes, "train_loader's data set")
    test_classes = check_held_labels(test_loader, classes, "test_loader's data set")
    if test_loader is not None:  # its batches are evaluated after every epoch
        check_first_batch(model, test_loader, config, "test_loader")
    world = distributed.start()
    note = no_round_note(config)
    if note is not None and world.is_main:  # said before any work, and by the result
        warnings.warn(note, NoEvidenceRoundWarning, stacklevel=2)
    run = FitRun(
        model, priors, train_loader, test_loader, config, out, world, check_classes, test_classes
    )
    try:
        with run.owning():
            finished = run.finished_results(resume) is not None  # its results.json stays
            run.run_epochs("epochs", resume=resume, overwrite=overwrite)
            result = _fit_result(run, model, priors)
            if out is not None and world.is_main and not finished:
                save_json({**result.as_dict(), "config": config.to_dict()}, Path(out) / RESULTS)
    finally:
        run.batches.release()
    return result


def _fit_config(config: object, options: dict[str, Any]) -> FitConfig:
    """The run's :class:`FitConfig`: ``config`` checked again (its fields may have been set
    since it was built), or one built from ``options``, each named as a keyword of
    :func:`fit` (an unknown one with the nearest option)."""
    if config is None:
        names = [f.name for f in dataclasses.fields(FitConfig)]
        for name in options:
            if name not in names:
                near = difflib.get_close_matches(name, names, n=1)
                hint = f"did you mean {near[0]}=? " if near else ""
                raise ConfigError(
                    f"ella.fit has no option {name}=: {hint}its options are the fields of "
                    "ella.FitConfig (the API reference lists them with their defaults)"
                )
        config = FitConfig(**options)
        config.check_given(options)
    elif options:
        raise ConfigError(f"give either config or keyword options, not both ({sorted(options)})")
    if not isinstance(config, FitConfig):
        hint = (
            "; pass its options as keywords, ella.fit(..., **options)"
            if isinstance(config, Mapping)
            else ""
        )
        raise ConfigError(f"config must be an ella.FitConfig, got {type(config).__name__}{hint}")
    config.validate()  # a field set after the config was built is checked as at its start
    return config


def _fit_result(run: FitRun, model: nn.Module, priors: PriorLearner):
    """The :class:`FitResult` of a trained run (the report of its final weights)."""
    state = run.state
    last_round = state.marglik_epochs[-1:] == [state.epoch]
    fitted_now = last_round and priors.evidence is not None
    if not fitted_now:  # the report is always of the final weights
        priors.fit(run.train_loader)
    report = priors.report()
    return FitResult(
        model=model,
        priors=priors,
        effective_parameters=report["effective_parameters"],
        effective_parameters_other=report["effective_parameters_other"],
        log_marglik=list(priors.history),
        log_marglik_epochs=list(state.marglik_epochs),
        metrics=list(state.metrics),
        config=run.config,
        priors_learned=bool(run.config.learn_priors and state.marglik_epochs),
        **run.learned_results(),
    )
