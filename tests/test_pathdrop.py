"""ella.pathdrop: the evidence of a network without some tensors against the exact evidence
of a smaller Bayesian linear regression; the candidates, their file and the CLI."""

import json
import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella import pathdrop
from ella.cli import main
from ella.errors import ConfigError, RunDirectoryError
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.pathdrop import kept_log_evidence
from ella.rundir import PATH_DROPS, holds_run
from tests.marglik.test_evidence import blr_log_evidence


class TwoBlocks(nn.Module):
    """``y = a(x[:, :d_a]) + b(x[:, d_a:])``: two weight tensors, dropped one at a time."""

    def __init__(self, d_a: int, d_b: int):
        super().__init__()
        self.d_a = d_a
        self.a = nn.Linear(d_a, 1, bias=False)
        self.b = nn.Linear(d_b, 1, bias=False)

    def forward(self, x):
        return self.a(x[:, : self.d_a]) + self.b(x[:, self.d_a :])


def orthogonal_regression(n=30, d_a=3, d_b=4, sigma=0.4):
    """Inputs whose two blocks of columns are orthogonal (``X_a^T X_b = 0``), so the exact
    posterior is block-diagonal as the Kronecker-factored one assumes, and targets."""
    g = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(n, d_a + d_b, generator=g))
    X = q * (1 + 4 * torch.rand(d_a + d_b, generator=g))  # columns of different sizes
    y = X @ torch.randn(d_a + d_b, generator=g) + sigma * torch.randn(n, generator=g)
    return X, y[:, None], sigma


def test_kept_log_evidence_is_the_evidence_of_the_smaller_regression(float64):
    """Block ``b`` at zero and block ``a`` at its posterior mean for the precision that
    maximises the exact evidence of the regression on ``X_a`` alone: the evidence without
    ``b``, each precision at its optimum, is that maximum."""
    from scipy.optimize import minimize_scalar

    X, y, sigma = orthogonal_regression()
    d_a = 3
    X_a = X[:, :d_a]
    best = minimize_scalar(
        lambda u: -float(blr_log_evidence(X_a, y, sigma, math.exp(u))),
        bounds=(-8, 8),
        method="bounded",
        options={"xatol": 1e-10},
    )
    delta = math.exp(best.x)
    model = TwoBlocks(d_a, X.shape[1] - d_a)
    with torch.no_grad():
        precision = X_a.T @ X_a / sigma**2 + delta * torch.eye(d_a)
        model.a.weight.copy_(torch.linalg.solve(precision, X_a.T @ y[:, 0] / sigma**2)[None])
        model.b.weight.zero_()
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "tensor"), likelihood="regression", sigma_noise=sigma
    )
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=8))
    kept = kept_log_evidence(evidence, [False, True])
    assert kept == pytest.approx(-best.fun, rel=1e-6)
    # nothing dropped: the evidence at the optimal precisions, as LaplaceEvidence computes it
    everything = evidence.log_marginal_likelihood(evidence.optimal_log_prior())
    assert kept_log_evidence(evidence, [False, False]) == pytest.approx(float(everything), rel=1e-9)


def write_config(directory, **values):
    directory.mkdir()
    config = {"learn_priors": True, "prior_mean": "zero", "paths": ["fc", "conv", "gconv"]}
    (directory / "config.json").write_text(json.dumps({**config, **values}))
    return directory


@pytest.mark.parametrize(
    ("values", "epochs", "error", "match"),
    [
        ({"learn_priors": False}, 5, RunDirectoryError, "MAP run"),
        ({"paths": ["gconv"]}, 5, ConfigError, "two or more paths"),
        ({"prior_mean": "init"}, 5, ConfigError, "prior-mean init"),
        ({}, 0, ConfigError, "at least 1"),
    ],
)
def test_check_droppable_refuses_what_it_cannot_drop(tmp_path, values, epochs, error, match):
    run = write_config(tmp_path / "run", **values)
    with pytest.raises(error, match=match):
        pathdrop.drop_each_path(run, epochs)


def test_drop_each_path_saves_every_candidate_and_resumes(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run", paths=["conv", "gconv"])
    evidence = {None: -100.0, "conv": -90.0, "gconv": -130.0}
    calls = []

    def fake(run_dir, drop, epochs, data_dir=None, progress=False):
        calls.append(drop)
        if drop == "gconv" and len(calls) == 3:
            raise KeyboardInterrupt  # interrupted at the last candidate
        return {"dropped": drop or "none", "test_accuracy": 0.5, "log_evidence": evidence[drop]}

    monkeypatch.setattr(pathdrop, "train_on_without", fake)
    with pytest.raises(KeyboardInterrupt):
        pathdrop.drop_each_path(run, 3)
    saved = json.loads((run / PATH_DROPS).read_text())
    assert [r["dropped"] for r in saved["rows"]] == ["none", "conv"]
    result = pathdrop.drop_each_path(run, 3)  # only gconv is trained again
    assert calls == [None, "conv", "gconv", "gconv"]
    assert [r["dropped"] for r in result["rows"]] == ["none", "conv", "gconv"]
    pathdrop.drop_each_path(run, 4)  # other epochs: nothing reused
    assert calls[4:] == [None, "conv", "gconv"]
    text = pathdrop.format_path_drops(result)
    assert "the evidence would drop: CONV (most: CONV, +10 nats)" in text
    assert "\ngconv           50.00         -130.0       -30.0\n" in text
    assert holds_run(run)  # path_drops.json counts as a run output


def test_format_path_drops_says_when_every_path_is_kept():
    rows = [
        {"dropped": "none", "test_accuracy": 0.9, "log_evidence": -10.0},
        {"dropped": "conv", "test_accuracy": 0.8, "log_evidence": -20.0},
    ]
    text = pathdrop.format_path_drops({"epochs": 2, "rows": rows})
    assert text.endswith("the evidence keeps every path")


@pytest.mark.slow  # trains a small run
def test_report_drop_paths_trains_each_candidate(tmp_path, capsys):
    from ella.train import train
    from tests.train.test_loop import tiny_config

    out = tmp_path / "run"
    train(tiny_config(epochs=2), out)
    assert main(["report", str(out), "--drop-paths", "--drop-epochs", "1"]) == 0
    text = capsys.readouterr().out
    assert "trained on for 1 epochs" in text and "written:" in text
    rows = json.loads((out / PATH_DROPS).read_text())["rows"]
    assert [r["dropped"] for r in rows] == ["none", "fc", "conv", "gconv"]
    assert all(math.isfinite(r["log_evidence"]) for r in rows)
    assert holds_run(out)
    assert main(["report", str(out), "--drop-paths", "--drop-epochs", "0"]) != 0
    assert "at least 1" in capsys.readouterr().err
