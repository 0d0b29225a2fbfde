"""The one alternating loop under ``ella train`` and :func:`ella.fit`.

Immer et al., "Scalable Marginal Likelihood Estimation for Model Selection in
Deep Learning" (ICML 2021), Algorithm 1, as used by ELLA (NeurIPS 2023):

* weights: a step of the optimiser on the mean negative log likelihood of a batch
  plus the prior term ``1/2 sum delta_t theta_t^2 / N`` (:meth:`PriorLearner.penalty
  <ella.learner.PriorLearner.penalty>`, ``delta`` fixed within the step);
* priors: after the epochs that :func:`~ella.engine.schedule.evidence_due` names, one
  evidence round of the :class:`~ella.learner.PriorLearner` (its subset, GGN, control
  variate and update: :meth:`~ella.learner.PriorLearner.evidence_round`).

:class:`AlternatingRun` is that loop on the epoch machinery of
:class:`~ella.engine.epochs.EpochRun`. A command says where an epoch's batches come
from (:meth:`AlternatingRun.epoch_batches`) and what it measures after an epoch;
``ella train`` (:class:`~ella.train.loop.Trainer`: the mixer, in-memory images,
augmentation, input invariance) and :func:`ella.fit` (a user's model and
``DataLoader``) are its two subclasses.

The seeding of every run: the global generator is seeded once, before the model is
built (by ``ella train``, or by the user before :func:`ella.fit`), and saved in every
checkpoint (it draws the GGN's sampled labels); the data order of the epoch trained
after ``e`` completed epochs is drawn from ``epoch_generator(seed, e, DATA_ORDER)``
(:func:`seed_epoch_order` sets it on a shuffling ``DataLoader``), and each round's
subset from ``epoch_generator(seed, e, EVIDENCE_SUBSET)`` with ``e`` the epoch just
trained (:meth:`~ella.engine.recipe.EvidenceRecipe.subset`).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

from ella.choices import Likelihood, SubsetControl
from ella.engine.epochs import EpochRun, EpochState, Stream, epoch_generator
from ella.engine.graphs import StepGraph
from ella.engine.schedule import evidence_due
from ella.errors import TrainingDivergedError
from ella.learner import PriorLearner, dataset_labels
from ella.marglik.control import output_hessian_trace
from ella.marglik.evidence import non_finite_parameters
from ella.rundir import checkpoint_note

__all__ = [
    "AlternatingRun",
    "AlternatingState",
    "Batch",
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
    """What the loop changes besides the epochs: the log evidence after each round."""

    marglik: list[float] = field(default_factory=list)
    marglik_epochs: list[int] = field(default_factory=list)


class AlternatingRun(EpochRun):
    """MAP epochs with a :class:`~ella.learner.PriorLearner`'s penalty and its evidence
    rounds (the module docstring); a command subclasses it with its batches.

    Subclasses set, besides what :class:`~ella.engine.epochs.EpochRun` needs:
    ``model`` (the network trained, whose state is checkpointed), ``train_model``
    (the module the steps call: ``model``, or its ``DistributedDataParallel``
    wrapper), ``device``, ``priors``, ``optimizer``, ``train_data`` (the ``N``
    training examples of the rounds, a map-style data set), ``likelihood`` and
    ``sigma_noise``.
    """

    model: nn.Module
    train_model: nn.Module
    device: torch.device
    priors: PriorLearner
    optimizer: torch.optim.Optimizer
    train_data: Dataset
    likelihood: Likelihood = Likelihood.CLASSIFICATION
    sigma_noise: float = 1.0
    #: the (N,) class labels of ``train_data``, read at the first round that needs them
    labels: torch.Tensor | None = None
    #: the training step captured as a CUDA graph (:mod:`ella.engine.graphs`), or None:
    #: eager steps
    step_graph: StepGraph | None = None
    #: ``1 - sum p^2`` of every training example in its training passes, averaged over
    #: epochs with each older epoch's weight halved (the auxiliary variable of the
    #: ``training`` control variate); None where the rounds do not read it, NaN before
    #: the first epoch
    output_trace: torch.Tensor | None = None

    # ------------------------------------------------------------------ what a command gives
    @abc.abstractmethod
    def epoch_batches(self, epoch: int) -> Iterator[Batch]:
        """This process's batches of the epoch after ``epoch`` completed ones."""

    def predict_train(self, batch: Batch) -> torch.Tensor:
        """The training-mode outputs of ``batch.x`` (already on the device)."""
        return self.train_model(batch.x)

    def regularised(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss the step backpropagates, from the batch's mean NLL: the NLL itself
        unless a command adds a term (the prior's is added by the step)."""
        return loss

    def step_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimisers each step takes, in order."""
        return [self.optimizer]

    def arithmetic(self) -> contextlib.AbstractContextManager:
        """The context of an epoch's steps (reduced-precision matmuls); none by default."""
        return contextlib.nullcontext()

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context of a step's forward pass (autocast); none by default."""
        return contextlib.nullcontext()

    def learning(self) -> bool:
        """Whether the rounds learn something (by default the priors, if asked)."""
        return bool(self.config.learn_priors)

    def measure(self, row: dict) -> None:
        """Add to ``row`` what is measured after every epoch (held-out metrics)."""

    # ------------------------------------------------------------------ the MAP side
    def train_epoch(self) -> dict[str, float]:
        """One pass over :meth:`epoch_batches` with a step each (replayed from
        :attr:`step_graph` where there is one); returns the epoch's mean loss
        (``train_loss``, with the prior term), mean NLL (``train_nll``), training accuracy
        (class-index targets) and last learning rate."""
        world = self.world
        self.model.train()
        trace = None
        if self.records_traces():
            n, device = len(self.train_data), self.trace_device()
            trace = torch.zeros(n, dtype=torch.float64, device=device)
        classification = self.likelihood == Likelihood.CLASSIFICATION
        optimizers = self.step_optimizers()
        graph = self.step_graph

        def on_device(batch: Batch, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            """The step's device work on ``batch`` with inputs ``x`` and targets ``y`` (its
            own, or a CUDA graph's static copies of them): the terms and, where recorded,
            the batch's traces (B,)."""
            with self.autocast():
                outputs = self.predict_train(batch._replace(x=x, y=y))
                if outputs.dtype in (torch.float16, torch.bfloat16):
                    outputs = outputs.float()
                nll = data_loss(outputs, y, self.likelihood, self.sigma_noise)
                nll = world.mean_share(nll, len(y), batch.n_global)
            objective = self.take_step(self.regularised(nll), x, optimizers, prior=self.priors)
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

        with self.arithmetic():
            sums = self.pass_over(self.epoch_batches(self.state.epoch), step)
        if trace is not None:
            self.add_traces(trace)
        seen = sums["seen"]
        row = {"train_loss": sums["loss"] / seen, "train_nll": sums["nll"] / seen}
        if "correct" in sums:
            row["train_accuracy"] = sums["correct"] / seen
        row["lr"] = sums["lr"]
        return row

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

    def trace_device(self) -> torch.device:
        """Where an epoch's traces are recorded: where the batches' indices are."""
        return self.device

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
        """The learner's round after the epoch just completed
        (:meth:`~ella.learner.PriorLearner.evidence_round`); returns the log evidence."""
        try:
            return self.priors.evidence_round(
                self.train_data,
                self.state.epoch,
                labels=self.round_labels(),
                traces=self.output_trace,
                progress=self.progress,
            )
        except TrainingDivergedError as err:
            raise TrainingDivergedError(
                f"{err} (epoch {self.state.epoch}; {checkpoint_note(self.out)})"
            ) from err

    def round_metrics(self) -> dict:
        """What a round adds to its epoch's row: the precisions, the gap to the round's
        optimum, the control variate's factor (subset rounds with a control) and the mean
        shares (networks with relaxed layers)."""
        recipe = self.priors.recipe
        row: dict = {"prior_precision": self.priors.prior_precision}
        gap = self.round_gap()
        if gap is not None:
            row["prior_gap"] = gap
        partial = recipe.draws_subset(len(self.train_data))
        if partial and recipe.control != SubsetControl.NONE:
            row["curvature_ratio"] = self.priors.last_curvature_ratio
        shares = self.round_shares()
        if shares:
            row["shares"] = shares
        return row

    def round_gap(self) -> float | None:
        """How far the round left the precisions from its optimum (the learner's gap)."""
        return self.priors.gaps[-1]

    def round_shares(self) -> dict[str, float]:
        """The mean shares at the round just fitted (empty without relaxed layers)."""
        return self.priors.shares()

    def after_epoch(self, row: dict) -> None:
        """Check the weights; run the round when due; measure (:meth:`measure`)."""
        self.check_finite_weights()
        if self.evidence_due():
            if self.step_graph is not None:  # the round changes the graph's prior scales
                self.step_graph.release()
            value = self.evidence_round()
            self.state.marglik.append(value)
            self.state.marglik_epochs.append(self.state.epoch)
            row["log_marglik"] = value
            row.update(self.round_metrics())
        self.measure(row)
