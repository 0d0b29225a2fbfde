"""Which paths does a trained mixer need? Drop each one, train on, compare the evidence.

The per-path prior variances that ``ella train`` learns follow the weights training grew,
and never switch a path off on their own. This module asks the evidence a discrete
question instead: model selection by the marginal likelihood (MacKay, Neural Computation
1992), with one candidate model per path of the run:

1. the control: the run's network, trained on for ``epochs`` more epochs;
2. for each path: the same network with that path's weights at zero in every relaxed
   layer (held there), trained on the same way.

Each is trained with the run's own recipe and last prior precisions. Each gets the Laplace
log evidence of the tensors it keeps (:func:`ella.marglik.kept_log_evidence`: exact GGN on
all training images, every kept group's precision at its optimum). A path whose removal
raises the evidence above the control's is one the data does not ask for. How often the
answer follows the data's symmetry, and its cost: the guide, "Which symmetry does each
layer need?".

:func:`select` (``ella select RUN``) repeats it greedily (:func:`select_paths`): a round of
candidates as above, then the same from the winner, until the control wins or one path is
left (backward elimination by the evidence). It keeps the selected network's weights.
``ella select RUN --drop-only`` runs the one round (:func:`drop_each_path`). Both write
their record into the run directory after every candidate, so an interrupted call resumes
where it stopped. ``ella train --select-paths`` selects after training; ``ella report``
opens with the answer (:func:`format_answer`).

The selection works on run directories of ``ella train`` (each candidate trained by the
run's :class:`~ella.train.loop.Trainer`) and on the :class:`~ella.train.fit.FitResult` of
:func:`ella.fit` with its loaders (:func:`select_fitted`, each candidate trained by
``ella.fit``'s loop); both go through :func:`train_candidate` and
:func:`greedy_selection`, so the same network gets the same decisions either way. It sits
above ``ella.train`` and is not imported by it; ``ella report`` reads the record it leaves
(:func:`format_path_selection`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from ella.choices import GGN, InvarianceMethod, Likelihood, ModelName, PriorMean
from ella.distributed import ONE_PROCESS
from ella.errors import CheckpointError, ConfigError, EllaError, RunDirectoryError
from ella.io import atomic_write, load_torch, save_json, save_torch
from ella.learner import PriorLearner, dataset_labels
from ella.learner.report import counted, mean_shares, paths_label
from ella.marglik import PriorStructure, class_frequency_model, kept_log_evidence
from ella.nn import PATH_KINDS, RelaxedLayer, path_columns
from ella.rundir import (
    CHECKPOINT,
    CONFIG,
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_CANDIDATE,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_STATE,
    RESULTS,
    SELECT_EPOCHS,
    lock_holder,
    read_json,
    run_lock,
)
from ella.schemas import PATH_DROPS_FILE, SELECTION_FILE, SELECTION_STATE_FILE, check
from ella.train.alternating import AlternatingRun
from ella.train.fit import FitResult, FitRun, evaluate_loader, probe_outputs
from ella.train.loop import Trainer, evaluate
from ella.train.runs import TrainedRun, load_run, refuse_unless_learned

__all__ = [
    "CONTROL",
    "KEPT_FIT",
    "check_selectable",
    "collapsed",
    "drop_each_path",
    "format_path_drops",
    "format_answer",
    "format_path_selection",
    "droppable",
    "kept_their_fit",
    "layer_groups",
    "load_learned_run",
    "null_model",
    "relaxed_paths",
    "select",
    "select_paths",
    "train_on",
    "train_on_without",
]

#: the candidate that drops nothing
CONTROL = "none"


def select(
    run: str | Path | FitResult,
    train_loader: DataLoader | None = None,
    test_loader: Iterable | None = None,
    *,
    epochs: int = SELECT_EPOCHS,
    drop_only: bool = False,
    per_layer: bool = False,
    data_dir: str | Path | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict:
    """Choose the paths of a learned network by the Laplace evidence: a run of
    ``ella train``, or a model of :func:`ella.fit`; with ``per_layer``, each layer's own.

    ``ella select RUN`` in Python. Greedy backward selection (:func:`select_paths`): each
    round trains on the network and, for each path it still has, the network without it,
    and drops the path whose removal raises the evidence most, until none does. With
    ``drop_only``, the first round alone (:func:`drop_each_path`). Everything is refused
    before any work (:func:`check_selectable`, :func:`check_fitted_selectable`), and a
    run directory is held (:func:`ella.rundir.run_lock`) while the candidates train.

    Args:
        run: the run directory of a finished ``ella train`` run with learned priors
            centred at zero, a mixer of two or more paths; or the :class:`FitResult` of
            :func:`ella.fit` on a model whose relaxed layers have two or more paths
            (:func:`select_fitted`).
        train_loader: for a :class:`FitResult`, the loader ``ella.fit`` trained it on (a
            run directory names its data).
        test_loader: for a :class:`FitResult`, the loader ``ella.fit`` tested it on.
        epochs: epochs of training per candidate, with the run's recipe.
        drop_only: one round only (the network without each path against the whole one),
            recorded in ``path_drops.json``; else the greedy selection, recorded in
            ``path_selection.json`` with the selected network's weights in
            ``path_selection.pt``. A later call with the same ``epochs`` resumes from them.
            The selection of a :class:`FitResult` writes nothing.
        per_layer: the candidates drop one path of one layer (a prior group,
            ``"layer3.conv"``) instead of a path from every layer, and every layer keeps
            at least one path (:func:`droppable`); recorded in
            ``path_selection_per_layer.json`` and ``.pt``. A round trains one network per
            path of every layer that still has two or more.
        overwrite: replace a record of other ``epochs`` in the run directory, which is
            refused otherwise (a record of the same ``epochs`` is resumed).
        data_dir: the run's data files, if moved since the run.
        progress: a progress bar per candidate.

    Returns:
        With ``drop_only``: ``{"epochs", "rows"}`` (:func:`drop_each_path`); else the
        selection record ``{"epochs", "paths", "null", "rounds", "kept", "finished"}``
        (:func:`select_paths`), ``kept`` the selected paths; for a :class:`FitResult` also
        ``"selected"``, the chosen network's ``{"model", "log_prior"}``.
        :func:`format_path_drops` and :func:`format_path_selection` print them as tables.

    Raises:
        TypeError: ``run`` is a model: pass the :class:`FitResult` that ``ella.fit``
            returned for it (it carries the learned priors and the recipe).
        ConfigError, RunDirectoryError: as :func:`check_selectable` or
            :func:`check_fitted_selectable`.
    """
    if isinstance(run, nn.Module):
        raise TypeError(
            "ella.select takes the FitResult that ella.fit returned for your model (it "
            "carries the learned priors and the recipe each candidate is trained with) and "
            "its loaders, ella.select(result, train_loader, test_loader); or the run "
            "directory of an ella train run"
        )
    if drop_only and per_layer:
        raise ConfigError(
            "--drop-only trains one round of whole-path drops; a per-layer selection "
            "(--per-layer) has no one-round form: leave out one of the two"
        )
    if isinstance(run, FitResult):
        return select_fitted(
            run, train_loader, test_loader, epochs=epochs, drop_only=drop_only,
            per_layer=per_layer, progress=progress,
        )  # fmt: skip
    if drop_only:
        return drop_each_path(run, epochs, data_dir, progress, overwrite)
    return select_paths(run, epochs, data_dir, progress, per_layer=per_layer, overwrite=overwrite)


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
            (default) or its prior groups (:func:`layer_groups`).

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
    with tempfile.TemporaryDirectory() as scratch:  # the trainer writes nothing there
        trainer = Trainer(config, scratch)
    kept = [u for u in units or relaxed_paths(run_dir) if u not in dropped]
    return train_candidate(
        trainer, dropped, start, kept, lambda: evaluate(trainer.model, trainer.data.test), progress
    )


def relaxed_group_paths(net: nn.Module) -> dict[str, str]:
    """``{group: path}`` for every prior group of ``net``'s relaxed layers
    (``"layer3.fc": "fc"``, in layer-path groups)."""
    layers = {name for name, module in net.named_modules() if isinstance(module, RelaxedLayer)}
    groups = (g.rpartition(".") for g in PriorStructure(net, "layer_path").names)
    return {f"{layer}.{path}": path for layer, _, path in groups if layer in layers}


def layer_groups(net: nn.Module) -> list[str]:
    """The prior groups of ``net``'s relaxed layers (``"layer3.fc"``), in prior order: what a
    per-layer selection drops one at a time."""
    return list(relaxed_group_paths(net))


def run_groups(run_dir: str | Path, data_dir: str | Path | None = None) -> list[str]:
    """:func:`layer_groups` of a run's network."""
    return layer_groups(load_run(run_dir, data_dir).net)


def droppable(kept: list[str], per_layer: bool = False) -> list[str]:
    """What a round of the greedy selection may drop from ``kept``: any path while two or
    more are kept; per layer, any group of a layer that keeps two or more."""
    if not per_layer:
        return list(kept) if len(kept) > 1 else []
    layers = Counter(g.rpartition(".")[0] for g in kept)
    return [g for g in kept if layers[g.rpartition(".")[0]] > 1]


def dropped_flags(net: nn.Module, dropped: Collection[str]) -> list[bool]:
    """For each trainable tensor of ``net`` (in the order of its prior groups), whether
    ``dropped`` puts it at zero: a path name (``"fc"``) in every relaxed layer, or a prior
    group of one (``"layer3.fc"``)."""
    paths = relaxed_group_paths(net)
    groups = PriorStructure(net, "layer_path").tensor_groups
    return [g in paths and (g in dropped or paths[g] in dropped) for g in groups]


def train_candidate(
    run: AlternatingRun,
    dropped: Collection[str],
    start: dict,
    kept: list[str],
    test: Callable[[], dict[str, float]],
    progress: bool = False,
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
    """
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
    for epoch in tqdm(range(1, config.epochs + 1), desc=label, leave=False, disable=not progress):
        run.state.epoch = epoch
        run.train_epoch()
    if any(bool(p.any()) for p, flag in zip(params, flags, strict=True) if flag):
        raise RuntimeError(f"the dropped {', '.join(dropped)} weights left zero while training on")
    exact = dataclasses.replace(config, ggn=GGN.EXACT)
    learner = PriorLearner.from_config(net, len(run.train_data), exact)
    evidence = learner.fit(DataLoader(run.train_data, batch_size=config.marglik_batch_size))
    optimum = evidence.optimal_log_prior()
    metrics = test()
    row = {
        "kept": kept,
        "test_accuracy": metrics["accuracy"],
        "test_nll": metrics["nll"],
        "log_evidence": kept_log_evidence(
            evidence, dropped_flags(evidence.view.network, dropped), optimum
        ),
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


def drop_each_path(
    run_dir: str | Path,
    epochs: int = SELECT_EPOCHS,
    data_dir: str | Path | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict:
    """:func:`train_on_without` for the control and for each path of a learned mixer
    (``ella select RUN --drop-only``).

    Holds the run directory (:func:`ella.rundir.run_lock`). Writes ``path_drops.json`` into
    ``run_dir`` after every candidate and reuses the candidates of an earlier call with the
    same ``epochs`` found there, and those of the first round of a path selection with the
    same ``epochs`` (:func:`select_paths` trains the same candidates in its first round:
    the control and each path dropped, from the run itself).

    Returns:
        ``{"epochs": epochs, "rows": [...]}``, the control first.

    Raises:
        ConfigError, RunDirectoryError: as :func:`check_selectable`.
    """
    paths = check_selectable(run_dir, epochs)
    with run_lock(Path(run_dir)):
        path = Path(run_dir) / PATH_DROPS
        done: dict[str, dict] = {}
        selection = Path(run_dir) / PATH_SELECTION
        if selection.is_file():
            earlier = read_selection(selection, "earlier path selection")
            if earlier.get("epochs") == epochs and earlier.get("rounds"):
                done = {row["dropped"]: row for row in earlier["rounds"][0]["rows"]}
        if path.is_file():
            earlier = read_drops(path)
            if earlier.get("epochs") == epochs:
                done.update({row["dropped"]: row for row in earlier.get("rows", [])})
            elif earlier.get("rows") and not overwrite:
                raise RunDirectoryError(
                    f"{path} holds the drops of {earlier.get('epochs')} epochs per network: "
                    f"ella select {run_dir} --drop-only --epochs {earlier.get('epochs')} shows "
                    f"or resumes them; add --overwrite to replace them by drops of {epochs}"
                )
        rows = []
        for drop in [None, *paths]:
            key = drop or CONTROL
            row = done.get(key) or train_on_without(run_dir, drop, epochs, data_dir, progress)
            rows.append(row)
            save_json({"epochs": epochs, "rows": rows}, path)
    return {"epochs": epochs, "rows": rows}


#: the part of the control's fit that a candidate must keep to count as a network: its
#: training log likelihood's gain over the class frequencies' must be at least this
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


def select_paths(
    run_dir: str | Path,
    epochs: int = SELECT_EPOCHS,
    data_dir: str | Path | None = None,
    progress: bool = True,
    per_layer: bool = False,
    overwrite: bool = False,
) -> dict:
    """Greedy backward selection of a learned mixer's paths by the Laplace evidence
    (``ella select RUN``).

    Each round trains on, for ``epochs``, the network as the round before left it (the
    control) and, for each path it still has, the same network with that path at zero too
    (:func:`train_on`). If a candidate's :func:`~ella.marglik.kept_log_evidence` beats every
    other and the control's, its path is dropped and its trained weights start the next
    round; the selection ends when the control wins or one path is left. The first round
    starts from the run and its last prior precisions, each later one from the winner's
    weights and its evidence-optimal precisions. Round 1 is :func:`drop_each_path`.

    A candidate that has :func:`collapsed` (kept less than half of the control's fit gain
    over the class frequencies) cannot win: its evidence prices a network that predicts
    nearly the same for every image, not its paths. The record keeps the class-frequency
    model (:func:`~ella.marglik.class_frequency_model`) to compare every evidence with.

    Holds the run directory (:func:`ella.rundir.run_lock`). Writes ``path_selection.json``
    after every candidate and the winner of every finished round, the selected network at
    the end, to ``path_selection.pt`` (``{"model", "log_prior", "kept"}``; load it with
    :func:`ella.io.load_torch`). A call with the same ``epochs`` resumes from both.

    With ``per_layer`` the candidates drop one prior group of one relaxed layer
    (``"layer3.conv"``, :func:`layer_groups`), each layer keeps one path at least
    (:func:`droppable`), and the files are ``path_selection_per_layer.{json,pt}``. A
    selection of other ``epochs`` in them is refused unless ``overwrite``.

    Returns:
        ``{"epochs", "paths", "null", "rounds": [{"kept", "rows", "winner"}], "kept",
        "finished"}``: ``kept`` the selected paths, each round's rows the control first,
        ``null`` the class-frequency model.

    Raises:
        ConfigError, RunDirectoryError: as :func:`check_selectable`.
    """
    paths = check_selectable(run_dir, epochs)
    run_dir = Path(run_dir)
    with run_lock(run_dir):
        files = _SelectionFiles(run_dir, per_layer)
        units = run_groups(run_dir, data_dir) if per_layer else paths
        record = files.earlier_record(epochs, units, overwrite)
        if "null" not in record:
            record["null"] = null_model(run_dir, data_dir)

        def train(dropped: list[str], start: dict | None) -> tuple[dict, dict]:
            return train_on(run_dir, dropped, epochs, data_dir, progress, start, units)

        return greedy_selection(record, units, train, files, per_layer)[0]


def read_selection(path: Path, what: str = "path selection", fix: str = "") -> dict:
    """The record of :func:`select_paths` in ``path``, checked: its shape
    (:data:`ella.schemas.SELECTION_FILE`), and that each round's rows begin with the
    control, its winner is one of them, and a record with rounds holds the null model.

    Raises:
        CheckpointError: naming the file, what is wrong and ``fix`` (by default: restore
            it, or start the selection again with ``--overwrite``).
    """
    fix = fix or (
        "restore it from a copy, or add --overwrite to ella select to start the selection "
        "again without it"
    )
    record = read_json(path, what, SELECTION_FILE, fix)
    problem = _round_problem(record["rounds"])
    if problem is None and record["rounds"] and "null" not in record:
        problem = "it has rounds but no null model ('null')"
    if problem is None and record["finished"] and not record["rounds"]:
        problem = "it is finished but has no round"
    if problem is not None:
        raise CheckpointError(f"{path} is not as ella writes it: {problem}; {fix}")
    return record


def _round_problem(rounds: list[dict]) -> str | None:
    """What is inconsistent in a selection's rounds (None where nothing is)."""
    for number, this in enumerate(rounds):
        rows = this["rows"]
        if rows and rows[0]["dropped"] != CONTROL:
            return f"round {number + 1} does not begin with the control ('{CONTROL}')"
        if this["winner"] is not None and this["winner"] not in {r["dropped"] for r in rows}:
            return f"round {number + 1}'s winner {this['winner']!r} is none of its rows"
        if this["winner"] is None and number < len(rounds) - 1:
            return f"round {number + 1} has no winner but is followed by another"
    return None


def read_drops(path: Path) -> dict:
    """``path_drops.json`` (:func:`drop_each_path`), checked against
    :data:`ella.schemas.PATH_DROPS_FILE` and beginning with the control where it has rows."""
    fix = (
        "restore it from a copy, or add --overwrite to ella select --drop-only to train them again"
    )
    record = read_json(path, "earlier path drops", PATH_DROPS_FILE, fix)
    if record["rows"] and record["rows"][0]["dropped"] != CONTROL:
        raise CheckpointError(
            f"{path} is not as ella writes it: it does not begin with the control; {fix}"
        )
    return record


def read_selection_state(path: Path) -> dict:
    """A selection's saved network (the winner so far, or a round's best candidate),
    checked against :data:`ella.schemas.SELECTION_STATE_FILE`."""
    fix = "restore it from a copy, or add --overwrite to ella select to start again"
    return check(load_torch(path, fix=fix), SELECTION_STATE_FILE, path, fix)


def new_record(epochs: int, paths: list[str], per_layer: bool = False) -> dict:
    """The record of a selection that has not started (``paths``: the prior groups of a
    per-layer one)."""
    record = {"epochs": epochs, "paths": paths, "rounds": [], "kept": paths, "finished": False}
    return {**record, "per_layer": True} if per_layer else record


@dataclasses.dataclass
class _SelectionFiles:
    """Where :func:`select_paths` keeps its record and weights in a run directory, so that
    an interrupted selection resumes."""

    run_dir: Path
    per_layer: bool = False

    @property
    def record(self) -> Path:
        return self.run_dir / (PATH_SELECTION_PER_LAYER if self.per_layer else PATH_SELECTION)

    @property
    def winner(self) -> Path:
        name = PATH_SELECTION_PER_LAYER_STATE if self.per_layer else PATH_SELECTION_STATE
        return self.run_dir / name

    @property
    def candidate(self) -> Path:
        name = PATH_SELECTION_PER_LAYER_CANDIDATE if self.per_layer else PATH_SELECTION_CANDIDATE
        return self.run_dir / name

    def earlier_record(self, epochs: int, paths: list[str], overwrite: bool = False) -> dict:
        """The record of an earlier selection with these ``epochs`` and ``paths``, else a
        new one; an earlier selection of other ``epochs`` is refused (it is not replaced
        unasked) unless ``overwrite``, which removes its files."""
        if self.record.is_file():
            flag = " --per-layer" if self.per_layer else ""
            fix = (
                f"restore it from a copy, or ella select {self.run_dir}{flag} --overwrite "
                "starts the selection again without it"
            )
            try:
                earlier = read_selection(self.record, "earlier path selection", fix)
            except CheckpointError:
                if not overwrite:
                    raise
                earlier = {}  # unreadable, and to be replaced
            if earlier.get("epochs") == epochs and earlier.get("paths") == paths:
                return earlier
            if earlier.get("rounds") and not overwrite:
                rounds = earlier["rounds"]
                state = "finished" if earlier.get("finished") else f"stopped in round {len(rounds)}"
                raise RunDirectoryError(
                    f"{self.record} holds a selection of {earlier.get('epochs')} epochs per "
                    f"network ({state}): ella select {self.run_dir}{flag} --epochs "
                    f"{earlier.get('epochs')} shows or resumes it; add --overwrite to replace "
                    f"it by one of {epochs}"
                )
            for path in (self.winner, self.candidate):
                path.unlink(missing_ok=True)
        return new_record(epochs, paths, self.per_layer)


def greedy_selection(
    record: dict,
    paths: list[str],
    train: Callable[[list[str], dict | None], tuple[dict, dict]],
    files: _SelectionFiles | None = None,
    per_layer: bool = False,
) -> tuple[dict, dict | None]:
    """The rounds of :func:`select_paths` from ``record`` (:func:`new_record`, or an earlier
    one to resume) until it is finished; ``train(dropped, start)`` trains one candidate
    (:func:`train_on`'s row and end state). With ``files`` the record, the round's best
    candidate and each winner are saved after every candidate; without, nothing is
    written. With ``per_layer`` the ``paths`` are prior groups (:func:`droppable`).

    Returns:
        The finished record and the selected network's ``{"model", "log_prior"}`` (None
        where no round ran)."""
    start = None
    if files is not None and any(r["winner"] is not None for r in record["rounds"]):
        start = read_selection_state(files.winner)

    def eligible(row: dict, rows: list[dict]) -> bool:
        """The control, or a candidate that has not collapsed (``rows[0]`` the control)."""
        return row["dropped"] == CONTROL or not collapsed(row, rows[0], record["null"])

    while not record["finished"]:
        rounds = record["rounds"]
        if not rounds or rounds[-1]["winner"] is not None:
            if not droppable(record["kept"], per_layer):
                record["finished"] = True
                break
            rounds.append({"kept": record["kept"], "rows": [], "winner": None})
        this = rounds[-1]
        before = [p for p in paths if p not in this["kept"]]
        candidates = [r for r in this["rows"] if eligible(r, this["rows"])]
        best = max(candidates, key=lambda r: r["log_evidence"], default=None)
        best_state = None
        if best is not None and files is not None and files.candidate.is_file():
            best_state = read_selection_state(files.candidate)
        if best is not None and (best_state is None or best_state["dropped"] != best["dropped"]):
            # the weights of the round's best row are lost (interrupted between them and
            # its row): the round starts again
            this["rows"], best, best_state = [], None, None
        done = {r["dropped"] for r in this["rows"]}
        for drop in [None, *droppable(this["kept"], per_layer)]:
            key = drop or CONTROL
            if key in done:
                continue
            dropped = before + ([drop] if drop else [])
            row, end = train(dropped, start)
            row = {"dropped": key, **row}
            better = best is None or row["log_evidence"] > best["log_evidence"]
            if better and eligible(row, this["rows"]):
                best, best_state = row, {**end, "dropped": key, "kept": row["kept"]}
                if files is not None:
                    save_torch(best_state, files.candidate)  # before the row that names it
            this["rows"].append(row)
            if files is not None:
                save_json(record, files.record)
        start = {k: best_state[k] for k in ("model", "log_prior")}
        this["winner"] = best["dropped"]
        record["kept"] = best["kept"]
        record["finished"] = best["dropped"] == CONTROL
        if files is not None:
            save_torch({**start, "kept": best["kept"]}, files.winner)
            save_json(record, files.record)
            files.candidate.unlink(missing_ok=True)
    if files is not None:
        save_json(record, files.record)
    return record, start


def fitted_paths(model: nn.Module) -> list[str]:
    """The paths of ``model``'s relaxed layers, in the order a layer holds them."""
    present = set(relaxed_group_paths(model).values())
    return [p for p in PATH_KINDS if p in present]


def check_fitted_selectable(result: FitResult, train_loader, epochs: int) -> list[str]:
    """Refuse, before any work, what :func:`select_fitted` cannot do; return the model's
    paths.

    Raises:
        ConfigError: ``epochs`` below 1, no training loader (or one without a map-style
            data set), a regression, priors that were not learned or are centred at the
            initial weights, or relaxed layers of fewer than two paths.
    """
    config = result.config
    if epochs < 1:
        raise ConfigError(f"epochs per candidate must be at least 1, got {epochs}")
    if not isinstance(train_loader, DataLoader) or not hasattr(train_loader.dataset, "__getitem__"):
        raise ConfigError(
            "ella.select(result, train_loader, test_loader) needs the DataLoader of a map-style "
            "data set that ella.fit trained the result on: each candidate is trained on it "
            "and its evidence fitted on every example"
        )
    if config.likelihood != Likelihood.CLASSIFICATION:
        raise ConfigError(
            "ella.select compares classifiers with the class frequencies; a regression "
            f"(likelihood={config.likelihood.value!r}) has none to compare with"
        )
    if not config.learn_priors:
        raise ConfigError(
            "ella.select trains each candidate under the learned prior precisions, and this "
            "result is a MAP run (learn_priors=False): fit with learned priors first"
        )
    if config.prior_mean != PriorMean.ZERO:
        raise ConfigError(
            "ella.select drops a path by holding its weights at zero, where a prior centred "
            "at the initial weights (prior_mean='init') does not put them: fit with "
            "prior_mean='zero'"
        )
    paths = fitted_paths(result.model)
    if len(paths) < 2:
        raise ConfigError(
            f"dropping a path needs relaxed layers of two or more paths; this model has "
            f"{paths or 'none'} (build its RelaxedLayers with paths=('fc', 'conv', 'gconv'), "
            "or two of them)"
        )
    return paths


def select_fitted(
    result: FitResult,
    train_loader: DataLoader,
    test_loader: Iterable | None = None,
    *,
    epochs: int = SELECT_EPOCHS,
    drop_only: bool = False,
    per_layer: bool = False,
    progress: bool = True,
) -> dict:
    """:func:`select` for a model of :func:`ella.fit`: the same candidates, rounds and
    decisions as for a run of ``ella train``, each candidate a copy of ``result.model``
    trained on ``train_loader`` for ``epochs`` by ``ella.fit``'s loop with the result's
    recipe, under its learned precisions. Nothing is written and the model is not
    changed: the record's ``"selected"`` holds the chosen network's weights.

    Args:
        result: what ``ella.fit`` returned (the model, its learned priors, its recipe).
        train_loader: the loader it was trained on (a map-style data set).
        test_loader: the loader it was tested on; without one the rows' test metrics are NaN.
        epochs: epochs of training per candidate, as for :func:`select`.
        drop_only: one round only, as for :func:`select`.
        per_layer: drop one path of one layer at a time, as for :func:`select`.
        progress: a progress bar per candidate.

    Returns:
        As :func:`select`: ``{"epochs", "rows"}`` with ``drop_only``, else the selection
        record with ``"selected"``.
    """
    paths = check_fitted_selectable(result, train_loader, epochs)
    units = layer_groups(result.model) if per_layer else paths
    recipe = dataclasses.replace(result.config, epochs=epochs, progress=False)
    first = {
        "model": copy.deepcopy(result.model.state_dict()),
        "log_prior": result.priors.log_prior.detach().clone(),
    }

    def train(dropped: list[str], start: dict | None) -> tuple[dict, dict]:
        net = copy.deepcopy(result.model)
        priors = PriorLearner.from_config(net, len(train_loader.dataset), recipe)
        run = FitRun(net, priors, train_loader, None, recipe, None, ONE_PROCESS)

        def test() -> dict[str, float]:
            if test_loader is None:
                return {"accuracy": math.nan, "nll": math.nan}
            return evaluate_loader(net, test_loader, recipe)

        kept = [u for u in units if u not in dropped]
        try:
            return train_candidate(run, dropped, start or first, kept, test, progress)
        finally:
            run.batches.release()

    if drop_only:
        rows = [
            {"dropped": d or CONTROL, **train([d] if d else [], None)[0]} for d in [None, *paths]
        ]
        return {"epochs": epochs, "rows": rows}
    labels = dataset_labels(train_loader.dataset)
    with torch.random.fork_rng(devices=[]):  # a data set's transform may draw
        example = train_loader.dataset[0][0].unsqueeze(0)
    classes = probe_outputs(result.model, example).shape[-1]  # the model's output width
    record = new_record(epochs, units, per_layer)
    record["null"] = class_frequency_model(labels, classes)
    record, selected = greedy_selection(record, units, train, per_layer=per_layer)
    return {**record, "selected": selected}


def unit_label(unit: str) -> str:
    """``"CONV"`` for a path, ``"layer3 CONV"`` for a prior group of a per-layer selection."""
    layer, _, path = unit.rpartition(".")
    return f"{layer} {path.upper()}" if layer else path.upper()


def kept_label(kept: list[str]) -> str:
    """``CONV+GCONV`` for paths; ``layer1 CONV+GCONV, layer2 GCONV`` for prior groups."""
    layers: dict[str, list[str]] = {}
    for unit in kept:
        layer, _, path = unit.rpartition(".")
        layers.setdefault(layer, []).append(path.upper())
    if list(layers) == [""]:
        return "+".join(layers[""])
    return ", ".join(f"{layer} {'+'.join(paths)}" for layer, paths in layers.items())


def drop_gains(record: dict) -> list[tuple[int, str, float]]:
    """The drops of a selection record's rounds: ``(round number, what it dropped, its gain
    in log evidence over the round's control)`` for each round whose winner dropped a path
    (or a group); rounds the control won, or not decided yet, are left out."""
    gains = []
    for number, this in enumerate(record["rounds"], start=1):
        if this["winner"] not in (None, CONTROL):
            control = this["rows"][0]["log_evidence"]
            row = next(r for r in this["rows"] if r["dropped"] == this["winner"])
            gains.append((number, this["winner"], row["log_evidence"] - control))
    return gains


def per_layer_outcome(record: dict) -> dict[str, tuple[int, float] | None]:
    """Each prior group of a per-layer selection: None where it was kept, else the round
    that dropped it and that drop's gain in log evidence over the round's control."""
    outcome: dict[str, tuple[int, float] | None] = dict.fromkeys(record["paths"])
    for number, dropped, gain in drop_gains(record):
        outcome[dropped] = (number, gain)
    return outcome


def save_per_layer_figure(record: dict, path: str | Path) -> Path:
    """A finished per-layer selection as a grid, written as PNG: a row per relaxed layer and
    a column per path, each kept group in its path's colour (the kind's, as in the shares
    figure), each dropped one light with the round that dropped it and the evidence it
    gained (nats)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outcome = per_layer_outcome(record)
    layers = list(dict.fromkeys(g.rpartition(".")[0] for g in outcome))
    paths = [p for p in PATH_KINDS if any(g.endswith(f".{p}") for g in outcome)]
    fig, ax = plt.subplots(figsize=(1.6 * len(paths) + 1.5, 0.45 * len(layers) + 1.4))
    for i, layer in enumerate(layers):
        for j, name in enumerate(paths):
            group = f"{layer}.{name}"
            if group not in outcome:
                continue
            dropped = outcome[group]
            colour = PATH_KINDS[name].color if dropped is None else "#e5e5e5"
            ax.add_patch(plt.Rectangle((j, i), 0.95, 0.9, color=colour))
            label = (
                "kept"
                if dropped is None
                else f"dropped, round {dropped[0]}\n{dropped[1]:+.0f} nats"
            )
            ax.text(j + 0.47, i + 0.45, label, ha="center", va="center", fontsize=8,
                    color="white" if dropped is None else "black")  # fmt: skip
    ax.set_xlim(0, len(paths))
    ax.set_ylim(len(layers), 0)
    ax.set_xticks([j + 0.47 for j in range(len(paths))], [p.upper() for p in paths])
    ax.set_yticks([i + 0.45 for i in range(len(layers))], layers)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(
        f"Paths each layer keeps by the evidence ({record['epochs']} epochs per network)",
        fontsize=10,
    )
    fig.tight_layout()
    path = atomic_write(Path(path), lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return path


def format_path_selection(record: dict) -> str:
    """A table per round of :func:`select_paths`'s record, and the paths it selected."""
    null = record["null"]
    what = "path of one layer" if record.get("per_layer") else "path"
    lines = [
        f"path selection: each round drops the {what} whose removal raises the evidence most, "
        f"the rest trained on for {counted(record['epochs'], 'epoch')} ('collapsed': a "
        f"candidate that kept less than half of the control's training fit over the class "
        f"frequencies, which cannot win)"
    ]
    width = max([10, *(len(r["dropped"]) + 2 for t in record["rounds"] for r in t["rows"])])
    for number, this in enumerate(record["rounds"], start=1):
        control = this["rows"][0]["log_evidence"]
        lines.append(f"round {number} (network {kept_label(this['kept'])}):")
        columns = path_columns(this["rows"][0]["shares"])
        lines.append(
            f"  {'dropped':<{width}}{'test acc %':>11}{'log evidence':>15}{'vs control':>12}"
            f"  shares {paths_label(columns)} %"
        )
        for r in this["rows"]:
            shares = "/".join(f"{r['shares'].get(p, 0.0):.0f}" for p in columns)
            lost = r["dropped"] != CONTROL and collapsed(r, this["rows"][0], null)
            mark = "  collapsed" if lost else ""
            lines.append(
                f"  {r['dropped']:<{width}}{100 * r['test_accuracy']:>11.2f}"
                f"{r['log_evidence']:>15.1f}{r['log_evidence'] - control:>+12.1f}  {shares}"
                f"{mark}"
            )
        if this["winner"] is not None:
            kept_all = this["winner"] == CONTROL
            verdict = "keeps every path" if kept_all else f"drops {unit_label(this['winner'])}"
            lines.append(f"  the evidence {verdict}")
    if record["finished"]:
        first, last = record["rounds"][0]["rows"][0], _selected_row(record)
        lines.append(
            f"selected: {kept_label(record['kept'])}; test accuracy "
            f"{100 * last['test_accuracy']:.2f}% (the whole network trained on alike: "
            f"{100 * first['test_accuracy']:.2f}%), log evidence {last['log_evidence']:.1f} "
            f"({last['log_evidence'] - first['log_evidence']:+.1f})"
        )
        lines.append(
            f"no network (the class frequencies, uniform Dirichlet prior): log evidence "
            f"{null['log_evidence']:.1f}"
        )
        if last["log_evidence"] < null["log_evidence"]:
            lines.append(
                "the evidence prefers the class frequencies to the selected network: at this "
                "number of training images the network's Occam factor outweighs its fit, so the "
                "choice of paths is the evidence's among networks it would not use"
            )
    return "\n".join(lines)


#: how often ``ella select --per-layer``'s answer has agreed with the exhaustive comparison
#: of every per-layer network (record 0042), said beside every per-layer answer
PER_LAYER_RELIABILITY = (
    "in a miniature this selection agreed with the exhaustive comparison of every per-layer "
    "network in 0 of 4 settings (4 of 12 layers; record 0042)"
)

#: what the effective-parameter table reads, said beside every answer
SHARES_NOTE = (
    "the shares below say how the evidence prices the paths training grew, not which "
    "symmetry the data need"
)


def selection_rounds(n_paths: int) -> list[int]:
    """Networks trained per round by a greedy selection that drops a path in every round:
    the control and one candidate per path kept, from ``n_paths`` paths down to two
    (``[4, 3]`` for three paths)."""
    return [kept + 1 for kept in range(n_paths, 1, -1)]


def format_answer(run_dir: str | Path, results: dict) -> str | None:
    """The report's headline: which paths the data need by the evidence's discrete
    comparison (the run's finished :func:`select_paths`), or what asking costs.

    The shares of a layer's paths say how the evidence prices the paths training grew; the
    comparison of the networks with and without each path is the answer to which the data
    need (the guide: "Which symmetry does each layer need?"). Without a selection the
    headline estimates its cost from the run's own pace: ``epochs`` per network, the
    networks of :func:`selection_rounds`.

    Args:
        run_dir: a finished run directory of ``ella train``.
        results: its ``results.json``.

    Returns:
        Two lines, the answer (or its cost) and :data:`SHARES_NOTE`; None for a run that
        :func:`select` cannot take (:func:`check_selectable`: MAP, one path, ...).
    """
    try:
        paths = check_selectable(run_dir, SELECT_EPOCHS)
    except EllaError:
        return None
    per_layer = _per_layer_line(run_dir, results, len(paths))
    path = Path(run_dir) / PATH_SELECTION
    record = read_selection(path) if path.is_file() else None
    if record is not None and record.get("finished"):
        return f"{_answer(record)}\n{per_layer}\n{SHARES_NOTE}"
    if record is not None and record.get("rounds"):
        line = _unfinished(run_dir, record, "the data need", "a selection", "")
        return f"{line}\n{per_layer}\n{SHARES_NOTE}"
    rounds = selection_rounds(len(paths))
    cost = f"{counted(rounds[0], 'network')} of {SELECT_EPOCHS} epochs in its first round"
    pace = _seconds_per_epoch(results)
    if pace is not None:
        first, every = (SELECT_EPOCHS * pace * n / 60 for n in (rounds[0], sum(rounds)))
        cost += f", about {first:.0f} min at this run's pace"
        if len(rounds) > 1:
            cost += f" ({sum(rounds)} networks, {every:.0f} min, if it drops a path each round)"
    line = (
        f"which paths the data need: not asked yet; ella select {run_dir} asks the evidence, "
        f"training the network with and without each path: {cost}"
    )
    return f"{line}\n{per_layer}\n{SHARES_NOTE}"


def _unfinished(run_dir: str | Path, record: dict, which: str, what: str, flag: str) -> str:
    """The report's line for an unfinished selection record: running where another process
    holds the run directory (:func:`ella.rundir.lock_holder`), else stopped, with the
    command that resumes it."""
    rounds = len(record["rounds"])
    holder = lock_holder(Path(run_dir))
    if holder is not None:
        return (
            f"which paths {which}: {what} is running (in round {rounds}; pid {holder} holds "
            "the run directory)"
        )
    epochs = "" if record["epochs"] == SELECT_EPOCHS else f" --epochs {record['epochs']}"
    return (
        f"which paths {which}: {what} stopped in round {rounds}; ella select "
        f"{run_dir}{flag}{epochs} resumes it"
    )


def _per_layer_line(run_dir: str | Path, results: dict, n_paths: int) -> str:
    """The report's line for ``ella select --per-layer``: its answer with
    :data:`PER_LAYER_RELIABILITY`, that a selection stopped, or what its first round costs."""
    path = Path(run_dir) / PATH_SELECTION_PER_LAYER
    record = read_selection(path, "per-layer path selection") if path.is_file() else None
    if record is not None and record.get("finished"):
        return f"{_answer(record)}; {PER_LAYER_RELIABILITY}"
    if record is not None and record.get("rounds"):
        return _unfinished(
            run_dir, record, "each layer needs", "a per-layer selection", " --per-layer"
        )
    layers = len(results.get("effective_parameters", []))
    if layers:
        networks = 1 + n_paths * layers
        cost = f"{counted(networks, 'network')} of {SELECT_EPOCHS} epochs in its first round"
        pace = _seconds_per_epoch(results)
        if pace is not None:
            cost += f", about {SELECT_EPOCHS * pace * networks / 60:.0f} min at this run's pace"
    else:  # results without the layers' rows
        cost = f"a network of {SELECT_EPOCHS} epochs per path of each layer in its first round"
    return (
        f"which paths each layer needs: not asked yet; ella select {run_dir} --per-layer drops "
        f"one path of one layer at a time: {cost}; {PER_LAYER_RELIABILITY}"
    )


def _seconds_per_epoch(results: dict) -> float | None:
    """A run's training seconds per epoch (its evidence rounds included); None where its
    results lack them."""
    seconds, epochs = results.get("train_time_s"), results.get("epochs")
    return seconds / epochs if seconds and epochs else None


def _answer(record: dict) -> str:
    """One line of a finished selection: the paths kept, what each drop gained, and the
    selected network's test accuracy against the whole network trained on alike."""
    kept = kept_label(record["kept"])
    drops = [f"{unit_label(dropped)} ({gain:+.0f} nats)" for _, dropped, gain in drop_gains(record)]
    how = f"dropped {', then '.join(drops)}" if drops else "every path kept"
    last = record["rounds"][-1]
    if last["winner"] == CONTROL:
        rivals = kept_their_fit(last["rows"], record["null"])
        if rivals:
            best = max(rivals, key=lambda r: r["log_evidence"])
            cost = last["rows"][0]["log_evidence"] - best["log_evidence"]
            too = " too" if drops else ""
            how += f"; dropping {unit_label(best['dropped'])}{too} would cost {cost:.0f} nats"
    first, selected = record["rounds"][0]["rows"][0], _selected_row(record)
    which, command = "the data need", "ella select"
    if record.get("per_layer"):
        which, command = "each layer needs", "ella select --per-layer"
    line = (
        f"which paths {which}, by the evidence ({command}, {record['epochs']} epochs "
        f"per network): {kept}; {how}; test accuracy {100 * selected['test_accuracy']:.2f}% "
        f"(the whole network trained on alike: {100 * first['test_accuracy']:.2f}%)"
    )
    if selected["log_evidence"] < record["null"]["log_evidence"]:
        line += "; below no network's evidence, so a choice among networks, not against none"
    return line


def _selected_row(record: dict) -> dict:
    """The row of the selected network: the winner of the last round."""
    last = record["rounds"][-1]
    return next(r for r in last["rows"] if r["dropped"] == last["winner"])


def format_path_drops(result: dict) -> str:
    """A table of :func:`drop_each_path`'s result and the paths the evidence would drop."""
    rows = result["rows"]
    control = rows[0]["log_evidence"]
    lines = [
        f"path drops: each path at zero in every relaxed layer, the rest trained on for "
        f"{counted(result['epochs'], 'epoch')} (the control: nothing dropped)",
        f"{'dropped':<10}{'test acc %':>11}{'log evidence':>15}{'vs control':>12}",
    ]
    for r in rows:
        lines.append(
            f"{r['dropped']:<10}{100 * r['test_accuracy']:>11.2f}{r['log_evidence']:>15.1f}"
            f"{r['log_evidence'] - control:>+12.1f}"
        )
    gains = [r for r in rows[1:] if r["log_evidence"] > control]
    if gains:
        best = max(gains, key=lambda r: r["log_evidence"])
        names = ", ".join(r["dropped"].upper() for r in gains)
        lines.append(
            f"the evidence would drop: {names} (most: {best['dropped'].upper()}, "
            f"{best['log_evidence'] - control:+.0f} nats)"
        )
    else:
        lines.append("the evidence keeps every path")
    return "\n".join(lines)
