"""The one alternating loop under ``ella train`` and :func:`ella.fit`.

Immer et al., "Scalable Marginal Likelihood Estimation for Model Selection in
Deep Learning" (ICML 2021), Algorithm 1, as used by ELLA (NeurIPS 2023):

* weights: a step of the optimiser on the mean negative log likelihood of a batch
  plus the prior term ``1/2 sum delta_t theta_t^2 / N`` (:meth:`PriorLearner.penalty
  <ella.learner.PriorLearner.penalty>`, ``delta`` fixed within the step);
* priors: after the epochs that :func:`~ella.engine.schedule.evidence_due` names, one
  evidence round of the :class:`~ella.learner.PriorLearner` (its subset, GGN, control
  variate and update: :meth:`~ella.learner.PriorLearner.evidence_round`).

:class:`AlternatingRun` is that loop, read in one place (:meth:`AlternatingRun.train_epoch`,
:meth:`AlternatingRun.after_epoch`), on the epoch machinery of
:class:`~ella.engine.epochs.EpochRun`. A command gives it parts: where an epoch's batches
come from (:class:`EpochBatches`: ``ella train``'s augmented images in memory, or a
user's ``DataLoader``), the steps' arithmetic, an input invariance
(:class:`Invariance`), the keeper of the best-evidence state (:class:`BestEvidence`) and
what is measured after each epoch. ``ella train`` (:class:`~ella.train.loop.Trainer`)
and :func:`ella.fit` build their parts and say what their checkpoints hold.

The seeding of every run: the global generator is seeded once, before the model is
built (by ``ella train``, or by the user before :func:`ella.fit`), and saved in every
checkpoint (it draws the GGN's sampled labels); the data order of the epoch trained
after ``e`` completed epochs is drawn from ``epoch_generator(seed, e, DATA_ORDER)``
(:func:`seed_epoch_order` sets it on a shuffling ``DataLoader``), and each round's
subset from ``epoch_generator(seed, e, EVIDENCE_SUBSET)`` with ``e`` the epoch just
trained (:meth:`~ella.engine.recipe.EvidenceRecipe.subset`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

from ella.choices import HessianStructure, Likelihood, SubsetControl
from ella.distributed import World
from ella.engine.arithmetic import StepArithmetic
from ella.engine.epochs import EpochRun, EpochState, Stream, epoch_generator
from ella.engine.graphs import StepGraph
from ella.engine.health import training_collapse
from ella.engine.schedule import ScheduleConfig, evidence_due
from ella.errors import TrainingDivergedError
from ella.learner import PriorLearner, dataset_labels, prior_convergence, shares_history
from ella.learner.report import effective_parameter_report, layer_mean_shares
from ella.marglik.backends import non_finite_parameters
from ella.marglik.control import output_hessian_trace
from ella.marglik.evidence import LaplaceEvidence
from ella.rundir import checkpoint_note
from ella.schemas import results_schema

__all__ = [
    "AlternatingRun",
    "AlternatingState",
    "Batch",
    "BestEvidence",
    "EpochBatches",
    "Invariance",
    "data_loss",
    "order_sampler",
    "seed_epoch_order",
    "seeds_its_order",
]


class Batch(NamedTuple):
    """One training batch of an epoch, as this process sees it.

    Attributes:
        x: this process's inputs (B_p, ...).
        y: their targets (B_p,) or (B_p, D).
        n_global: the size of the global batch (over every process) it is part of.
        index: the (B_p,) indices of the examples in the training set, where known (the
            training passes' traces of the ``training`` control variate need them).
        eps: the batch's transformation samples of an input-invariant model, else None.
    """

    x: torch.Tensor
    y: torch.Tensor
    n_global: int
    index: torch.Tensor | None = None
    eps: torch.Tensor | None = None


def data_loss(
    outputs: torch.Tensor,
    y: torch.Tensor,
    likelihood: Likelihood = Likelihood.CLASSIFICATION,
    sigma_noise: float = 1.0,
) -> torch.Tensor:
    """Mean negative log likelihood per example (up to constants): the cross-entropy of
    logits (B, K) and class indices (B,), or ``||f - y||^2 / (2 sigma_noise^2)`` for
    regression outputs and targets (B, D)."""
    if likelihood == Likelihood.CLASSIFICATION:
        return F.cross_entropy(outputs, y)
    return 0.5 * (outputs - y).square().sum(dim=-1).mean() / sigma_noise**2


def order_sampler(loader: DataLoader):
    """The sampler that draws ``loader``'s order: its batch sampler's (a ``BatchSampler``,
    or the :class:`~ella.distributed.ShardedBatchSampler` of a resharded loader), else
    its own."""
    sampler = getattr(loader.batch_sampler, "sampler", None)
    return loader.sampler if sampler is None else sampler


def seeds_its_order(loader) -> bool:
    """Whether :func:`seed_epoch_order` seeds ``loader``: a ``DataLoader`` that shuffles
    with a ``RandomSampler`` of its own making (``shuffle=True`` without a ``generator``)."""
    if not isinstance(loader, DataLoader):
        return False
    sampler = order_sampler(loader)
    return (
        isinstance(sampler, RandomSampler)
        and not sampler.replacement
        and sampler.generator is None
        and loader.generator is None
    )


def seed_epoch_order(loader: DataLoader, seed: int, epoch: int) -> None:
    """Draw the order of ``loader``'s next pass from ``epoch_generator(seed, epoch,
    DATA_ORDER)``: the order ``ella train`` draws for the epoch after ``epoch`` completed
    ones (:func:`ella.distributed.global_batches`). Call it before each epoch of a
    hand-written loop, on a ``DataLoader(shuffle=True)``.

    The loader's generator (which its iterator first draws its workers' base seed from)
    and its ``RandomSampler``'s are set to that generator.
    """
    sampler = order_sampler(loader)
    if not isinstance(sampler, RandomSampler) or sampler.replacement:
        raise TypeError(
            "seed_epoch_order needs a DataLoader(shuffle=True) (a RandomSampler without "
            f"replacement), got a loader with a {type(sampler).__name__}"
        )
    generator = epoch_generator(seed, epoch, Stream.DATA_ORDER)
    loader.generator = sampler.generator = generator


@dataclass
class AlternatingState(EpochState):
    """What the loop changes besides the epochs: the log evidence after each round, and
    the last round with its report of effective parameters (so that a run resumed after
    its last epoch reports exactly what it would have)."""

    marglik: list[float] = field(default_factory=list)
    marglik_epochs: list[int] = field(default_factory=list)
    last_round: dict | None = None  # epoch, log_marglik, report


class EpochBatches(Protocol):
    """Where an epoch's batches come from: ``ella train``'s images in memory
    (:class:`~ella.train.batches.ImageBatches`) or a user's ``DataLoader``
    (:class:`~ella.train.fit.LoaderBatches`)."""

    #: where the batches' indices into the training set are (the traces are recorded there)
    index_device: torch.device

    def __call__(self, epoch: int, indexed: bool) -> Iterator[Batch]:
        """This process's batches of the epoch after ``epoch`` completed ones, with their
        indices where ``indexed`` (the ``training`` control variate records traces)."""
        ...


class Invariance(Protocol):
    """What an input invariance changes in the loop (:class:`~ella.train.input_invariance.
    InputInvariance`): the outputs of a step, its loss and optimisers, and the rounds."""

    #: the invariant classifier trained (it wraps the network the priors are on)
    model: nn.Module
    #: whether the rounds learn the extents (through the evidence)
    learned_by_evidence: bool

    def predict(self, batch: Batch) -> torch.Tensor:
        """The (B, K) training-mode logits of ``batch`` (its inputs on the device)."""
        ...

    def regularised(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss a step backpropagates, from the batch's mean NLL."""
        ...

    def step_optimizers(self, optimizer: torch.optim.Optimizer) -> list[torch.optim.Optimizer]:
        """The optimisers a step takes, in order, the weights' ``optimizer`` first."""
        ...

    def evidence_round(
        self,
        priors: PriorLearner,
        train: Dataset,
        epoch: int,
        check: Callable[[torch.Tensor], None],
        progress: bool = False,
    ) -> tuple[Any, float]:
        """A round after ``epoch``; ``check`` refuses a non-finite evidence. Returns the
        round's evidence and its log evidence."""
        ...

    def eta(self) -> dict[str, float]:
        """The current extents per generator."""
        ...


class BestEvidence:
    """The state of the round with the highest evidence (``--report-state best_evidence``):
    kept in the run's state after each round, loaded back before the report.

    Args:
        model: the model trained (its state dict is kept).
        log_prior: the learned log precisions (kept, and restored in place).
    """

    def __init__(self, model: nn.Module, log_prior: torch.Tensor):
        self.model, self.log_prior = model, log_prior

    def after_round(self, state: EpochState, value: float) -> None:
        """Keep the state in ``state.best`` where the round's ``value`` beats the best so far."""
        if state.best is None or value > state.best["log_marglik"]:
            state.best = {
                "epoch": state.epoch,
                "log_marglik": value,
                "model": copy.deepcopy(self.model.state_dict()),
                "log_prior": self.log_prior.detach().clone(),
            }

    def restore(self, best: dict) -> None:
        """Load the kept state into the model and the log precisions."""
        self.model.load_state_dict(best["model"])
        with torch.no_grad():
            self.log_prior.copy_(best["log_prior"])


class AlternatingRun(EpochRun):
    """MAP epochs with a :class:`~ella.learner.PriorLearner`'s penalty and its evidence
    rounds (the module docstring): the one loop of ``ella train`` and :func:`ella.fit`,
    given its parts. A command builds the parts and says what its checkpoint holds
    (:meth:`~ella.engine.epochs.EpochRun.checkpoint_entries`).

    Args:
        config: the run's options (``epochs``, ``lr``, ``lr_min``, ``progress``,
            ``learn_priors``, the evidence schedule, ``seed``, ``to_dict``).
        model: the network trained (its state is checkpointed): the priors' network, or
            ``invariance.model`` around it.
        priors: the learner of the network's prior precisions.
        optimizer: the weights' optimiser.
        train_data: the ``N`` training examples of the rounds (a map-style data set).
        batches: where each epoch's batches come from.
        out: the run directory, or None (nothing written).
        world: the processes of a data-parallel job.
        state: the run's state (its type is the checkpoint's ``"state"``).
        train_model: the module the steps call (``model``, a ``DistributedDataParallel``
            wrapper of it, or a compiled one). Defaults to ``model``.
        likelihood: the training data's likelihood. Defaults to classification.
        sigma_noise: the regression likelihood's noise. Defaults to 1.
        arithmetic: the steps' arithmetic (TF32, autocast). Defaults to the default dtype's
            own, the process-wide flags untouched.
        invariance: an input invariance: its steps and its rounds replace the plain ones.
        best: the keeper of the best-evidence state, where it is reported.
        evaluations: ``{split: f}`` measured after every epoch, ``f()`` a dict of metrics
            (``test`` gives ``test_accuracy`` and ``test_nll``).
        step_graph: the training step captured as a CUDA graph
            (:mod:`ella.engine.graphs`), or None: eager steps.
        divergence_hint: what the divergence messages advise.
        labels: the (N,) class labels of ``train_data`` where the command has them at
            hand. Defaults to reading them at the first round that needs them.
        output_trace: the training traces to average into (N,), NaN where none was seen
            (a checkpoint stores them). Defaults to starting at the first epoch's.
    """

    def __init__(
        self,
        *,
        config: ScheduleConfig,
        model: nn.Module,
        priors: PriorLearner,
        optimizer: torch.optim.Optimizer,
        train_data: Dataset,
        batches: EpochBatches,
        out: Path | None,
        world: World,
        state: AlternatingState,
        train_model: nn.Module | None = None,
        likelihood: Likelihood = Likelihood.CLASSIFICATION,
        sigma_noise: float = 1.0,
        arithmetic: StepArithmetic | None = None,
        invariance: Invariance | None = None,
        best: BestEvidence | None = None,
        evaluations: dict[str, Callable[[], dict[str, float]]] | None = None,
        step_graph: StepGraph | None = None,
        divergence_hint: str | None = None,
        labels: torch.Tensor | None = None,
        output_trace: torch.Tensor | None = None,
    ):
        self.config, self.model, self.priors = config, model, priors
        self.optimizer, self.train_data, self.batches = optimizer, train_data, batches
        self.out, self.world, self.state = out, world, state
        self.train_model = model if train_model is None else train_model
        self.device = next(model.parameters()).device
        self.likelihood, self.sigma_noise = likelihood, sigma_noise
        #: the steps' arithmetic, or None: the default dtype's, the process-wide flags untouched
        self.arithmetic = arithmetic
        self.invariance, self.best = invariance, best
        self.evaluations = dict(evaluations or {})
        self.step_graph = step_graph
        if divergence_hint is not None:
            self.divergence_hint = divergence_hint
        #: the (N,) class labels of ``train_data``, read at the first round that needs them
        self.labels = labels
        #: the evidence of the round just fitted (for its report)
        self.round_evidence: Any = None
        #: ``1 - sum p^2`` of every training example in its training passes, averaged over
        #: epochs with each older epoch's weight halved (the auxiliary variable of the
        #: ``training`` control variate); None where the rounds do not read it, NaN before
        #: the first epoch
        self.output_trace = output_trace

    # ------------------------------------------------------------------ what the parts decide
    @staticmethod
    def steps_of(
        optimizer: torch.optim.Optimizer, invariance: Invariance | None
    ) -> list[torch.optim.Optimizer]:
        """The optimisers each step takes, in order: ``optimizer`` (the weights'), and an
        invariance's."""
        return invariance.step_optimizers(optimizer) if invariance is not None else [optimizer]

    def step_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimisers each step takes (:meth:`steps_of` this run's)."""
        return self.steps_of(self.optimizer, self.invariance)

    def learning(self) -> bool:
        """Whether the rounds learn something: the priors (if asked), or an invariance's
        extents through the evidence."""
        learned_eta = self.invariance is not None and self.invariance.learned_by_evidence
        return bool(self.config.learn_priors) or learned_eta

    def records_traces(self) -> bool:
        """Whether the training passes record each example's trace: the rounds learn on a
        subset of a classification set with the ``training`` control variate."""
        recipe = self.priors.recipe
        return (
            recipe.control == SubsetControl.TRAINING
            and self.learning()
            and self.likelihood == Likelihood.CLASSIFICATION
            and recipe.draws_subset(len(self.train_data))
        )

    # ------------------------------------------------------------------ the MAP side
    def train_epoch(self) -> dict[str, float]:
        """One pass over the epoch's batches with a step each (replayed from
        :attr:`step_graph` where there is one); returns the epoch's mean loss
        (``train_loss``, with the prior term), mean NLL (``train_nll``), training accuracy
        (class-index targets) and last learning rate."""
        world, invariance = self.world, self.invariance
        self.model.train()
        trace = None
        indexed = self.records_traces()
        if indexed:
            n, device = len(self.train_data), self.batches.index_device
            trace = torch.zeros(n, dtype=torch.float64, device=device)
        classification = self.likelihood == Likelihood.CLASSIFICATION
        optimizers = self.step_optimizers()
        graph = self.step_graph
        arithmetic = self.arithmetic
        autocast = arithmetic.autocast if arithmetic is not None else contextlib.nullcontext

        def on_device(batch: Batch, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            """The step's device work on ``batch`` with inputs ``x`` and targets ``y`` (its
            own, or a CUDA graph's static copies of them): the terms and, where recorded,
            the batch's traces (B,)."""
            with autocast():
                if invariance is not None:
                    outputs = invariance.predict(batch._replace(x=x, y=y))
                else:
                    outputs = self.train_model(x)
                if outputs.dtype in (torch.float16, torch.bfloat16):
                    outputs = outputs.float()
                nll = data_loss(outputs, y, self.likelihood, self.sigma_noise)
                nll = world.mean_share(nll, len(y), batch.n_global)
            loss = nll if invariance is None else invariance.regularised(nll)
            objective = self.take_step(loss, x, optimizers, prior=self.priors.state)
            share = batch.n_global / world.size
            # detached: a captured step's outputs outlive it, and would hold its graph
            terms = {"loss": objective * share, "nll": nll.detach() * share}
            if classification and y.ndim == outputs.ndim - 1:  # class indices, not soft labels
                terms["correct"] = (outputs.detach().argmax(-1) == y).sum()
            if trace is not None:
                terms["trace"] = output_hessian_trace(outputs.detach())
            return terms

        def step(batch: Batch) -> tuple[dict[str, torch.Tensor], int]:
            batch = batch._replace(x=batch.x.to(self.device), y=batch.y.to(self.device))
            if graph is None:
                terms = on_device(batch, batch.x, batch.y)
            else:  # the batch's size and whether traces are recorded are the graph's own
                key = (batch.n_global, trace is not None)
                terms = graph(functools.partial(on_device, batch), batch.x, batch.y, key=key)
            if trace is not None:
                trace[batch.index.to(trace.device)] = terms.pop("trace")
            return terms, len(batch.y)

        with arithmetic.arithmetic() if arithmetic is not None else contextlib.nullcontext():
            sums = self.pass_over(self.batches(self.state.epoch, indexed), step)
        if trace is not None:
            self.add_traces(trace)
        seen = sums["seen"]
        row = {"train_loss": sums["loss"] / seen, "train_nll": sums["nll"] / seen}
        if "correct" in sums:
            row["train_accuracy"] = sums["correct"] / seen
        row["lr"] = sums["lr"]
        return row

    def results_schema(self, results: dict) -> Any:
        """:func:`ella.schemas.results_schema`: ``ella train``'s or ``ella.fit``'s."""
        return results_schema(results)

    def learned_results(self) -> dict:
        """What ``ella train``'s results and :func:`ella.fit`'s result both report of the
        learned priors and of the run's history: the precisions and variances by group,
        how far they converged, the shares per round and whether training collapsed."""
        metrics = self.state.metrics
        return {
            "prior_precision": self.priors.prior_precision,
            "prior_variance": self.priors.prior_variance,
            "prior_convergence": prior_convergence(
                [row["prior_precision"] for row in metrics if "prior_precision" in row]
            ),
            "shares_history": shares_history(metrics),
            "training_collapse": training_collapse(metrics),
        }

    def add_traces(self, trace: torch.Tensor) -> None:
        """Average an epoch's traces (every example in one process's part of one batch,
        summed over the processes) into :attr:`output_trace`: two epochs' passes see two
        augmentations, and their mean follows the curvature better than one."""
        trace = self.world.sum_(trace.to(self.device)).cpu()
        old = self.output_trace
        if old is None:
            old = torch.full_like(trace, math.nan)
        self.output_trace = torch.where(old.isnan(), trace, 0.5 * (old + trace))

    def check_finite_weights(self) -> None:
        """Refuse to save or use weights that stopped being finite (a diverged step)."""
        bad = non_finite_parameters(self.model)
        if bad:
            raise TrainingDivergedError(
                f"the weights became non-finite ({', '.join(bad[:3])}"
                f"{' ...' if len(bad) > 3 else ''}) in epoch {self.state.epoch}; "
                f"{checkpoint_note(self.out)}. {self.divergence_hint}"
            )

    # ------------------------------------------------------------------ the evidence side
    def evidence_due(self) -> bool:
        """Whether the evidence is fitted after the epoch just completed."""
        return evidence_due(self.config, self.state.epoch, self.learning())

    def round_labels(self) -> torch.Tensor | None:
        """The training labels a class-balanced round subset is drawn by (read once)."""
        classification = self.likelihood == Likelihood.CLASSIFICATION
        partial = self.priors.recipe.draws_subset(len(self.train_data))
        if self.labels is None and classification and partial:
            self.labels = dataset_labels(self.train_data)
        return self.labels

    def evidence_round(self) -> float:
        """The round after the epoch just completed: the learner's
        (:meth:`~ella.learner.PriorLearner.evidence_round`), or an invariance's Adam steps
        through its differentiable evidence; keeps the round's evidence
        (:attr:`round_evidence`) and returns its log evidence."""
        epoch = self.state.epoch
        if self.invariance is not None:
            self.round_evidence, value = self.invariance.evidence_round(
                self.priors, self.train_data, epoch, self._check_evidence, self.progress
            )
            return value
        try:
            value = self.priors.evidence_round(
                self.train_data,
                epoch,
                labels=self.round_labels(),
                traces=self.output_trace,
                progress=self.progress,
            )
        except TrainingDivergedError as err:
            note = checkpoint_note(self.out)
            raise TrainingDivergedError(f"{err} (epoch {epoch}; {note})") from err
        self.round_evidence = self.priors.evidence
        return value

    def _check_evidence(self, value: torch.Tensor) -> None:
        if not torch.isfinite(value):
            raise TrainingDivergedError(
                f"the log marginal likelihood became {value.item()} at epoch {self.state.epoch}; "
                f"{checkpoint_note(self.out)}. Try a smaller --lr-hyp or more burn-in epochs."
            )

    def report_at(self, evidence: Any) -> dict[str, list[dict]]:
        """:func:`~ella.learner.report.effective_parameter_report` of the priors' network at
        ``evidence`` and the current precisions."""
        precisions = self.priors.log_prior.detach().exp()
        return effective_parameter_report(self.priors.model, evidence, precisions)

    def evidence_terms(self) -> dict[str, float]:
        """The round's log evidence split into its three terms at the current precisions
        (:meth:`~ella.marglik.LaplaceEvidence.terms`: ``log_likelihood``, ``log_det``,
        ``scatter``); empty where the round's evidence is not the Kronecker one of the
        network's priors (an input invariance's, or a dense or diagonal Hessian)."""
        evidence = self.round_evidence
        if self.invariance is not None or not isinstance(evidence, LaplaceEvidence):
            return {}
        if evidence.structure != HessianStructure.KRON:
            return {}
        with torch.no_grad():
            parts = evidence.terms(self.priors.log_prior)
        return {name: float(value) for name, value in parts.items()}

    def round_metrics(self, value: float) -> dict:
        """What a round of log evidence ``value`` adds to its epoch's row: the precisions,
        the gap to the round's optimum (the learner's rounds), the control variate's factor
        (subset rounds with a control) and the mean shares (networks with relaxed layers).
        Keeps the round and its report (``state.last_round``) and the best-evidence state."""
        recipe, state = self.priors.recipe, self.state
        report = self.report_at(self.round_evidence)
        state.last_round = {"epoch": state.epoch, "log_marglik": value, "report": report}
        row: dict = {"prior_precision": self.priors.prior_precision}
        gap = self.priors.gaps[-1] if self.invariance is None else None
        if gap is not None:
            row["prior_gap"] = gap
        terms = self.evidence_terms()
        if terms:
            row["evidence_terms"] = terms
        partial = recipe.draws_subset(len(self.train_data))
        if partial and recipe.control != SubsetControl.NONE:
            row["curvature_ratio"] = self.priors.last_curvature_ratio
        shares = layer_mean_shares(report["layers"])
        if shares:
            row["shares"] = shares
        if self.best is not None:
            self.best.after_round(state, value)
        return row

    def after_epoch(self, row: dict) -> None:
        """Check the weights; run the round when due; measure (an invariance's extents and
        :attr:`evaluations`)."""
        self.check_finite_weights()
        if self.evidence_due():
            if self.step_graph is not None:  # the round changes the graph's prior scales
                self.step_graph.release()
            value = self.evidence_round()
            self.state.marglik.append(value)
            self.state.marglik_epochs.append(self.state.epoch)
            row["log_marglik"] = value
            row.update(self.round_metrics(value))
        if self.invariance is not None:
            row["eta"] = self.invariance.eta()
        for split, metrics in self.evaluate_sets().items():
            row.update({f"{split}_{k}": v for k, v in metrics.items()})

    def evaluate_sets(self) -> dict[str, dict[str, float]]:
        """The metrics of the model as it is on each of :attr:`evaluations`' sets:
        ``{split: {"accuracy": ..., "nll": ...}}``."""
        return {split: evaluate() for split, evaluate in self.evaluations.items()}

    def postfix(self, row: dict) -> dict[str, str]:
        """The training NLL and accuracy, then what the row measured: validation and test
        accuracy, the log evidence, an invariance's rotation extent."""
        shown = super().postfix(row)
        for key, name in (("validation_accuracy", "val_acc"), ("test_accuracy", "test_acc")):
            if key in row:
                shown[name] = f"{row[key]:.3f}"
        if "log_marglik" in row:
            shown["marglik"] = f"{row['log_marglik']:.1f}"
        if "eta" in row and "rotate" in row["eta"]:
            shown["rotate"] = f"{row['eta']['rotate']:.2f}"
        return shown
