"""``ella train``: the mixer and the data of a configuration, on the one alternating loop.

:class:`Trainer` builds what a :class:`~ella.train.config.TrainConfig` names (the data
set with its validation split, the mixer or another of :mod:`ella.models`, input
invariance, augmentation, the step's arithmetic and its CUDA graph) and trains it with
the loop that :func:`ella.fit` runs (:class:`~ella.train.alternating.AlternatingRun`: MAP steps with
the prior term, and the :class:`~ella.learner.PriorLearner`'s evidence rounds). What is
its own: the batches, cut from the images in memory and augmented on the device
(:meth:`Trainer.epoch_batches`); the input invariance it is given
(:class:`~ella.train.input_invariance.InputInvariance`: the invariant classifier, its
loss term and its rounds of Adam steps through the differentiable evidence); the
best-evidence state; and the run directory's ``results.json`` and figures
(:meth:`Trainer.finish`).

:class:`~ella.train.config.TrainConfig`'s defaults resolve ``ggn`` and ``prior_update``
(``auto``) to the stratified GGN and the closed-form step, on a subset with the
training passes' control variate. With ``learn_priors=False`` the same loop trains a
MAP baseline.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import math
import sys
from collections.abc import Callable, Iterator
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
from ella.data.transforms import apply_augmentation, draw_augmentation
from ella.distributed import (
    ONE_PROCESS,
    World,
    batch_sizes,
    check_batches,
    current,
    data_parallel,
    sharded_batches,
)
from ella.engine.arithmetic import CompiledOrEager, StepArithmetic
from ella.engine.epochs import Stream, epoch_generator
from ella.engine.evaluation import evaluate_batches
from ella.engine.graphs import StepGraph, use_cuda_graph
from ella.engine.health import training_collapse
from ella.engine.schedule import cosine_lr, evidence_due, make_optimizer
from ella.errors import ConfigError, EvidenceError, TrainingDivergedError
from ella.invariance import InvarianceEvidence
from ella.io import save_json
from ella.learner import PriorLearner, prior_convergence, shares_history
from ella.learner.report import (
    effective_parameter_report,
    format_table,
    layer_mean_shares,
    save_eta_figure,
    save_figure,
)
from ella.marglik import LaplaceEvidence, class_frequency_model
from ella.marglik.evidence import check_memory
from ella.models import Mixer
from ella.models.build import build_model
from ella.rundir import checkpoint_note
from ella.system import resolve_device
from ella.train.alternating import AlternatingRun, AlternatingState, Batch
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
    ``e % marglik_frequency == 0``; none when neither priors nor invariance are learned."""
    learning = config.learn_priors or config.invariance == InvarianceMethod.LEARNED
    return [e for e in range(1, config.epochs + 1) if evidence_due(config, e, learning)]


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
    # the last evidence round: epoch, log_marglik and its effective-parameter report, so
    # that a run resumed after its last epoch reports exactly what it would have
    last_round: dict | None = None


class Trainer(AlternatingRun):
    """Trains one model as configured, writing a run directory: the mixer and the data of
    the configuration, on the loop of :class:`~ella.train.alternating.AlternatingRun`.

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
        self.config = config
        self.out = Path(out_dir)
        self.on_epoch_end = on_epoch_end
        self.world = current()
        self._check_world(config)
        self.device = self.world.device(resolve_device(config.device))
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
        self.net = self.net.to(self.device)
        #: the input invariance the run learns or imposes (--invariance), or None
        self.invariance = (
            None
            if config.invariance == InvarianceMethod.NONE
            else InputInvariance(config, self.net, self.device)
        )
        self.model = self.invariance.model if self.invariance else self.net
        self.train_model = data_parallel(self.model, self.world)
        if config.compile:
            self.train_model = CompiledOrEager(self.train_model, announce=self.world.is_main)
        #: the arithmetic of the training steps (--precision)
        self.steps = StepArithmetic(config.precision, self.device)
        #: the training images and labels the steps index (on the device where they fit)
        self.train_tensors = self._training_tensors()
        self.n_train = len(self.data.train)
        self.train_data = self.data.train
        self.labels = self.data.train.tensors[1]
        check_batches(self.n_train, config.batch_size, self.world)
        self.priors = PriorLearner.from_config(self.net, self.n_train, config)
        # the rounds' control where they learn the network's priors on a subset, else none
        self.priors.recipe = self.priors.recipe.replace(control=self.subset_control())
        self.prior, self.log_prior = self.priors.prior, self.priors.log_prior
        if config.learn_priors or config.invariance == InvarianceMethod.LEARNED:
            check_memory(self.net, config.hessian)  # refuse an impossible Hessian up front
        self.optimizer = make_optimizer(self.model, config)
        self.hyper_optimizer = self.priors.optimizer
        self.step_graph = self._step_graph(config)
        self.state = TrainState()
        # the evidence of the last evidence round, for that round's report (round_report)
        self._round_evidence: LaplaceEvidence | InvarianceEvidence | None = None
        self.steps_per_epoch = math.ceil(self.n_train / config.batch_size)
        #: ``1 - sum p^2`` of every training image in its training passes, averaged over
        #: epochs with each older epoch's weight halved (the auxiliary variable of
        #: ``--subset-control training``); NaN before the first epoch
        self.output_trace = torch.full((self.n_train,), math.nan, dtype=torch.float64)

    def _training_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training images and labels, moved to the device once where they take at
        most a quarter of its free memory (batches are then cut and augmented there),
        else left in host memory (each batch is copied)."""
        x, y = self.data.train.tensors
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if x.nbytes + y.nbytes > free // 4:
                return x, y
        return x.to(self.device), y.to(self.device)

    def _step_graph(self, config: TrainConfig) -> StepGraph | None:
        """The training step captured as a CUDA graph where ``--cuda-graph`` and the run allow
        it (:func:`~ella.engine.graphs.use_cuda_graph`), else None; ``auto`` on a CUDA
        device says once on stderr why its steps run eagerly."""
        captured, reason = use_cuda_graph(
            config.cuda_graph,
            self.device,
            compiled=config.compile,
            processes=self.world.size,
            invariant=config.invariance != InvarianceMethod.NONE,
        )
        if reason is not None and self.device.type == "cuda" and self.world.is_main:
            tqdm.write(
                f"--cuda-graph auto: the training steps run eagerly ({reason})", file=sys.stderr
            )
        if not captured:
            return None
        return StepGraph(
            self.step_optimizers(),
            self.device,
            version=lambda: self.log_prior._version,  # the evidence rounds' updates
            announce=self.world.is_main,
        )

    # ------------------------------------------------------------------ data parallelism
    def _check_world(self, config: TrainConfig) -> None:
        """Refuse, before any work, what a data-parallel job cannot do."""
        if not self.world.distributed:
            return
        size = self.world.size
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

    @property
    def invariant(self) -> bool:
        """Whether the model is an invariant classifier (``--invariance`` not ``none``)."""
        return self.invariance is not None

    def eta(self) -> dict[str, float]:
        """The current extents per generator (empty without input invariance)."""
        return self.invariance.eta() if self.invariance else {}

    # ------------------------------------------------------------------ persistence
    def checkpoint_entries(self) -> dict:
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
        self.model.load_state_dict(ckpt["model"])
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

    # ------------------------------------------------------------------ steps
    def epoch_batches(self, epoch: int) -> Iterator[Batch]:
        """This process's part of every (augmented) global batch of the epoch after
        ``epoch`` completed ones, with its indices and an invariant model's
        transformation samples."""
        transformations = (
            self.invariance.epoch_transformations(epoch, self.n_train)
            if self.invariance
            else itertools.repeat(None)
        )
        batches = sharded_batches(
            self.train_tensors,
            self.config.batch_size,
            epoch_generator(self.config.seed, epoch, Stream.DATA_ORDER),
            self.world,
            self.epoch_augmentation(epoch),
        )
        for x, y, n_batch, index in batches:
            yield Batch(x, y, n_batch, index, next(transformations))

    def predict_train(self, batch: Batch) -> torch.Tensor:
        """Training-mode logits; an invariant model's average over the batch's
        transformations (:meth:`InputInvariance.predict`)."""
        if self.invariance:
            return self.invariance.predict(batch)
        return self.train_model(batch.x)

    def regularised(self, loss: torch.Tensor) -> torch.Tensor:
        """The batch's loss, with Augerino's term (:meth:`InputInvariance.regularised`)."""
        return self.invariance.regularised(loss) if self.invariance else loss

    def step_optimizers(self) -> list[torch.optim.Optimizer]:
        if self.invariance:
            return self.invariance.step_optimizers(self.optimizer)
        return [self.optimizer]

    def arithmetic(self) -> contextlib.AbstractContextManager:
        return self.steps.arithmetic()

    def autocast(self) -> contextlib.AbstractContextManager:
        return self.steps.autocast()

    def learning(self) -> bool:
        return self.config.learn_priors or self.config.invariance == InvarianceMethod.LEARNED

    def trace_device(self) -> torch.device:
        return self.train_tensors[1].device

    def epoch_augmentation(
        self, epoch: int
    ) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None:
        """The augmentation of ``epoch``'s batches (None for ``--augment none``): each
        batch's parameters drawn up front, in batch order, from the epoch's generator
        (the draws that augmenting the batches in turn makes) and moved to the device in
        one copy; the images are then augmented there, batched (the test set never)."""
        cfg = self.config
        if cfg.augment == Augmentation.NONE:
            return None
        generator = epoch_generator(cfg.seed, epoch, Stream.AUGMENTATION)
        sizes = batch_sizes(self.n_train, cfg.batch_size)
        draws = [draw_augmentation(cfg.augment, n, generator, cfg.augment_shift) for n in sizes]
        params = iter(torch.cat(draws).to(self.train_tensors[0].device).split(sizes))

        def augment_batch(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return apply_augmentation(x, cfg.augment, next(params)), y

        return augment_batch

    def evidence_data(self) -> Dataset:
        """The training images of this evidence round: all of them, or the round's fresh
        class-balanced subset of ``marglik_subset_size`` (:meth:`PriorLearner.round_subset`,
        a function of the seed and the epoch)."""
        index = self.priors.round_subset(self.data.train, self.state.epoch, self.labels)
        return self.data.train if index is None else Subset(self.data.train, index)

    def subset_control(self) -> SubsetControl:
        """The control variate the evidence rounds use: ``config.subset_control`` where the
        rounds learn the network's priors on a subset of the training images, else none
        (an invariant model's rounds use its own evidence instead)."""
        partial = self.priors.recipe.draws_subset(self.n_train)
        if not partial or not self.config.learn_priors or self.invariant:
            return SubsetControl.NONE
        return self.config.subset_control

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

    def evidence_round(self) -> float:
        """This round: the learner's (:meth:`AlternatingRun.evidence_round`), or Adam steps
        through the invariant model's evidence (:meth:`InputInvariance.evidence_round`);
        returns the log evidence after it."""
        if self.invariance:
            self._round_evidence, value = self.invariance.evidence_round(
                self.priors, self.data.train, self.state.epoch, self._check_evidence, self.progress
            )
            return value
        value = super().evidence_round()
        self._round_evidence = self.priors.evidence
        return value

    def _check_evidence(self, value: torch.Tensor) -> None:
        if not torch.isfinite(value):
            raise TrainingDivergedError(
                f"the log marginal likelihood became {value.item()} at epoch {self.state.epoch}; "
                f"{checkpoint_note(self.out)}. Try a smaller --lr-hyp or more burn-in epochs."
            )

    # ------------------------------------------------------------------ run
    def run(self, resume: bool = False, overwrite: bool = False) -> dict:
        """Train to the configured number of epochs and write ``results.json``.

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
                seconds = self.run_epochs(
                    "epochs", resume=resume, overwrite=overwrite, on_epoch_end=self.on_epoch_end
                )
                return self.finish(seconds)
        except EvidenceError as err:  # its message names the fix (a smaller --lr)
            raise TrainingDivergedError(f"{err}; {checkpoint_note(self.out)}") from err

    def round_metrics(self) -> dict:
        """The loop's round metrics (an invariant model's rounds have no gap to an
        optimum); keeps the round's report and, with ``--report-state best_evidence``, the
        best-evidence state."""
        value, epoch = self.state.marglik[-1], self.state.epoch
        report = self.round_report()
        self.state.last_round = {"epoch": epoch, "log_marglik": value, "report": report}
        row = super().round_metrics()
        keeps_best = self.config.report_state == ReportedState.BEST_EVIDENCE
        if keeps_best and (self.state.best is None or value > self.state.best["log_marglik"]):
            self.state.best = {
                "epoch": epoch,
                "log_marglik": value,
                "model": copy.deepcopy(self.model.state_dict()),
                "log_prior": self.log_prior.detach().clone(),
            }
        return row

    def round_gap(self) -> float | None:
        return None if self.invariant else super().round_gap()

    def round_shares(self) -> dict[str, float]:
        return layer_mean_shares(self.state.last_round["report"]["layers"])

    def measure(self, row: dict) -> None:
        """An invariant model's extents; the validation (if held out) and test metrics."""
        if self.invariant:
            row["eta"] = self.eta()
        for split, metrics in self.evaluate_sets().items():
            row.update({f"{split}_{k}": v for k, v in metrics.items()})

    def round_report(self) -> dict[str, list[dict]]:
        """:func:`~ella.learner.report.effective_parameter_report` at the evidence just fitted
        and the priors it ended with."""
        return effective_parameter_report(
            self.net, self._round_evidence, self.log_prior.detach().exp()
        )

    def evaluate_sets(self) -> dict[str, dict[str, float]]:
        """Accuracy and NLL of the model as it is on ``validation`` (if held out) and
        ``test``: ``{split: {"accuracy": ..., "nll": ...}}``."""
        sets = {"validation": self.validation} if self.validation is not None else {}
        sets["test"] = self.data.test
        return {split: evaluate(self.model, data, world=self.world) for split, data in sets.items()}

    def postfix(self, row: dict) -> dict[str, str]:
        return {
            **super().postfix(row),
            **({"val_acc": f"{row['validation_accuracy']:.3f}"} if self.validation else {}),
            "test_acc": f"{row['test_accuracy']:.3f}",
            **({"marglik": f"{row['log_marglik']:.1f}"} if "log_marglik" in row else {}),
            **({"rotate": f"{row['eta']['rotate']:.2f}"} if "eta" in row else {}),
        }

    def finish(self, seconds: float) -> dict:
        """Evaluate the reported state, compute the effective-parameter report, write results."""
        final = self.evaluate_sets()
        best = self.state.best  # kept only with --report-state best_evidence
        reported = final
        if best is not None:  # report the best-evidence state
            self.model.load_state_dict(best["model"])
            with torch.no_grad():
                self.log_prior.copy_(best["log_prior"])
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
            report = effective_parameter_report(self.net, evidence, self.log_prior.detach().exp())
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
            "prior_precision": self.prior.as_dict(self.log_prior.exp()),
            "prior_variance": self.prior.as_dict(self.log_prior.neg().exp()),
            "prior_convergence": prior_convergence(
                [row["prior_precision"] for row in self.state.metrics if "prior_precision" in row]
            ),
            "effective_parameters": report["layers"],
            "shares_history": shares_history(self.state.metrics),
            "training_collapse": training_collapse(self.state.metrics),
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
        if self.world.is_main:
            save_json(results, self.out / "results.json")
            if results["effective_parameters"]:  # networks with relaxed layers
                save_figure(results, self.out / "effective_parameters.png")
            if results["eta_history"]:
                save_eta_figure(results, self.out / "eta.png")
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
