"""One candidate of a selection: the checks before any work, training it, scoring it.

A candidate is the run's network trained on for ``epochs`` with some units held at zero
(:mod:`ella.selection.units`), under fixed prior precisions, then fitted exactly and scored
by a criterion (:mod:`ella.selection.criteria`). The same function trains a candidate of a
run of ``ella train`` (:func:`train_on`) and of :func:`ella.fit` (:mod:`ella.selection.fitted`),
so the same network gets the same decisions either way. :func:`collapsed` is the rule that
keeps a candidate which lost its fit from winning.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from ella.choices import GGN, InvarianceMethod, ModelName, PriorMean
from ella.errors import ConfigError, RunDirectoryError
from ella.io import load_torch
from ella.learner import PriorLearner
from ella.learner.report import mean_shares
from ella.marglik import class_frequency_model, kept_log_evidence
from ella.nn import PATH_KINDS
from ella.rundir import CHECKPOINT, CONFIG, RESULTS, invalid_config, read_json
from ella.selection.criteria import Candidate, Criterion, criterion_of
from ella.selection.units import dropped_flags, layer_groups
from ella.train.alternating import AlternatingRun
from ella.train.config import TrainConfig
from ella.train.loop import Trainer, evaluate
from ella.train.runs import TrainedRun, load_run, refuse_unless_learned

__all__ = [
    "CONTROL",
    "KEPT_FIT",
    "candidate_job",
    "check_selectable",
    "collapsed",
    "kept_their_fit",
    "load_learned_run",
    "null_model",
    "relaxed_paths",
    "run_groups",
    "train_candidate",
    "train_on",
    "train_on_without",
]

#: the candidate that drops nothing
CONTROL = "none"


def load_learned_run(
    run_dir: str | Path, data_dir: str | Path | None = None
) -> tuple[TrainedRun, torch.Tensor]:
    """A run with learned priors centred at zero (:func:`ella.train.runs.load_run`) and its
    last log prior precisions; other runs are refused with the reason."""
    run = load_run(run_dir, data_dir)
    refuse_unless_learned(run_dir, run.config.learn_priors, run.config.prior_mean, "select")
    return run, load_torch(Path(run_dir) / CHECKPOINT)["log_prior"]


def relaxed_paths(run_dir: str | Path) -> list[str]:
    """The paths of a run's relaxed layers, in the order a layer holds them."""
    paths = read_json(Path(run_dir) / CONFIG, "run's configuration").get("paths", [])
    return [p for p in PATH_KINDS if p in paths]


def check_selectable(run_dir: str | Path, epochs: int) -> list[str]:
    """Refuse, before any work, what :func:`drop_each_path` and :func:`select_paths` cannot
    do; return the run's paths.

    Raises:
        ConfigError: ``epochs`` below 1, a model other than the mixer, a mixer of one path,
            a learned input invariance, or a prior centred at the initial weights.
        RunDirectoryError: no config.json, an ensemble run, a MAP run, or an unfinished run
            (no results.json).
        CheckpointError: a config.json that cannot be read.
    """
    if epochs < 1:
        raise ConfigError(
            f"epochs per candidate (ella select --epochs) must be at least 1, got {epochs}"
        )
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG).is_file():
        raise RunDirectoryError(f"no {CONFIG} in {run_dir}; is it a run directory of ella train?")
    config = read_json(run_dir / CONFIG, "run's configuration")
    if "members" in config:
        raise RunDirectoryError(
            f"{run_dir} is an ensemble run; ella select chooses the paths of a run of ella train"
        )
    try:
        TrainConfig.from_dict(config)
    except ConfigError as err:  # a file of the run, not an option the caller gave
        raise invalid_config(run_dir / CONFIG, err) from None
    learn, mean = config.get("learn_priors", False), config.get("prior_mean", PriorMean.ZERO)
    refuse_unless_learned(run_dir, learn, mean, "select")
    model = config.get("model", "mixer")
    if model != ModelName.MIXER:
        raise ConfigError(
            f"ella select chooses among the paths (FC, CONV, GCONV) of a mixer's relaxed "
            f"layers, and this run's model (--model {model}) has none: select on a run of "
            "ella train --model mixer"
        )
    invariance = config.get("invariance", "none")
    if invariance != InvarianceMethod.NONE:
        raise ConfigError(
            f"this run learned an input invariance (--invariance {invariance}); ella select "
            "is for networks without --invariance"
        )
    paths = relaxed_paths(run_dir)
    if len(paths) < 2:
        raise ConfigError(
            f"dropping a path needs a mixer of two or more paths; this run has "
            f"{paths or 'none'} (train with --paths fc conv gconv, or two of them)"
        )
    if not (run_dir / RESULTS).is_file():
        raise RunDirectoryError(
            f"no {RESULTS} in {run_dir}: the run is not finished; finish it with "
            f"ella train --out {run_dir} --resume, then select"
        )
    return paths


def train_on(
    run_dir: str | Path,
    dropped: Collection[str],
    epochs: int,
    data_dir: str | Path | None = None,
    progress: bool = False,
    start: dict | None = None,
    units: list[str] | None = None,
    criterion: str | None = None,
    seed: int | None = None,
) -> tuple[dict, dict]:
    """Train a learned run on for ``epochs`` with the ``dropped`` paths at zero in every
    relaxed layer (held there), under fixed prior precisions.

    Args:
        run_dir: the learned run.
        dropped: what is at zero (none: the control): a path name (``"fc"``) in every
            relaxed layer, a prior group (``"layer3.fc"``) in that layer alone.
        epochs: epochs of training on, with the run's recipe (its learning-rate schedule
            starting again).
        data_dir: the run's data files, if moved since the run.
        progress: a progress bar over the epochs.
        start: ``{"model": state_dict, "log_prior": (n_groups,)}`` to begin from instead of
            the run's reported weights and last log prior precisions (a later round of
            :func:`select_paths`).
        units: what the row's ``"kept"`` lists, those of them not dropped: the run's paths
            (default) or its prior groups (:func:`~ella.selection.units.layer_groups`).
        criterion: the registered criterion that scores it
            (:data:`~ella.selection.criteria.CRITERIA`); ``None``: the evidence.
        seed: the seed of the training on (its batches' order, its draws); ``None``: the
            run's own.

    Returns:
        ``(row, end)``. ``row``: ``{"kept", "test_accuracy", "test_nll",
        "log_evidence", "log_likelihood", "shares", "seconds"}``, the evidence being
        :func:`~ella.marglik.kept_log_evidence` (exact GGN, all training images) and the
        shares :func:`ella.learner.report.mean_shares` at its optimal precisions. ``end``:
        ``{"model", "log_prior"}``, the weights trained on and those optimal log
        precisions, for a next round.
    """
    run, log_prior = load_learned_run(run_dir, data_dir)
    if start is None:
        start = {"model": run.net.state_dict(), "log_prior": log_prior}
    # run.config names the data where the run found it, or ``data_dir`` where given
    config = dataclasses.replace(run.config, epochs=epochs, progress=False)
    if seed is not None:
        config = dataclasses.replace(config, seed=seed)
    with tempfile.TemporaryDirectory() as scratch:  # the trainer writes nothing there
        trainer = Trainer(config, scratch)
    kept = [u for u in units or relaxed_paths(run_dir) if u not in dropped]
    test = lambda: evaluate(trainer.model, trainer.data.test)  # noqa: E731
    return train_candidate(trainer, dropped, start, kept, test, progress, criterion_of(criterion))


def candidate_job(
    run_dir: str,
    epochs: int,
    data_dir: str | Path | None,
    units: list[str],
    criterion: str | None,
    progress: bool,
    job: tuple[list[str], dict | None, int | None],
) -> tuple[dict, dict]:
    """:func:`train_on` of the candidate ``job = (dropped, start, seed)`` of the run in
    ``run_dir``: what an executor's worker runs (:mod:`ella.selection.executors`; a
    module-level function, so that a :func:`functools.partial` of it pickles). It reads
    the run directory and writes nothing."""
    dropped, start, seed = job
    return train_on(run_dir, dropped, epochs, data_dir, progress, start, units, criterion, seed)


def run_groups(run_dir: str | Path, data_dir: str | Path | None = None) -> list[str]:
    """:func:`~ella.selection.units.layer_groups` of a run's network."""
    return layer_groups(load_run(run_dir, data_dir).net)


def train_candidate(
    run: AlternatingRun,
    dropped: Collection[str],
    start: dict,
    kept: list[str],
    test: Callable[[], dict[str, float]],
    progress: bool = False,
    criterion: Criterion | None = None,
) -> tuple[dict, dict]:
    """Train ``run``'s network from ``start`` for ``run.config.epochs`` epochs of the one
    loop with the ``dropped`` paths at zero (held there), under fixed prior precisions,
    and measure it: :func:`train_on`'s row and end state, for a run of ``ella train`` or
    of :func:`ella.fit`.

    Args:
        run: the loop (:class:`~ella.train.alternating.AlternatingRun`) over a fresh network:
            its ``model`` is the candidate (its parameters get hooks that hold the dropped
            tensors at zero).
        dropped: the paths or prior groups at zero (:func:`dropped_flags`).
        start: ``{"model": state_dict, "log_prior": (n_groups,)}`` to begin from.
        kept: the paths the candidate keeps, for its row.
        test: the test metrics of the trained network, ``{"accuracy", "nll"}``.
        progress: a progress bar over the epochs.
        criterion: what scores it (its fields join the row); ``None``: the evidence.
    """
    criterion = criterion or criterion_of(None)
    began = time.perf_counter()
    net, config = run.model, run.config
    net.load_state_dict(start["model"])
    with torch.no_grad():
        run.priors.log_prior.copy_(start["log_prior"])
    params = [p for p in net.parameters() if p.requires_grad]
    flags = dropped_flags(net, dropped)
    for p, flag in zip(params, flags, strict=True):
        if flag:
            with torch.no_grad():
                p.zero_()
            p.register_hook(torch.zeros_like)  # Adam and SGD then leave it at zero
    label = f"without {', '.join(sorted(dropped))}" if dropped else CONTROL
    train_nll = []  # each epoch's mean training NLL, for a criterion that reads it
    for epoch in tqdm(range(1, config.epochs + 1), desc=label, leave=False, disable=not progress):
        run.state.epoch = epoch
        train_nll.append(run.train_epoch()["train_nll"])
    if any(bool(p.any()) for p, flag in zip(params, flags, strict=True) if flag):
        raise RuntimeError(f"the dropped {', '.join(dropped)} weights left zero while training on")
    exact = dataclasses.replace(config, ggn=GGN.EXACT)
    learner = PriorLearner.from_config(net, len(run.train_data), exact)
    evidence = learner.fit(DataLoader(run.train_data, batch_size=config.marglik_batch_size))
    optimum = evidence.optimal_log_prior()
    metrics = test()
    flags_in_view = dropped_flags(evidence.view.network, dropped)
    log_evidence = kept_log_evidence(evidence, flags_in_view, optimum)
    scored = Candidate(
        net, evidence, optimum, flags_in_view, log_evidence, run.train_data, config,
        getattr(run, "validation", None), train_nll,
    )  # fmt: skip
    row = {
        "kept": kept,
        "test_accuracy": metrics["accuracy"],
        "test_nll": metrics["nll"],
        "log_evidence": log_evidence,
        **criterion.score(scored),
        "log_likelihood": float(evidence.terms(optimum)["log_likelihood"]),
        "shares": mean_shares(net, evidence, optimum.exp()),
        "seconds": time.perf_counter() - began,
    }
    end = {"model": copy.deepcopy(net.state_dict()), "log_prior": optimum.detach()}
    return row, end


def train_on_without(
    run_dir: str | Path,
    drop: str | None,
    epochs: int,
    data_dir: str | Path | None = None,
    progress: bool = False,
) -> dict:
    """:func:`train_on` from the run itself with path ``drop`` (or nothing) at zero; its
    row, with ``"dropped"`` the path or ``"none"``."""
    row, _ = train_on(run_dir, [drop] if drop else [], epochs, data_dir, progress)
    return {"dropped": drop or CONTROL, **row}


#: fraction of the control's gain
KEPT_FIT = 0.5


def collapsed(row: dict, control: dict, null: dict) -> bool:
    """Whether a candidate has lost most of what the network had learned: its training log
    likelihood gains less than ``KEPT_FIT`` of the control's gain over the class
    frequencies (``null``). Dropping that path did not choose a symmetry; it left a
    network that says nearly the same for every image, which the evidence, counting its
    few effective parameters, can rank above every network that fits where every trained
    network's evidence is below the class frequencies'."""
    gain = row["log_likelihood"] - null["log_likelihood"]
    return gain < KEPT_FIT * (control["log_likelihood"] - null["log_likelihood"])


def kept_their_fit(rows: list[dict], null: dict) -> list[dict]:
    """The candidates of ``rows`` (``rows[0]`` the control, the rest candidates) that have
    not :func:`collapsed`: those that may win against the control."""
    return [row for row in rows[1:] if not collapsed(row, rows[0], null)]


def null_model(run_dir: str | Path, data_dir: str | Path | None = None) -> dict[str, float]:
    """:func:`~ella.marglik.class_frequency_model` of a run's training labels."""
    data = load_run(run_dir, data_dir).data
    return class_frequency_model(data.train.tensors[1], data.num_classes)
