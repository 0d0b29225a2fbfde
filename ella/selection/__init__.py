"""Which paths does a trained mixer need? Drop each one, train on, compare the evidence.

The per-path prior variances that ``ella train`` learns follow the weights training grew,
and never switch a path off on their own. This package asks the evidence a discrete
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

The package is made of units, each registered by name:

- :mod:`~ella.selection.units`: what a candidate drops (a path of every layer, a path of
  one layer), its label and how it is parsed;
- :mod:`~ella.selection.searches`: what a round trains (``greedy``, ``per_layer``,
  ``drop``; :func:`register_search` adds one);
- :mod:`~ella.selection.criteria`: how a candidate is scored (``evidence``;
  :func:`register_criterion` adds one);
- :mod:`~ella.selection.candidates`: the checks before any work and one candidate's
  training; :mod:`~ella.selection.record`: the record files, read back and resumed;
  :mod:`~ella.selection.answer`: the tables, the report's headline and the figure;
  :mod:`~ella.selection.fitted`: the same for a model of :func:`ella.fit`.

:func:`select` (``ella select RUN``) runs a search on a run directory, holding it
(:func:`ella.rundir.run_lock`) and writing the record after every candidate, so an
interrupted call resumes where it stopped. It sits above ``ella.train`` and is not
imported by it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from torch import nn
from torch.utils.data import DataLoader

from ella.errors import ConfigError
from ella.rundir import CONFIG, SELECT_EPOCHS, read_json, run_lock
from ella.selection.answer import (
    EVIDENCE_AGREEMENT,
    MORE_SEEDS,
    decision,
    drop_gains,
    format_path_drops,
    format_path_selection,
    format_spread,
    per_layer_outcome,
    save_per_layer_figure,
)
from ella.selection.candidates import (
    CONTROL,
    KEPT_FIT,
    candidate_job,
    check_selectable,
    collapsed,
    kept_their_fit,
    load_learned_run,
    null_model,
    relaxed_paths,
    run_groups,
    train_candidate,
    train_on,
    train_on_without,
)
from ella.selection.criteria import (
    CRITERIA,
    DEFAULT_CRITERION,
    HELD_OUT_CRITERION,
    Candidate,
    Criterion,
    check_validation,
    criterion_of,
    default_criterion,
    register_criterion,
)
from ella.selection.executors import EXECUTORS, Executor, RayExecutor, executor_of
from ella.selection.fitted import check_fitted_selectable, select_fitted
from ella.selection.headline import (
    PER_LAYER_RELIABILITY,
    SHARES_NOTE,
    format_answer,
    format_plan,
    run_criterion,
    selection_cost,
    selection_rounds,
)
from ella.selection.record import (
    SearchFiles,
    new_record,
    read_drops,
    read_selection,
    read_selection_state,
)
from ella.selection.replicates import (
    CALL_AT,
    check_seeds,
    gain_summary,
    one_by_one,
    replicate_seeds,
    replicated,
    summarise,
    train_each,
)
from ella.selection.searches import (
    DEFAULT_SEARCH,
    SEARCHES,
    DropSearch,
    GreedySearch,
    Search,
    SearchContext,
    greedy_selection,
    register_search,
    search_of,
)
from ella.selection.units import (
    LAYER_PATHS,
    UNIT_KINDS,
    WHOLE_PATHS,
    UnitKind,
    dropped_flags,
    fitted_paths,
    layer_groups,
)
from ella.train.fit import FitResult

__all__ = [
    "CALL_AT",
    "CONTROL",
    "CRITERIA",
    "DEFAULT_CRITERION",
    "HELD_OUT_CRITERION",
    "DEFAULT_SEARCH",
    "EXECUTORS",
    "KEPT_FIT",
    "LAYER_PATHS",
    "MORE_SEEDS",
    "EVIDENCE_AGREEMENT",
    "PER_LAYER_RELIABILITY",
    "SEARCHES",
    "SHARES_NOTE",
    "UNIT_KINDS",
    "WHOLE_PATHS",
    "Candidate",
    "Criterion",
    "DropSearch",
    "Executor",
    "GreedySearch",
    "Search",
    "SearchContext",
    "SearchFiles",
    "UnitKind",
    "check_fitted_selectable",
    "check_selectable",
    "collapsed",
    "criterion_of",
    "default_criterion",
    "decision",
    "drop_each_path",
    "drop_gains",
    "executor_of",
    "droppable",
    "dropped_flags",
    "fitted_paths",
    "format_answer",
    "format_path_drops",
    "format_path_selection",
    "format_plan",
    "format_spread",
    "gain_summary",
    "greedy_selection",
    "kept_their_fit",
    "layer_groups",
    "load_learned_run",
    "new_record",
    "null_model",
    "per_layer_outcome",
    "read_drops",
    "read_selection",
    "read_selection_state",
    "register_criterion",
    "register_search",
    "relaxed_paths",
    "replicate_seeds",
    "replicated",
    "run_groups",
    "run_search",
    "save_per_layer_figure",
    "search_of",
    "select",
    "select_fitted",
    "select_paths",
    "selection_cost",
    "selection_rounds",
    "summarise",
    "train_candidate",
    "train_on",
    "train_on_without",
]


def droppable(kept: list[str], per_layer: bool = False) -> list[str]:
    """What a round of the greedy selection may drop from ``kept``
    (:meth:`UnitKind.droppable` of the paths, or per layer of the prior groups)."""
    return (LAYER_PATHS if per_layer else WHOLE_PATHS).droppable(kept)


def select(
    run: str | Path | FitResult,
    train_loader: DataLoader | None = None,
    test_loader: Iterable | None = None,
    *,
    epochs: int = SELECT_EPOCHS,
    drop_only: bool = False,
    per_layer: bool = False,
    search: str | None = None,
    criterion: str | None = None,
    seeds: int = 1,
    data_dir: str | Path | None = None,
    progress: bool = True,
    overwrite: bool = False,
    executor: str | Executor | None = None,
    workers: int | None = None,
    address: str | None = None,
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
        search: a registered search by name (:data:`SEARCHES`: ``"greedy"``, ``"drop"``,
            ``"per_layer"`` or one of :func:`register_search`); ``None``: the one
            ``drop_only`` and ``per_layer`` name, greedy by default.
        criterion: a registered criterion by name (:data:`CRITERIA`); ``None``:
            :func:`default_criterion` (the held-out likelihood where the run holds
            images out, else the evidence).
        seeds: train every candidate at this many seeds, the run's own first
            (:mod:`ella.selection.replicates`): a round drops a unit only where its gain
            over the control has one sign at every seed and exceeds two standard errors;
            1 (default): one training each.
        overwrite: replace a record of other ``epochs`` in the run directory, which is
            refused otherwise (a record of the same ``epochs`` is resumed).
        data_dir: the run's data files, if moved since the run.
        progress: a progress bar per candidate (with another executor than ``"local"``,
            one over a round's candidates).
        executor: where a round's candidates train (:data:`EXECUTORS`): ``"local"``
            (``None``, the default) one after another in this process, ``"processes"``
            in worker processes on this machine, ``"ray"`` as tasks on a Ray cluster; the
            record is the same under each (:mod:`ella.selection.executors`). A run
            directory only: a model of :func:`ella.fit` trains in this process.
        workers: the worker processes of ``"processes"`` (default: one per CPU), or the
            candidates ``"ray"`` trains at once on a machine's CPUs.
        address: the Ray cluster of ``"ray"`` (``"HOST:PORT"``); ``None``: the instance
            this process is connected to, or a new local one.

    Returns:
        With ``drop_only``: ``{"epochs", "rows"}`` (:func:`drop_each_path`); else the
        selection record ``{"epochs", "paths", "null", "rounds", "kept", "finished"}``
        (:func:`select_paths`), ``kept`` the selected paths; for a :class:`FitResult` also
        ``"selected"``, the chosen network's ``{"model", "log_prior"}``; a finished
        selection also ``"decision"``, how sure its answer is (:func:`decision`: each
        step's mean and standard error over the seeds, whether it is decided, what more
        seeds cost). :func:`format_path_drops` and :func:`format_path_selection` print
        them as tables.

    Raises:
        TypeError: ``run`` is a model: pass the :class:`FitResult` that ``ella.fit``
            returned for it (it carries the learned priors and the recipe).
        ConfigError, RunDirectoryError: as :func:`check_selectable` or
            :func:`check_fitted_selectable`, or a search or criterion not registered.
    """
    if isinstance(run, nn.Module):
        raise TypeError(
            "ella.select takes the FitResult that ella.fit returned for your model (it "
            "carries the learned priors and the recipe each candidate is trained with) and "
            "its loaders, ella.select(result, train_loader, test_loader); or the run "
            "directory of an ella train run"
        )
    chosen = search_of(search, drop_only=drop_only, per_layer=per_layer)
    criterion_of(criterion)  # refused before any work
    check_seeds(seeds)
    runner = executor_of(executor, workers=workers, address=address)
    if isinstance(run, FitResult) and not runner.in_process:
        raise ConfigError(
            f"executor={runner.name!r} trains the candidates of a run directory; those of a "
            "model of ella.fit train in this process, on its own loaders: leave executor "
            "out, or select on a run of ella train"
        )
    if isinstance(run, FitResult):
        record = select_fitted(
            run, train_loader, test_loader, epochs=epochs, search=chosen.name,
            criterion=criterion, seeds=seeds, progress=progress,
        )  # fmt: skip
    else:
        record = run_search(
            run, chosen.name, epochs, data_dir, progress, overwrite, criterion, seeds, runner
        )
    if record.get("finished") and "rounds" in record:
        record["decision"] = decision(record)
    return record


def run_search(
    run_dir: str | Path,
    search: str | None = None,
    epochs: int = SELECT_EPOCHS,
    data_dir: str | Path | None = None,
    progress: bool = True,
    overwrite: bool = False,
    criterion: str | None = None,
    seeds: int = 1,
    executor: str | Executor | None = None,
    workers: int | None = None,
    address: str | None = None,
) -> dict:
    """Run the registered ``search`` (``None``: greedy) on a finished learned run, each
    candidate trained by :func:`train_on` (at ``seeds`` seeds, the run's own first) and
    scored by ``criterion``, a round's candidates where ``executor`` puts them
    (:func:`~ella.selection.executors.executor_of`); holds the run directory and writes
    the search's record as each candidate finishes (resumed by a later call with the
    same settings).

    Raises:
        ConfigError, RunDirectoryError: as :func:`check_selectable`, or a search,
            criterion or executor not registered, ``seeds`` not an int from 1 to 32, or a
            Ray cluster that cannot be reached.
    """
    chosen = search_of(search)
    criterion_of(criterion)  # refused before the run is read
    check_seeds(seeds)
    runner = executor_of(executor, workers=workers, address=address)
    paths = check_selectable(run_dir, epochs)
    run_dir = Path(run_dir)
    saved = read_json(run_dir / CONFIG, "run's configuration")
    scorer = run_criterion(run_dir, criterion)
    check_validation(scorer, saved.get("validation_size", 0), f"the run {run_dir}")
    if isinstance(runner, RayExecutor) and runner.gpus is None:
        runner = dataclasses.replace(runner, gpus=_gpus(saved))
    runner.check()  # a cluster that cannot be reached, before any work
    try:
        with run_lock(run_dir):
            units = run_groups(run_dir, data_dir) if chosen.kind.per_layer else paths
            if runner.in_process:

                def work(job: tuple[list[str], dict | None, int | None]) -> tuple[dict, dict]:
                    dropped, start, seed = job
                    return train_on(run_dir, dropped, epochs, data_dir, progress, start, units,
                                    criterion=scorer.name, seed=seed)  # fmt: skip

            else:  # a worker reads the run by its absolute path, without progress bars
                where = str(run_dir.resolve())
                work = partial(candidate_job, where, epochs, data_dir, units, scorer.name, False)
            replicas, cache = None, None
            if seeds > 1:
                replicas = replicate_seeds(saved.get("seed", 0), seeds)
                cache = run_dir / f"{Path(chosen.files.record).stem}_replicates.json"
            each = train_each(work, runner, replicas, scorer.key, cache, progress)

            def null() -> dict:
                return null_model(run_dir, data_dir)

            context = SearchContext(
                epochs, units, one_by_one(each), null, scorer, run_dir, overwrite, seeds,
                each=each,
            )  # fmt: skip
            return chosen.run(context)
    finally:
        runner.close()


def _gpus(config: dict) -> float:
    """The GPUs one candidate of a run asks a Ray cluster for: one where the run trains on
    a GPU."""
    return 1.0 if str(config.get("device", "cpu")).startswith("cuda") else 0.0


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
    search = "per_layer" if per_layer else "greedy"
    return run_search(run_dir, search, epochs, data_dir, progress, overwrite)


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
    return run_search(run_dir, "drop", epochs, data_dir, progress, overwrite)
