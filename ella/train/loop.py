"""``ella train``: the mixer and the data of a configuration, on the one alternating loop.

:class:`Trainer` builds the parts a :class:`~ella.train.config.TrainConfig` names and
gives them to the loop that :func:`ella.fit` runs
(:class:`~ella.train.alternating.AlternatingRun`: MAP steps with the prior term, and the
:class:`~ella.learner.PriorLearner`'s evidence rounds): the data set with its validation
split, the mixer or another of :mod:`ella.models`, the batches cut from the images in
memory and augmented on the device (:class:`~ella.train.batches.ImageBatches`), the
input invariance (:class:`~ella.train.input_invariance.InputInvariance`), the keeper of
the best-evidence state, the step's arithmetic and its CUDA graph. What is its own: its
checkpoint's entries and the run directory's ``results.json`` and figures
(:meth:`Trainer.finish`).

:class:`~ella.train.config.TrainConfig`'s defaults resolve ``ggn`` and ``prior_update``
(``auto``) to the stratified GGN and the closed-form step, on a subset with the
training passes' control variate. With ``learn_priors=False`` the same loop trains a
MAP baseline.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from tqdm.auto import tqdm

from ella.choices import Augmentation, HeadInit, InvarianceMethod, ReportedState, SubsetControl
from ella.data import load_dataset
from ella.data.datasets import ImageData
from ella.distributed import (
    ONE_PROCESS,
    World,
    check_batches,
    current,
    data_parallel,
)
from ella.engine.arithmetic import CompiledOrEager, StepArithmetic
from ella.engine.evaluation import evaluate_batches
from ella.engine.graphs import StepGraph, use_cuda_graph
from ella.engine.schedule import cosine_lr, make_optimizer, no_round_note
from ella.errors import ConfigError, EvidenceError, TrainingDivergedError
from ella.io import load_state, save_json
from ella.learner import PriorLearner
from ella.learner.report import (
    format_table,
    save_eta_figure,
    save_figure,
)
from ella.marglik import LaplaceEvidence, class_frequency_model
from ella.marglik.backends import check_memory
from ella.models import Mixer
from ella.models.build import build_model
from ella.rundir import checkpoint_note
from ella.runtime.system import resolve_device
from ella.train.alternating import AlternatingRun, AlternatingState, BestEvidence
from ella.train.batches import EpochAugmentation, ImageBatches, training_tensors
from ella.train.config import HEAD_INIT_IMAGES, TrainConfig
from ella.train.input_invariance import InputInvariance


def split_validation(data: ImageData, size: int) -> tuple[ImageData, TensorDataset | None]:
    """Hold out the last ``size`` training images as a validation set.

    Returns the data with the remaining training images (at least 2), and the
    validation set (``None`` when ``size`` is 0). The test set is untouched.
    """
    if size == 0:
        return data, None
    x, y = data.train.tensors
    if size > len(x) - 2:
        raise ConfigError(
            f"--validation-size {size} leaves {max(len(x) - size, 0)} training images of the "
            f"{len(x)} loaded; leave at least 2: use a smaller validation size or a larger "
            "--train-size"
        )
    train = TensorDataset(x[:-size], y[:-size])
    return dataclasses.replace(data, train=train), TensorDataset(x[-size:], y[-size:])


def evidence_epochs(config: TrainConfig) -> list[int]:
    """The (1-based) epochs after which the evidence is fitted: ``e >= n_epochs_burnin`` and
    ``e % marglik_frequency == 0``; none when neither priors nor invariance are learned
    (:meth:`~ella.engine.schedule.ScheduleConfig.evidence_epochs`)."""
    return config.evidence_epochs()


@torch.no_grad()
def evaluate(
    model: nn.Module, data: TensorDataset, batch_size: int = 500, world: World = ONE_PROCESS
) -> dict[str, float]:
    """Accuracy and mean negative log likelihood on ``data`` (in a data-parallel job each
    process evaluates its shard and the sums are shared; :func:`evaluate_batches`)."""
    batches = DataLoader(world.subset(data), batch_size=batch_size)
    return evaluate_batches(model, batches, _summed_cross_entropy, world=world)


def _summed_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="sum")


@dataclass
class TrainState(AlternatingState):
    """Everything that changes during training (and goes into the checkpoint)."""

    best: dict | None = None  # best-evidence state: epoch, log_marglik, model, log_prior


def captured_step(
    config: TrainConfig,
    device: torch.device,
    world: World,
    optimizers: list[torch.optim.Optimizer],
    log_prior: torch.Tensor,
) -> StepGraph | None:
    """The training step captured as a CUDA graph where ``--cuda-graph`` and the run allow
    it (:func:`~ella.engine.graphs.use_cuda_graph`), else None; ``auto`` on a CUDA device
    says once on stderr why its steps run eagerly. ``optimizers``: those each step takes;
    ``log_prior``: the precisions the evidence rounds update between steps."""
    captured, reason = use_cuda_graph(
        config.cuda_graph,
        device,
        compiled=config.compile,
        processes=world.size,
        invariant=config.invariance != InvarianceMethod.NONE,
    )
    if reason is not None and device.type == "cuda" and world.is_main:
        tqdm.write(f"--cuda-graph auto: the training steps run eagerly ({reason})", file=sys.stderr)
    if not captured:
        return None
    return StepGraph(
        optimizers,
        device,
        version=lambda: log_prior._version,  # the evidence rounds' updates
        announce=world.is_main,
    )


class Trainer(AlternatingRun):
    """Trains one model as configured, writing a run directory: the parts that the
    configuration names, on the loop of :class:`~ella.train.alternating.AlternatingRun`.

    Args:
        config: the run's configuration.
        out_dir: run directory (config.json, metrics.jsonl, checkpoint.pt, results.json).
        on_epoch_end: optional callback ``f(trainer)`` after each saved epoch
            (used by tests to simulate an interruption).

    Under torchrun (:mod:`ella.distributed`) every process builds the same model and
    trains it with ``DistributedDataParallel`` on its part of every batch of one global
    data order (so ``N`` processes follow the batches of one process); the evidence is
    fitted on shards of one global subset and summed; test metrics are summed over
    shards of the test set; process 0 writes the run directory.
    """

    def __init__(
        self,
        config: TrainConfig,
        out_dir: str | Path,
        on_epoch_end: Callable[[Trainer], None] | None = None,
    ):
        config.validate()
        self.on_epoch_end = on_epoch_end
        world = current()
        self._check_world(config, world)
        device = world.device(resolve_device(config.device))
        torch.manual_seed(config.seed)
        self.data, self.validation = split_validation(
            load_dataset(config.dataset, config.data_dir, config.train_size, config.test_size),
            config.validation_size,
        )
        self.net = build_model(
            config, self.data.in_channels, self.data.num_classes, self.data.image_size
        )
        if config.head_init == HeadInit.DATA and isinstance(self.net, Mixer):
            # the same images in every process, so every process starts from the same weights
            self.net.standardise_head(self.data.train.tensors[0][:HEAD_INIT_IMAGES])
        self.net = self.net.to(device)
        #: the input invariance the run learns or imposes (--invariance), or None
        invariance = (
            None
            if config.invariance == InvarianceMethod.NONE
            else InputInvariance(config, self.net, device)
        )
        model = invariance.model if invariance else self.net
        train_model = data_parallel(model, world)
        if config.compile:
            train_model = CompiledOrEager(train_model, announce=world.is_main)
        #: the training images and labels the steps index (on the device where they fit)
        self.train_tensors = training_tensors(self.data.train, device)
        self.n_train = len(self.data.train)
        check_batches(self.n_train, config.batch_size, world)
        priors = PriorLearner.from_config(self.net, self.n_train, config)
        # the rounds' control where they learn the network's priors on a subset, else none
        partial = priors.recipe.draws_subset(self.n_train)
        learns_network = config.learn_priors and invariance is None
        control = config.subset_control if partial and learns_network else SubsetControl.NONE
        priors.recipe = priors.recipe.replace(control=control)
        self.prior, self.log_prior = priors.prior, priors.log_prior
        augmentation = (
            None
            if config.augment == Augmentation.NONE
            else EpochAugmentation(
                config.augment,
                config.augment_shift,
                config.seed,
                self.n_train,
                config.batch_size,
                self.train_tensors[0].device,
            )
        )
        keeps_best = config.report_state == ReportedState.BEST_EVIDENCE
        optimizer = make_optimizer(model, config)
        steps = self.steps_of(optimizer, invariance)
        super().__init__(
            config=config,
            model=model,
            priors=priors,
            optimizer=optimizer,
            train_data=self.data.train,
            batches=ImageBatches(
                self.train_tensors, config.batch_size, config.seed, world, augmentation, invariance
            ),
            out=Path(out_dir),
            world=world,
            state=TrainState(),
            train_model=train_model,
            arithmetic=StepArithmetic(config.precision, device),
            invariance=invariance,
            best=BestEvidence(model, priors.log_prior) if keeps_best else None,
            evaluations={
                **({"validation": self._evaluation(self.validation)} if self.validation else {}),
                "test": self._evaluation(self.data.test),
            },
            step_graph=captured_step(config, device, world, steps, priors.log_prior),
            labels=self.data.train.tensors[1],
            # in float64 from the start, one entry per training image, for the checkpoint
            output_trace=torch.full((self.n_train,), math.nan, dtype=torch.float64),
        )
        if self.learning():  # refuse an impossible Hessian before any work
            check_memory(self.net, config.hessian)
        self.hyper_optimizer = priors.optimizer
        self.steps_per_epoch = math.ceil(self.n_train / config.batch_size)

    def _evaluation(self, data: TensorDataset) -> Callable[[], dict[str, float]]:
        """Accuracy and NLL of the model as it is on ``data`` (:func:`evaluate`)."""
        return lambda: evaluate(self.model, data, world=self.world)

    @staticmethod
    def _check_world(config: TrainConfig, world: World) -> None:
        """Refuse, before any work, what a data-parallel job cannot do."""
        if not world.distributed:
            return
        size = world.size
        if config.invariance != InvarianceMethod.NONE:
            raise ConfigError(
                f"--invariance {config.invariance} is not data-parallel yet (its evidence "
                "draws transformations per process); run it in one process, without torchrun"
            )
        if config.marglik_subset_size is not None and config.marglik_subset_size < size:
            raise ConfigError(
                f"--marglik-subset-size {config.marglik_subset_size} is smaller than the "
                f"{size} processes; use at least {size}"
            )

    # ------------------------------------------------------------------ invariance
    @property
    def eta_optimizer(self) -> torch.optim.Optimizer | None:
        """The optimiser of the learned extents (:attr:`InputInvariance.eta_optimizer`)."""
        return self.invariance.eta_optimizer if self.invariance else None

    def eta(self) -> dict[str, float]:
        """The current extents per generator (empty without input invariance)."""
        return self.invariance.eta() if self.invariance else {}

    # ------------------------------------------------------------------ persistence
    def checkpoint_entries(self) -> dict:
        """The weights, their optimiser, the log precisions and their Adam state, the
        extents' optimiser, the traces and the generator's state."""
        return {
            "model": self.model.state_dict(),
            # as an eager run writes it, so that the run resumes with or without graphs
            "optimizer": (
                self.step_graph.state_dict(self.optimizer)
                if self.step_graph is not None
                else self.optimizer.state_dict()
            ),
            "hyper_optimizer": self.hyper_optimizer.state_dict(),
            "eta_optimizer": self.eta_optimizer.state_dict() if self.eta_optimizer else None,
            "log_prior": self.log_prior.detach().clone(),
            "output_trace": self.output_trace.clone(),
            # the MC GGN samples its labels from the global generator (as ASDL does): a
            # resumed run continues its stream, so it equals the uninterrupted one
            "rng_state": torch.get_rng_state(),
        }

    def restore_entries(self, ckpt: dict) -> None:
        """Load what :meth:`checkpoint_entries` saved."""
        load_state(self.model, ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.hyper_optimizer.load_state_dict(ckpt["hyper_optimizer"])
        if self.eta_optimizer is not None:
            self.eta_optimizer.load_state_dict(ckpt["eta_optimizer"])
        with torch.no_grad():
            self.log_prior.copy_(ckpt["log_prior"])
        if ckpt.get("output_trace") is not None:  # absent before --subset-control
            self.output_trace = ckpt["output_trace"].to(self.output_trace)
        if ckpt.get("rng_state") is not None:  # absent from older checkpoints
            torch.set_rng_state(ckpt["rng_state"])
        if self.step_graph is not None:  # new optimiser state: capturable, captured again
            self.step_graph.reset()

    # ------------------------------------------------------------------ evidence
    def evidence_data(self) -> Dataset:
        """The training images of this evidence round: all of them, or the round's fresh
        class-balanced subset of ``marglik_subset_size`` (:meth:`PriorLearner.round_subset`,
        a function of the seed and the epoch)."""
        index = self.priors.round_subset(self.data.train, self.state.epoch, self.labels)
        return self.data.train if index is None else Subset(self.data.train, index)

    def subset_curvature_ratio(self, data: Subset) -> float:
        """The control variate's factor on the curvature of ``data``, a round's images
        (:meth:`PriorLearner.curvature_ratio`; 1 without a control)."""
        return self.priors.curvature_ratio(
            self.data.train, torch.as_tensor(data.indices), self.output_trace
        )

    def fit_evidence(self) -> LaplaceEvidence:
        """Fit this round's evidence (:meth:`PriorLearner.fit_round`: the round's subset,
        its curvature scaled by the control variate of ``--subset-control``; in a
        data-parallel job each process fits its shard and the factors are summed)."""
        return self.priors.fit_round(
            self.data.train,
            self.state.epoch,
            labels=self.labels,
            traces=self.output_trace,  # read by the training control alone
            progress=self.progress,
        )

    # ------------------------------------------------------------------ run
    def run(self, resume: bool = False, overwrite: bool = False) -> dict:
        """Train to the configured number of epochs and write ``results.json``; a
        configuration that learns by the evidence but whose epochs end before its first
        round is said on stderr before training, and in the table
        (:func:`~ella.engine.schedule.no_round_note`).

        Args:
            resume: continue the run in the run directory from its checkpoint; a run
                that finished (it has ``results.json``) is final: its results are
                returned, with ``"finished": True``, and nothing is written.
            overwrite: start again in a directory that holds a run (its outputs are
                removed first); without it such a directory is refused.
        """
        try:
            with self.owning():
                finished = self.finished_results(resume)
                if finished is not None:  # final: reported as it is, nothing written
                    return {**finished, "table": format_table(finished), "finished": True}
                note = no_round_note(self.config, flags=True)  # said again in the table
                if note is not None and self.world.is_main:
                    tqdm.write(f"warning: {note}", file=sys.stderr)
                seconds = self.run_epochs(
                    "epochs", resume=resume, overwrite=overwrite, on_epoch_end=self.on_epoch_end
                )
                return self.finish(seconds)
        except EvidenceError as err:  # its message names the fix (a smaller --lr)
            raise TrainingDivergedError(f"{err}; {checkpoint_note(self.out)}") from err

    def finish(self, seconds: float) -> dict:
        """Evaluate the reported state, compute the effective-parameter report, write results."""
        final = self.evaluate_sets()
        best = self.state.best  # kept only with --report-state best_evidence
        reported = final
        if best is not None:  # report the best-evidence state
            self.best.restore(best)
            reported = self.evaluate_sets()
        epoch = best["epoch"] if best is not None else self.state.epoch
        last = self.state.last_round
        if last is not None and last["epoch"] == epoch:  # at exactly these weights
            report, final_marglik = last["report"], last["log_marglik"]
        else:
            if self.invariance:
                with torch.no_grad():
                    generator = torch.Generator().manual_seed(0)
                    evidence, value = self.invariance.evidence(
                        self.priors, self.data.train, generator
                    )
                final_marglik = float(value)
            else:
                evidence = self.fit_evidence()
                with torch.no_grad():
                    final_marglik = float(evidence.log_marginal_likelihood(self.log_prior))
            report = self.report_at(evidence)
        results = {
            # test_accuracy, final_test_nll, validation_accuracy (if held out), ...
            **{
                f"{prefix}{split}_{k}": v
                for prefix, sets in (("", reported), ("final_", final))
                for split, metrics in sets.items()
                for k, v in metrics.items()
            },
            "reported_state": "best_evidence" if best is not None else "final",
            "reported_epoch": epoch,
            "log_marglik": self.state.marglik,
            "log_marglik_epochs": self.state.marglik_epochs,
            "log_marglik_reported_state": final_marglik,
            # the evidence of no network, to read the network's against (ella.marglik.null)
            "class_frequency_log_evidence": class_frequency_model(
                self.data.train.tensors[1], self.data.num_classes
            )["log_evidence"],
            **self.learned_results(),
            "effective_parameters": report["layers"],
            "effective_parameters_other": report["others"],
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "invariance": self.config.invariance,
            "eta": self.eta(),
            "eta_history": [
                {"epoch": row["epoch"], **row["eta"]} for row in self.state.metrics if "eta" in row
            ],
            "train_size": self.n_train,
            "validation_size": len(self.validation) if self.validation is not None else 0,
            "test_size": len(self.data.test),
            "epochs": self.state.epoch,
            "train_time_s": seconds,
            "processes": self.world.size,
            "config": self.config.to_dict(),
        }
        if self.world.is_main:  # results.json last: a run is finished once it is there
            if results["effective_parameters"]:  # networks with relaxed layers
                save_figure(results, self.out / "effective_parameters.png")
            if results["eta_history"]:
                save_eta_figure(results, self.out / "eta.png")
            save_json(results, self.out / "results.json")
        results["table"] = format_table(results)
        return results


def train(
    config: TrainConfig, out_dir: str | Path, resume: bool = False, overwrite: bool = False
) -> dict:
    """Train as configured into ``out_dir``; returns the contents of ``results.json``."""
    return Trainer(config, out_dir).run(resume=resume, overwrite=overwrite)


__all__ = [
    "TrainConfig",
    "Trainer",
    "TrainingDivergedError",
    "cosine_lr",
    "evaluate",
    "evidence_epochs",
    "train",
]
