"""``ella.select`` on a model of ``ella.fit``: the decisions and evidences of the same
selection on the run of ``ella train`` that trained the same network, and the refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ella
from ella import selection
from ella.errors import ConfigError
from tests.user_models import user_model


def test_a_fitted_model_gets_the_drops_of_its_ella_train_run(one_loop):
    """ella train and ella.fit are one loop, so selection from the run directory and from
    the FitResult trains the same candidates: the same rows, bit for bit."""
    from_run = selection.select(one_loop.run_dir, epochs=1, drop_only=True, progress=False)
    from_fit = ella.select(
        one_loop.fitted, one_loop.train, one_loop.test, epochs=1, drop_only=True, progress=False
    )
    assert [r["dropped"] for r in from_fit["rows"]] == ["none", "conv", "gconv"]
    for a, b in zip(from_fit["rows"], from_run["rows"], strict=True):
        assert {k: v for k, v in a.items() if k != "seconds"} == {
            k: v for k, v in b.items() if k != "seconds"
        }


def loaders():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.arange(40) % 3
    train = DataLoader(TensorDataset(x[:32], y[:32]), batch_size=8, shuffle=True)
    return train, DataLoader(TensorDataset(x[32:], y[32:]), batch_size=8)


SCHEDULE = dict(epochs=2, n_epochs_burnin=1, marglik_frequency=1, ggn="mc", progress=False)


def test_the_greedy_selection_of_a_fitted_model_returns_the_selected_network():
    train, test = loaders()
    result = ella.fit(user_model(), train, test, **SCHEDULE)
    before = {k: v.clone() for k, v in result.model.state_dict().items()}
    record = ella.select(result, train, test, epochs=1, progress=False)
    assert record["finished"] and record["paths"] == ["fc", "conv", "gconv"]
    assert record["rounds"][0]["rows"][0]["dropped"] == "none"
    dropped = [p for p in record["paths"] if p not in record["kept"]]
    model = user_model()
    model.load_state_dict(record["selected"]["model"])  # the network it chose
    for name, tensor in model.named_parameters():  # e.g. layer1.paths.fc.pixel_maps.0.weight
        parts = name.split(".")
        if parts[1:2] == ["paths"] and parts[2] in dropped:
            assert not tensor.any(), name
    assert all(torch.equal(v, result.model.state_dict()[k]) for k, v in before.items())
    print(selection.format_path_selection(record))  # the table prints


def test_the_per_layer_selection_keeps_a_path_in_every_layer_and_zeroes_what_it_drops():
    train, test = loaders()
    result = ella.fit(user_model(), train, test, **SCHEDULE)
    record = ella.select(result, train, test, epochs=1, per_layer=True, progress=False)
    groups = record["paths"]
    assert record["per_layer"] and record["finished"]
    assert groups == selection.layer_groups(result.model)
    assert [r["dropped"] for r in record["rounds"][0]["rows"]] == ["none", *groups]
    layers = {g.rpartition(".")[0] for g in groups}
    assert {g.rpartition(".")[0] for g in record["kept"]} == layers  # a path in each layer
    for this in record["rounds"][1:]:  # a later round tries only layers with two paths left
        tried = [r["dropped"] for r in this["rows"][1:]]
        assert tried == selection.droppable(this["kept"], per_layer=True)
    model = user_model()
    model.load_state_dict(record["selected"]["model"])
    dropped = {g for g in groups if g not in record["kept"]}
    for name, tensor in model.named_parameters():  # layer1.paths.fc.pixel_maps.weight
        parts = name.split(".")
        if parts[1:2] == ["paths"] and f"{parts[0]}.{parts[2]}" in dropped:
            assert not tensor.any(), name


def test_what_cannot_be_selected_is_refused_before_any_work():
    train, test = loaders()
    result = ella.fit(user_model(), train, **{**SCHEDULE, "epochs": 1})
    with pytest.raises(ConfigError, match="needs the DataLoader"):
        ella.select(result, None)
    with pytest.raises(ConfigError, match="at least 1"):
        ella.select(result, train, epochs=0)
    map_config = dataclasses.replace(result.config, learn_priors=False)
    map_run = dataclasses.replace(result, config=map_config)
    with pytest.raises(ConfigError, match="MAP run"):
        ella.select(map_run, train)
