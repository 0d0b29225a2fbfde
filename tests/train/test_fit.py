"""ella.fit: the alternating job for a user's own model and DataLoader."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import ella
from ella import FitConfig, PriorLearner
from ella.engine.health import training_collapse
from ella.engine.schedule import cosine_lr, evidence_due
from ella.errors import ConfigError
from tests.user_models import user_model

SCHEDULE = dict(
    epochs=3, n_epochs_burnin=1, marglik_frequency=1, n_hypersteps=5, ggn="mc",
    lr=3e-3, progress=False,
)  # fmt: skip


def loaders():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.randint(3, (40,), generator=g)
    train = DataLoader(TensorDataset(x[:32], y[:32]), batch_size=8, shuffle=True)
    return train, DataLoader(TensorDataset(x[32:], y[32:]), batch_size=8)


def test_fit_learns_the_priors_of_a_users_model(tmp_path):
    train, test = loaders()
    result = ella.fit(user_model(), train, test, out=tmp_path / "run", **SCHEDULE)
    assert result.log_marglik_epochs == [1, 2, 3] and len(result.log_marglik) == 3
    assert len(set(result.prior_precision.values())) > 1  # moved apart from the common 0.01
    assert [r["layer"] for r in result.effective_parameters] == ["layer1", "layer2"]
    assert [r["module"] for r in result.effective_parameters_other] == ["head"]
    assert all("test_accuracy" in row for row in result.metrics)
    # the mean shares after every round; the last at the weights of the final report
    assert [h["epoch"] for h in result.shares_history] == [1, 2, 3]
    layers = result.effective_parameters
    final = {p: sum(row[p] for row in layers) / len(layers) for p in ("fc", "conv", "gconv")}
    last = {p: result.shares_history[-1][p] for p in final}
    assert last == pytest.approx(final, rel=1e-6)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["prior_variance"] == pytest.approx(result.prior_variance)
    assert saved["config"]["n_hypersteps"] == 5
    # the collapse check reads the same rows (None unless a 20-point fall)
    assert saved["training_collapse"] == training_collapse(result.metrics)
    assert all("train_accuracy" in row for row in result.metrics)
    # the figure ella train writes, from the result (a PNG, whole)
    png = result.plot(tmp_path / "shares.png").read_bytes()
    assert png.startswith(b"\x89PNG") and png.endswith(b"IEND\xaeB`\x82")


class SimulatedCrashError(Exception):
    pass


def test_resume_after_an_interruption_gives_the_uninterrupted_result(tmp_path):
    train, test = loaders()
    whole = ella.fit(user_model(), train, test, out=tmp_path / "a", **SCHEDULE)

    class StopsInEpoch2:  # a test loader that fails when evaluated after epoch 2
        calls = 0

        def __iter__(self):
            StopsInEpoch2.calls += 1
            if StopsInEpoch2.calls == 2:
                raise SimulatedCrashError
            return iter(test)

    with pytest.raises(SimulatedCrashError):
        ella.fit(user_model(), train, StopsInEpoch2(), out=tmp_path / "b", **SCHEDULE)
    assert json.loads((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()[0])["epoch"] == 1
    model = user_model()
    resumed = ella.fit(model, train, test, out=tmp_path / "b", resume=True, **SCHEDULE)
    assert resumed.prior_precision == whole.prior_precision
    assert resumed.log_marglik == whole.log_marglik and resumed.metrics == whole.metrics
    for a, b in zip(whole.model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("subset", [None, 16], ids=["every example", "subset rounds"])
def test_a_hand_written_loop_with_the_pieces_gives_the_same_priors_and_weights(subset):
    """The documented calls (PriorLearner.from_config, seed_epoch_order, penalty,
    evidence_round) in a loop of one's own reproduce ella.fit: its rounds (subset, control
    variate, update) are the learner's, not the loop's."""
    train, test = loaders()
    # the forward control: the training one reads traces a hand-written loop records itself
    schedule = {**SCHEDULE, "marglik_subset_size": subset, "subset_control": "forward"}
    result = ella.fit(user_model(), train, **schedule)
    if subset is not None:  # the rounds drew half the examples, with the control variate
        assert all(row["curvature_ratio"] > 0 for row in result.metrics if "log_marglik" in row)

    config = FitConfig(**schedule)
    model = user_model()
    priors = PriorLearner.from_config(model, 32, config)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    step, total = 0, config.epochs * len(train)
    for epoch in range(1, config.epochs + 1):
        ella.seed_epoch_order(train, config.seed, epoch - 1)  # fit's data order
        for x, y in train:
            for group in optimiser.param_groups:
                group["lr"] = cosine_lr(step, total, config.lr, config.lr_min)
            loss = F.cross_entropy(model(x), y) + priors.penalty()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            step += 1
        if evidence_due(config, epoch):
            priors.evidence_round(train.dataset, epoch)
    assert priors.prior_precision == result.prior_precision
    for a, b in zip(result.model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_regression_with_a_gaussian_likelihood():
    torch.manual_seed(0)
    x = torch.randn(64, 2)
    y = torch.stack([torch.sin(x[:, 0]), x[:, 1] ** 2], 1) + 0.1 * torch.randn(64, 2)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    result = ella.fit(
        model, loader, loader, likelihood="regression", sigma_noise=0.1, epochs=4,
        n_epochs_burnin=2, marglik_frequency=1, n_hypersteps=10, lr=1e-2, progress=False,
    )  # fmt: skip
    assert result.metrics[-1]["test_loss"] < result.metrics[0]["test_loss"]
    assert all(torch.isfinite(torch.tensor(result.log_marglik)))
    assert result.priors.evidence.likelihood == "regression"


def test_bad_options_and_loaders_are_refused_before_any_training():
    train, _ = loaders()
    with pytest.raises(ConfigError, match="classification, regression"):
        ella.fit(user_model(), train, likelihood="poisson")
    with pytest.raises(ConfigError, match="either config or keyword"):
        ella.fit(user_model(), train, config=FitConfig(), epochs=2)
    with pytest.raises(ConfigError, match="DataLoader"):
        ella.fit(user_model(), list(train))
    with pytest.raises(ConfigError, match="needs out"):
        ella.fit(user_model(), train, resume=True)
    # rounds on a subset: a Kronecker Hessian, a map-style dataset, training traces only
    # where the loop knows each batch's indices (not for an order of the user's own)
    own_order = DataLoader(train.dataset, batch_size=8, shuffle=True, generator=torch.Generator())
    with pytest.raises(ConfigError, match="subset_control='training'.*'forward'"):
        ella.fit(user_model(), own_order, marglik_subset_size=16)
    with pytest.raises(TypeError, match="DataLoader\\(shuffle=True\\)"):
        ella.seed_epoch_order(DataLoader(train.dataset, batch_size=8), 0, 0)  # no order to seed
    with pytest.raises(ConfigError, match="Kronecker Hessian; use hessian='kron', or marglik_su"):
        ella.fit(user_model(), train, hessian="diag", backend="asdl", marglik_subset_size=16)

    class Stream(torch.utils.data.IterableDataset):
        def __init__(self, data):
            self.data = data

        def __iter__(self):
            return iter(self.data)

        def __len__(self):
            return len(self.data)

    streamed = DataLoader(Stream(train.dataset), batch_size=8)
    with pytest.raises(ConfigError, match="map-style dataset.*marglik_subset_size=None"):
        ella.fit(user_model(), streamed, marglik_subset_size=16)


def test_a_result_without_relaxed_layers_has_no_figure_to_plot(tmp_path):
    from ella.train.fit import FitResult

    empty = FitResult(None, None, {}, {}, [], [], [], [])
    with pytest.raises(ConfigError, match="no per-layer shares to plot"):
        empty.plot(tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()
