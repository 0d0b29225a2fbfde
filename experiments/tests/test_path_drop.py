"""experiments.path_drop: the Savage-Dickey Bayes factor of dropping a path, checked against
the exact evidence of nested Bayesian linear regressions, and the measured fit change."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.errors import ConfigError, RunDirectoryError
from ella.marglik import LaplaceEvidence, PriorStructure
from experiments import path_drop
from tests.marglik.test_evidence import blr_log_evidence
from tests.marglik.test_kept import TwoBlocks, orthogonal_regression
from tests.train.test_loop import tiny_config


@pytest.mark.parametrize("backend", ["native", "asdl"])
def test_log_bayes_factor_is_the_exact_evidence_ratio_of_nested_regressions(float64, backend):
    X, y, sigma = orthogonal_regression()
    d_a = 3
    model = TwoBlocks(d_a, X.shape[1] - d_a)
    delta = {"a": 0.7, "b": 2.5}
    with torch.no_grad():  # each block's exact posterior mean (the blocks are orthogonal)
        for name, cols in (("a", X[:, :d_a]), ("b", X[:, d_a:])):
            precision = cols.T @ cols / sigma**2 + delta[name] * torch.eye(cols.shape[1])
            mean = torch.linalg.solve(precision, cols.T @ y[:, 0] / sigma**2)
            getattr(model, name).weight.copy_(mean[None])
    prior = PriorStructure(model, "tensor")
    evidence = LaplaceEvidence(
        model, prior, likelihood="regression", backend=backend, sigma_noise=sigma
    )
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=8))
    log_delta = torch.tensor([math.log(delta["a"]), math.log(delta["b"])])
    terms = path_drop.drop_terms(evidence, log_delta, ["keep", "dropped"])

    # the evidence with a precision per block: X's columns scaled by delta^-1/2, precision 1
    scales = torch.tensor([delta["a"]] * d_a + [delta["b"]] * (X.shape[1] - d_a)) ** -0.5
    full = blr_log_evidence(X * scales, y, sigma, 1.0)
    reduced = blr_log_evidence(X[:, :d_a], y, sigma, delta["a"])
    assert terms["dropped"]["log_bayes_factor"] == pytest.approx(float(reduced - full), rel=1e-6)
    row = terms["dropped"]
    assert row["log_bayes_factor"] == pytest.approx(row["occam"] + row["scatter"] + row["fit"])
    assert row["occam"] > 0 and row["scatter"] > 0 > row["fit"]
    # at the MAP of a linear-Gaussian model the predicted fit change is exact
    noise = torch.distributions.Normal(0.0, sigma)
    with torch.no_grad():
        trained = noise.log_prob(y - model(X)).sum()
        reduced_fit = noise.log_prob(y - model.a(X[:, :d_a])).sum()
    assert row["fit"] == pytest.approx(float(reduced_fit - trained), rel=1e-6)
    # the laplace evidence itself is exact here, so the factor is the evidence difference
    laplace = float(evidence.log_marginal_likelihood(log_delta))
    assert laplace == pytest.approx(float(full), rel=1e-6)


def test_drop_terms_refuses_a_dense_hessian_and_wrong_groups(float64):
    X, y, sigma = orthogonal_regression()
    model = TwoBlocks(3, 4)
    evidence = LaplaceEvidence(
        model,
        PriorStructure(model, "tensor"),
        likelihood="regression",
        structure="full",
        backend="asdl",
        sigma_noise=sigma,
    )
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=8))
    with pytest.raises(ConfigError, match="kron"):
        path_drop.drop_terms(evidence, torch.zeros(2), ["a", "b"])


def test_dropped_fit_change_is_measured_and_the_weights_are_restored():
    g = torch.Generator().manual_seed(0)
    model = nn.Linear(5, 4)
    x, y = torch.randn(20, 5, generator=g), torch.randint(0, 4, (20,), generator=g)
    before = [p.detach().clone() for p in model.parameters()]
    trained = path_drop.log_likelihood(model, x, y)
    change = path_drop.dropped_fit_change(model, x, y, list(model.parameters()))
    # all weights at zero: every class equally likely
    assert change == pytest.approx(-20 * math.log(4) - trained, rel=1e-5)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


@pytest.mark.slow  # trains a small run
def test_analyse_run_gives_every_layer_and_path(tmp_path, capsys):
    from ella.train import train

    train(tiny_config(epochs=2), tmp_path / "learned")
    (rows,) = path_drop.main([str(tmp_path / "learned"), "--images", "24"]).values()
    assert [(r["layer"], r["path"]) for r in rows][:3] == [
        ("layer1", "fc"),
        ("layer1", "conv"),
        ("layer1", "gconv"),
    ]
    assert all(math.isfinite(r[k]) for r in rows for k in (*path_drop.TERMS, "measured_fit"))
    assert "| layer1 | conv |" in capsys.readouterr().out
    (retrained,) = path_drop.main(
        [str(tmp_path / "learned"), "--retrain-epochs", "1", "--retrain-only"]
    ).values()
    assert [r["dropped"] for r in retrained] == ["none", "fc", "conv", "gconv"]
    assert all(math.isfinite(r["log_evidence"]) for r in retrained)
    text = capsys.readouterr().out
    assert "| gconv |" in text and "learned, trained on 1 epochs" in text
    train(tiny_config(epochs=1, learn_priors=False), tmp_path / "map")
    with pytest.raises(RunDirectoryError, match="MAP run"):
        path_drop.main([str(tmp_path / "map")])
