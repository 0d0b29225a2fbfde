"""Run machinery shared by ``ella train``, ``ella ensemble`` and :func:`ella.fit`.

* :class:`EpochRun`: the epoch loop with run directory, resume, learning-rate
  schedule, divergence check, checkpoints and progress bar; each command
  subclasses it with how one epoch trains and what its checkpoint holds;

* :func:`epoch_generator`: every random stream of an epoch (data order,
  augmentation, transformation noise, evidence subsets) is a generator seeded
  by the run's seed, the epoch and the stream's own constant, so a resumed run
  draws exactly what the uninterrupted one drew;
* :func:`save_epoch`: the checkpoint (atomically) and the metrics file after
  every epoch;
* :func:`epoch_bar`: the progress bar over the epochs still to train.
"""

from __future__ import annotations

import abc
import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from tqdm.auto import tqdm

from ella.distributed import ONE_PROCESS, World, peer_failures
from ella.engine.health import new_collapse
from ella.engine.schedule import cosine_lr
from ella.engine.streams import Stream, epoch_generator, epoch_seed
from ella.errors import CheckpointError, ConfigError, InputDataError, TrainingDivergedError
from ella.io import save_jsonl, save_torch
from ella.rundir import (
    CHECKPOINT,
    METRICS,
    RESULTS,
    RESULTS_FIX,
    begin_run,
    checkpoint_note,
    load_checkpoint,
    read_json,
    resume_note,
    run_lock,
)
from ella.schemas import check

__all__ = [
    "EpochRun",
    "EpochState",
    "Penalised",
    "Stream",
    "add_sums",
    "epoch_bar",
    "epoch_generator",
    "epoch_seed",
    "non_finite_metrics",
    "save_epoch",
]

T = TypeVar("T")

#: metrics of an epoch's row that a healthy run keeps finite (a suffix of the key)
CHECKED_METRICS = ("loss", "accuracy", "nll", "log_marglik")


def non_finite_metrics(row: dict) -> list[str]:
    """Keys of ``row`` whose value is a measured metric (:data:`CHECKED_METRICS`) that is
    not a finite number: a model that diverged although its weights are finite."""
    return [
        key
        for key, value in row.items()
        if key.endswith(CHECKED_METRICS) and isinstance(value, float) and not math.isfinite(value)
    ]


class Penalised(Protocol):
    """A prior whose penalty joins the training objective outside the graph (as a
    :class:`~ella.learner.PriorLearner`'s state, :class:`~ella.learner.prior.LearnedPrior`,
    does)."""

    def penalty_value(self) -> torch.Tensor:
        """The penalty's value without a graph (0-dim, on the weights' device)."""

    def add_penalty_gradient(self) -> None:
        """Add the penalty's gradient to every trainable tensor's ``.grad``."""


def add_sums(sums: dict[str, torch.Tensor], **terms: torch.Tensor) -> None:
    """Add each term (detached, in float64) to ``sums[name]``, on the terms' device: an
    epoch's running sums, read once at its end (:meth:`EpochRun.close_steps`)."""
    for name, term in terms.items():
        term = term.detach().to(torch.float64)
        sums[name] = term if name not in sums else sums[name] + term


def save_epoch(out: Path | None, checkpoint: dict, metrics: list[dict]) -> None:
    """Write ``checkpoint.pt`` (atomically, plain types and tensors only) and
    ``metrics.jsonl`` into the run directory ``out``; nothing for ``out=None``."""
    if out is None:
        return
    save_torch(checkpoint, Path(out) / CHECKPOINT)
    save_jsonl(metrics, Path(out) / METRICS)


def epoch_bar(done: int, total: int, desc: str, progress: bool) -> tqdm:
    """Progress bar over the epochs still to train (``done`` of ``total`` completed)."""
    return tqdm(range(done, total), initial=done, total=total, desc=desc, disable=not progress)


@dataclass
class EpochState:
    """What every run changes as it trains (and saves in its checkpoint's ``"state"``)."""

    epoch: int = 0  # completed epochs
    step: int = 0  # completed optimiser steps
    metrics: list[dict] = field(default_factory=list)  # one row per completed epoch
    seconds: float = 0.0  # spent in the completed epochs, over every resume


class EpochRun(abc.ABC):
    """The epoch loop under ``ella train``, ``ella ensemble`` and :func:`ella.fit`.

    A subclass says how to train one epoch and what its checkpoint holds; this
    class owns the rest: claiming the run directory (:func:`~ella.rundir.begin_run`),
    resume, the cosine learning rate per step, the divergence check of the
    loss, the checkpoint and metrics after every epoch, and the progress bar.

    Subclasses set ``config`` (with ``epochs``, ``lr``, ``lr_min``, ``progress``
    and ``to_dict``), ``out`` (the run directory or None), ``state`` (an
    :class:`EpochState`) and ``steps_per_epoch`` before :meth:`run_epochs`.

    In a data-parallel job (``world``, see :mod:`ella.distributed`) every process
    runs the loop; process 0 alone claims the run directory, writes checkpoints
    and metrics and shows progress, every process loads the checkpoint to resume,
    and a collective that fails because another process died becomes a
    :class:`~ella.errors.DistributedError` naming the checkpoint to resume from.
    """

    config: Any
    out: Path | None
    state: EpochState
    steps_per_epoch: int
    #: the weights' optimiser, whose rate :meth:`pass_over` sets before each step
    optimizer: torch.optim.Optimizer
    #: the processes of the job (this one alone by default)
    world: World = ONE_PROCESS
    #: what the divergence message advises
    divergence_hint: str = "Try a smaller --lr."
    #: this epoch's first non-finite step so far, on the device (:meth:`watch_step`)
    _watch: dict[str, torch.Tensor] = {}  # noqa: RUF012 (an instance's own once it steps)
    _watch_what: str = "training loss"

    @abc.abstractmethod
    def train_epoch(self) -> dict:
        """Train epoch ``state.epoch + 1``; return its metrics row."""

    def after_epoch(self, row: dict) -> None:  # noqa: B027 (an optional hook)
        """Add to ``row`` what is measured after an epoch (evidence, test metrics); the
        epoch is already counted in ``state.epoch``. Nothing by default."""

    def postfix(self, row: dict) -> dict[str, str]:
        """What the epoch bar shows after an epoch: the training data's NLL and accuracy
        where the row has them (``train_nll``, without the prior term, which grows as the
        learned precisions do and would read as divergence), else the training loss."""
        if "train_nll" not in row:
            return {"loss": f"{row['train_loss']:.3f}"}
        shown = {"nll": f"{row['train_nll']:.3f}"}
        if "train_accuracy" in row:
            shown["acc"] = f"{row['train_accuracy']:.3f}"
        return shown

    @abc.abstractmethod
    def checkpoint_entries(self) -> dict:
        """The checkpoint's entries besides ``config`` and ``state`` (state dicts)."""

    @abc.abstractmethod
    def restore_entries(self, checkpoint: dict) -> None:
        """Load what :meth:`checkpoint_entries` saved."""

    # ------------------------------------------------------------------ persistence
    def checkpoint(self) -> dict:
        """The checkpoint: ``config``, the :meth:`checkpoint_entries` and ``state``."""
        return {
            "config": self.config.to_dict(),
            **self.checkpoint_entries(),
            "state": self.state.__dict__,
        }

    @property
    def progress(self) -> bool:
        """Whether this process shows progress bars (the main process, if asked)."""
        return bool(self.config.progress) and self.world.is_main

    def save(self) -> None:
        """Write the checkpoint and metrics to the run directory (process 0 only)."""
        if self.world.is_main:
            save_epoch(self.out, self.checkpoint(), self.state.metrics)

    def load(self) -> None:
        """Restore the run from its checkpoint; a checkpoint whose entries do not fit this
        run (missing, of other shapes or types) is a :class:`CheckpointError` naming it."""
        if self.out is None:
            raise ConfigError("resuming needs a run directory")
        path = Path(self.out) / CHECKPOINT
        checkpoint = load_checkpoint(path, self.config)
        try:
            self.restore_entries(checkpoint)
            state = checkpoint["state"]
            if not isinstance(state, dict):
                raise TypeError(f"its state is a {type(state).__name__}, not a dict")
            self.state = type(self.state)(**state)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            first = " ".join(lines[:2] if lines and lines[0].endswith(":") else lines[:1])
            what = f"it lacks the entry {err}" if isinstance(err, KeyError) else first[:300]
            raise CheckpointError(
                f"{path} does not fit this run ({what}): it was not written by a run of this "
                "configuration, or it was changed; start again with --overwrite or in a new "
                "run directory"
            ) from None

    def owning(self) -> contextlib.AbstractContextManager:
        """Hold the run directory's lock (:func:`~ella.rundir.run_lock`; process 0 of a
        data-parallel job) for a ``with`` block: training and writing the results."""
        return run_lock(self.out, take=self.world.is_main)

    def results_schema(self, results: dict) -> Any:
        """The schema (:mod:`ella.schemas`) a finished run's ``results`` are checked against
        when read back; None (the default): none."""
        return None

    def finished_results(self, resume: bool) -> dict | None:
        """The results of a finished run that ``resume`` asks to continue, else None.

        A finished run is final: its checkpoint is loaded (and so checked), its
        ``results.json`` read and checked (:meth:`results_schema`) and returned, and
        nothing is written.

        Raises:
            CheckpointError: ``results.json`` is there but the checkpoint is unreadable,
                of another run, or of an unfinished one, or the results are not as the
                command writes them.
        """
        if not resume or self.out is None or not (Path(self.out) / RESULTS).is_file():
            return None
        self.load()
        if self.state.epoch < self.config.epochs:
            raise CheckpointError(
                f"{Path(self.out) / RESULTS} is there, but the checkpoint has "
                f"{self.state.epoch} of {self.config.epochs} epochs: the results are not this "
                "run's; move results.json away to resume the run"
            )
        path = Path(self.out) / RESULTS
        results = read_json(path, "finished run's results")
        schema = self.results_schema(results)
        return results if schema is None else check(results, schema, path, RESULTS_FIX)

    # ------------------------------------------------------------------ steps
    def set_lr(self, optimizer: torch.optim.Optimizer) -> float:
        """Set every group of ``optimizer`` to the cosine learning rate of ``state.step``,
        times the group's ``"lr_scale"`` (:func:`~ella.engine.schedule.make_optimizer`); a
        learning rate held as a device tensor (a step captured as a CUDA graph,
        :func:`~ella.engine.graphs.make_capturable`) is filled in place."""
        cfg = self.config
        total = cfg.epochs * self.steps_per_epoch
        lr = cosine_lr(self.state.step, total, cfg.lr, cfg.lr_min)
        for group in optimizer.param_groups:
            value = lr * group.get("lr_scale", 1.0)
            if isinstance(group["lr"], torch.Tensor):  # a captured step's (ella.engine.graphs)
                group["lr"].fill_(value)
            else:
                group["lr"] = value
        return lr

    def pass_over(
        self,
        batches: Iterable[T],
        step: Callable[[T], tuple[dict[str, torch.Tensor], int]],
    ) -> dict[str, float]:
        """The steps of one epoch, the loop of every command: for each batch, set the
        learning rate of ``self.optimizer`` (:meth:`set_lr`) and call ``step(batch)``, which
        takes the step (:meth:`take_step`) and returns the terms to add to the epoch's
        sums (this process's share, on the device; :func:`add_sums`) and its number of
        examples; then count the step (``state.step``). It ends with :meth:`close_steps`,
        the epoch's one read from the device, and one sum over the processes.

        Returns:
            The sums over every process by term, with ``"seen"`` (the examples) and
            ``"lr"`` (the last step's rate).
        """
        sums: dict[str, torch.Tensor] = {}
        seen, lr = 0, math.nan
        if self._watch:  # the watch's step count, where an epoch before left it
            self._watch["count"].fill_(self.state.step)
        for batch in batches:
            lr = self.set_lr(self.optimizer)
            terms, n = step(batch)
            self.state.step += 1
            add_sums(sums, **terms)
            seen += n
        totals = self.close_steps(sums)
        values = self.world.sum_values(*totals.values(), seen)
        return {**dict(zip(totals, values, strict=False)), "seen": values[-1], "lr": lr}

    def take_step(
        self,
        loss: torch.Tensor,
        x: torch.Tensor,
        optimizers: Sequence[torch.optim.Optimizer],
        *,
        what: str = "training loss",
        prior: Penalised | None = None,
        before_step: Callable[[], None] | None = None,
    ) -> torch.Tensor:
        """The one optimisation step of every command: zero the gradients, backpropagate
        ``loss``, add the gradient of ``prior``'s penalty
        (:meth:`~ella.learner.prior.LearnedPrior.add_penalty_gradient`), call ``before_step`` (e.g.
        averaging the gradients over processes) and step each optimiser in order
        (:meth:`pass_over` counts the step).

        Nothing is read back to the host: whether the objective (``loss`` plus the
        penalty) is finite is recorded on the device (:meth:`watch_step`) and checked once
        per epoch, by :meth:`close_steps`. So the step can be captured as a CUDA graph
        (:mod:`ella.engine.graphs`).

        Returns:
            The step's objective, ``loss`` plus the prior's penalty, detached (0-dim).
        """
        objective = loss.detach()
        prior_term = None
        if prior is not None:
            prior_term = prior.penalty_value()
            objective = objective + prior_term
        self.watch_step(objective, x, what, prior_term)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if prior is not None:
            prior.add_penalty_gradient()
        if before_step is not None:
            before_step()
        for optimizer in optimizers:
            optimizer.step()
        return objective

    def watch_step(
        self,
        objective: torch.Tensor,
        x: torch.Tensor,
        what: str = "training loss",
        prior_term: torch.Tensor | None = None,
    ) -> None:
        """Record on the device, without reading it back, whether this step's objective is
        the first of the epoch that is not finite, with whether its batch ``x`` and its
        prior term were finite then (for :meth:`close_steps`' message).

        The record is a few 0-dim tensors made at the first step and updated in place
        (the step's number counted there too), so that a step captured as a CUDA graph
        updates them at every replay."""
        watch = self._watch
        if not watch:
            device = objective.device
            watch = self._watch = {
                "step": torch.full((), -1, dtype=torch.int64, device=device),
                "input": torch.zeros((), dtype=torch.bool, device=device),
                "prior": torch.zeros((), dtype=torch.bool, device=device),
                "value": torch.full((), math.nan, dtype=objective.dtype, device=device),
                "count": torch.full((), self.state.step, dtype=torch.int64, device=device),
            }
        first = watch["step"]
        new = (~torch.isfinite(objective)) & (first < 0)
        finite_prior = torch.isfinite(prior_term) if prior_term is not None else first >= -1
        watch["input"].copy_(torch.where(new, ~torch.isfinite(x).all(), watch["input"]))
        watch["prior"].copy_(torch.where(new, ~finite_prior, watch["prior"]))
        watch["value"].copy_(torch.where(new, objective, watch["value"]))
        first.copy_(torch.where(new, watch["count"], first))
        watch["count"].add_(1)
        self._watch_what = what

    def close_steps(self, sums: dict[str, torch.Tensor]) -> dict[str, float]:
        """End an epoch's steps with one read from the device: raise where a step's objective
        was not finite (:class:`InputDataError` when its batch itself was not, else
        :class:`TrainingDivergedError`, whose advice names the prior's options when the
        prior term overflowed), else return ``sums`` (:func:`add_sums`) as floats.

        The checkpoint of the epoch before is the last one written; the weights in memory
        are those after the epoch's steps."""
        watch = self._watch
        keys = list(sums)
        shown = [watch[k].double() for k in ("step", "input", "prior", "value") if k in watch]
        read = [*shown, *(sums[k].double() for k in keys)]
        values = torch.stack(read).tolist() if read else []
        if watch:  # cleared in place for the next epoch (a captured step writes these)
            watch["step"].fill_(-1)
            watch["input"].fill_(False)
            watch["prior"].fill_(False)
            watch["value"].fill_(math.nan)
        if shown and values[0] >= 0:
            self._raise_non_finite(int(values[0]), bool(values[1]), bool(values[2]), values[3])
        return dict(zip(keys, values[len(shown) :], strict=True))

    def _overflowing_weight(self) -> float | None:
        """The largest weight magnitude where its square overflows the weights' dtype (the
        prior term overflowed through the weights, not the precisions), else None."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        params = [p for p in params if p.is_floating_point() and p.numel()]
        if not params:
            return None
        largest = max(float(p.detach().abs().max()) for p in params)
        limit = min(torch.finfo(p.dtype).max for p in params) ** 0.5
        return largest if largest >= limit else None

    def _raise_non_finite(self, step: int, bad_input: bool, bad_prior: bool, value: float):
        if bad_input:
            raise InputDataError("the input data contains NaN or infinite values")
        what, hint = self._watch_what, self.divergence_hint
        if bad_prior:
            what = f"prior term 1/2 sum delta theta^2 / N of the {what}"
            learned = any("log_marglik" in row for row in self.state.metrics)
            weight = self._overflowing_weight()
            hint = (
                f"A weight is {weight:.3g}, whose square overflows: the weights diverged, not "
                "the priors, or the checkpoint the run resumed from holds such a weight; start "
                "again with --overwrite, or try a smaller --lr."
                if weight is not None
                else "The learned prior precisions grew too large: try a smaller --prior-step "
                "(or --lr-hyp with --prior-update adam), or more --n-epochs-burnin."
                if learned
                else "The prior precision is too large for these weights: use a smaller "
                "--prior-precision."
            )
        raise TrainingDivergedError(
            f"the {what} became {value} at epoch {self.state.epoch + 1}, "
            f"step {step + 1}; {checkpoint_note(self.out)}. {hint}"
        )

    # ------------------------------------------------------------------ loop
    def run_epochs(
        self,
        desc: str,
        *,
        resume: bool,
        overwrite: bool,
        on_epoch_end: Callable[[EpochRun], None] | None = None,
    ) -> float:
        """Claim the run directory (or resume from it), train the epochs still to do,
        saving after each; return the seconds spent training."""
        self.world.main_first(
            lambda: begin_run(
                self.out, self.config, resume=resume, overwrite=overwrite, load=self.load
            )
        )
        # process 0 started afresh where the run stopped before its first checkpoint
        if resume and not self.world.is_main and (Path(self.out) / CHECKPOINT).is_file():
            self.load()
        bar = epoch_bar(self.state.epoch, self.config.epochs, desc, self.progress)
        with peer_failures(self.world, self.resume_note):
            for _ in bar:
                start = time.perf_counter()
                row = self.train_epoch()
                self.state.epoch += 1
                row["epoch"] = self.state.epoch
                self.after_epoch(row)
                self.check_metrics(row)
                self.state.metrics.append(row)
                self.state.seconds += time.perf_counter() - start
                self.save()
                self.note_collapse()
                bar.set_postfix(self.postfix(row))
                if on_epoch_end is not None:
                    on_epoch_end(self)
        return self.state.seconds

    def check_metrics(self, row: dict) -> None:
        """Refuse to checkpoint an epoch whose measured metrics are not finite (the weights
        are, but the outputs overflow): the checkpoint kept is the last good one."""
        bad = non_finite_metrics(row)
        if bad:
            shown = ", ".join(f"{key} {row[key]}" for key in bad)
            raise TrainingDivergedError(
                f"the model diverged in epoch {self.state.epoch} ({shown}); "
                f"{checkpoint_note(self.out)}. {self.divergence_hint}"
            )

    def note_collapse(self) -> None:
        """Say once, on stderr, when the training accuracy has just collapsed
        (:func:`~ella.engine.health.new_collapse`), so that a long run's user need not wait
        for its report."""
        news = new_collapse(self.state.metrics)
        if news is not None and self.world.is_main:
            tqdm.write(news, file=sys.stderr)

    def resume_note(self) -> str:
        """Where the last checkpoint is and how to go on from it."""
        return resume_note(self.out)
