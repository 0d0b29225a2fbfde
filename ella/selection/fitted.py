"""Selecting the paths of a model of :func:`ella.fit`: the searches of a run directory,
each candidate a copy of the model trained by ``ella.fit``'s loop; nothing is written."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterable

import torch
from torch.utils.data import DataLoader

from ella.choices import Likelihood, PriorMean
from ella.distributed import ONE_PROCESS
from ella.errors import ConfigError
from ella.learner import PriorLearner, dataset_labels
from ella.marglik import class_frequency_model
from ella.rundir import SELECT_EPOCHS
from ella.selection.candidates import train_candidate
from ella.selection.criteria import check_validation, criterion_of
from ella.selection.replicates import check_seeds, replicate_seeds, replicated
from ella.selection.searches import SearchContext, search_of
from ella.selection.units import fitted_paths
from ella.train.fit import FitResult, FitRun, evaluate_loader
from ella.train.fit_inputs import probe_outputs

__all__ = ["check_fitted_selectable", "select_fitted"]


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
    search: str | None = None,
    criterion: str | None = None,
    seeds: int = 1,
) -> dict:
    """:func:`~ella.selection.select` for a model of :func:`ella.fit`: the same candidates,
    rounds and decisions as for a run of ``ella train``, each candidate a copy of ``result.model``
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
        search: a registered search by name, as for :func:`~ella.selection.select`.
        criterion: a registered criterion by name, as for :func:`~ella.selection.select`.
        seeds: train every candidate at this many seeds, as for
            :func:`~ella.selection.select` (each seed reseeds torch's generator before the
            candidate's training; the loader's own shuffling draws from it).

    Returns:
        As :func:`~ella.selection.select`: ``{"epochs", "rows"}`` with ``drop_only``, else
        the selection record with ``"selected"``.
    """
    chosen = search_of(search, drop_only=drop_only, per_layer=per_layer)
    scorer = criterion_of(criterion)
    check_validation(scorer, 0, "a model of ella.fit")
    paths = check_fitted_selectable(result, train_loader, epochs)
    units = chosen.kind.units(result.model, paths)
    recipe = dataclasses.replace(result.config, epochs=epochs, progress=False)
    first = {
        "model": copy.deepcopy(result.model.state_dict()),
        "log_prior": result.priors.log_prior.detach().clone(),
    }

    def train(dropped: list[str], start: dict | None, seed: int | None = None):
        if seed is not None:
            torch.manual_seed(seed)
        net = copy.deepcopy(result.model)
        priors = PriorLearner.from_config(net, len(train_loader.dataset), recipe)
        run = FitRun(net, priors, train_loader, None, recipe, None, ONE_PROCESS)

        def test() -> dict[str, float]:
            if test_loader is None:
                return {"accuracy": math.nan, "nll": math.nan}
            return evaluate_loader(net, test_loader, recipe)

        kept = [u for u in units if u not in dropped]
        try:
            return train_candidate(run, dropped, start or first, kept, test, progress, scorer)
        finally:
            run.batches.release()

    def null() -> dict:
        labels = dataset_labels(train_loader.dataset)
        with torch.random.fork_rng(devices=[]):  # a data set's transform may draw
            example = train_loader.dataset[0][0].unsqueeze(0)
        classes = probe_outputs(result.model, example).shape[-1]  # the model's output width
        return class_frequency_model(labels, classes)

    check_seeds(seeds)
    if seeds > 1:
        train = replicated(train, replicate_seeds(result.config.seed, seeds), scorer.key)
    context = SearchContext(epochs, units, train, null, scorer, seeds=seeds)
    record = chosen.run(context)
    if context.selected is None and "rounds" not in record:  # a search of one round
        return record
    return {**record, "selected": context.selected}
