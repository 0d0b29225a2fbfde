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
from ella.io import load_torch
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.pathdrop import kept_log_evidence
from ella.rundir import (
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_STATE,
    holds_run,
)
from tests.data.test_datasets import SHARED
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


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_train_on_finds_the_data_where_the_run_found_it(tmp_path, monkeypatch):
    """A run on data files in ``--data-dir``: training it on, given no data directory,
    reads them there (not from ``$ELLA_DATA`` or the default cache, empty here)."""
    from ella.train import train
    from tests.train.test_loop import tiny_config

    out = tmp_path / "run"
    train(tiny_config(epochs=2, dataset="mnist", data_dir=str(SHARED)), out)
    monkeypatch.setenv("ELLA_DATA", str(tmp_path / "empty"))
    row, _ = pathdrop.train_on(out, ["fc", "layer1.conv"], 1)
    assert row["kept"] == ["conv", "gconv"] and math.isfinite(row["log_evidence"])


#: the log evidence a fake candidate gets, by the paths it has at zero
SELECTION_EVIDENCE = {
    (): -100.0,
    ("fc",): -90.0,
    ("conv",): -95.0,
    ("gconv",): -120.0,
    ("conv", "fc"): -80.0,
    ("fc", "gconv"): -110.0,
}


#: the class-frequency model of the fake runs
NULL = {"log_likelihood": -1000.0, "log_evidence": -1010.0}


@pytest.fixture(autouse=True)
def fake_null_model(monkeypatch):
    """The fake runs have no data: their class-frequency model is ``NULL``."""
    monkeypatch.setattr(pathdrop, "null_model", lambda run_dir, data_dir=None: NULL)


def fake_train_on(calls, interrupt_at=None, evidence=SELECTION_EVIDENCE, likelihood=None):
    """A :func:`ella.pathdrop.train_on` that records ``(dropped, start weight)`` per call and
    returns the weight it ends with, a number unique to the call; the training log
    likelihood is ``likelihood[dropped]``, else -10."""

    def train_on(run_dir, dropped, epochs, data_dir=None, progress=False, start=None):
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        weight = None if start is None else float(start["model"]["w"])
        calls.append((tuple(sorted(dropped)), weight))
        kept = [p for p in pathdrop.relaxed_paths(run_dir) if p not in dropped]
        row = {
            "kept": kept,
            "test_accuracy": 0.5,
            "test_nll": 1.0,
            "log_evidence": evidence[tuple(sorted(dropped))],
            "log_likelihood": (likelihood or {}).get(tuple(sorted(dropped)), -10.0),
            "shares": {p: 100.0 / len(kept) for p in kept},
        }
        end = {"model": {"w": torch.tensor(float(len(calls)))}, "log_prior": torch.zeros(3)}
        return row, end

    return train_on


def test_select_paths_drops_greedily_and_starts_each_round_from_the_winner(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls))
    record = pathdrop.select_paths(run, 3)
    # round 1 from the run; FC wins (call 2); round 2 from its weights; CONV wins (call 6)
    assert calls == [
        ((), None),
        (("fc",), None),
        (("conv",), None),
        (("gconv",), None),
        (("fc",), 2.0),
        (("conv", "fc"), 2.0),
        (("fc", "gconv"), 2.0),
    ]
    assert [r["winner"] for r in record["rounds"]] == ["fc", "conv"]
    assert record["kept"] == ["gconv"] and record["finished"]
    selected = load_torch(run / PATH_SELECTION_STATE)
    assert float(selected["model"]["w"]) == 6.0 and selected["kept"] == ["gconv"]
    assert not (run / PATH_SELECTION_CANDIDATE).exists()
    text = pathdrop.format_path_selection(record)
    assert "round 2 (network CONV+GCONV):" in text and "the evidence drops CONV" in text
    assert "selected: GCONV; test accuracy 50.00% (the whole network trained on alike: " in text
    assert "log evidence -80.0 (+20.0)" in text
    assert holds_run(run)


def test_drop_each_path_reuses_the_first_round_of_a_selection(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on([]))
    record = pathdrop.select_paths(run, 3)

    def not_again(*args, **kwargs):
        raise AssertionError("a candidate of the selection's first round was trained again")

    monkeypatch.setattr(pathdrop, "train_on_without", not_again)
    result = pathdrop.drop_each_path(run, 3)
    assert result["rows"] == record["rounds"][0]["rows"]
    trained = []
    monkeypatch.setattr(
        pathdrop,
        "train_on_without",
        lambda run_dir, drop, epochs, data_dir=None, progress=False: (
            trained.append(drop) or {"dropped": drop or "none", "log_evidence": -1.0}
        ),
    )
    pathdrop.drop_each_path(run, 4)  # other epochs than the selection's: trained
    assert trained == [None, "fc", "conv", "gconv"]


def test_select_paths_resumes_within_a_round(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls, interrupt_at=6))
    with pytest.raises(KeyboardInterrupt):  # after round 2's control and CONV candidate
        pathdrop.select_paths(run, 3)
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls))
    record = pathdrop.select_paths(run, 3)
    assert calls[6:] == [(("fc", "gconv"), 2.0)]  # the round's start read back from the file
    assert float(load_torch(run / PATH_SELECTION_STATE)["model"]["w"]) == 6.0
    assert record["kept"] == ["gconv"]
    assert pathdrop.select_paths(run, 3) == record and len(calls) == 7  # finished: no work
    pathdrop.select_paths(run, 4)  # other epochs: started afresh
    assert len(calls) == 14


def test_select_paths_starts_a_round_again_without_its_best_weights(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls, interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        pathdrop.select_paths(run, 3)
    (run / PATH_SELECTION_CANDIDATE).unlink()
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls))
    pathdrop.select_paths(run, 3)
    assert calls[2:6] == [((), None), (("fc",), None), (("conv",), None), (("gconv",), None)]


def test_select_paths_stops_when_the_control_wins(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run", paths=["conv", "gconv"])
    calls = []
    evidence = {(): -10.0, ("conv",): -20.0, ("gconv",): -30.0}
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls, evidence=evidence))
    record = pathdrop.select_paths(run, 2)
    assert len(calls) == 3 and record["kept"] == ["conv", "gconv"]
    assert [r["winner"] for r in record["rounds"]] == ["none"]
    assert "the evidence keeps every path" in pathdrop.format_path_selection(record)
    assert float(load_torch(run / PATH_SELECTION_STATE)["model"]["w"]) == 1.0


@pytest.mark.slow  # trains a small run and a selection of its paths
def test_report_select_paths_leaves_the_selected_network(tmp_path, capsys):
    from ella.train import train
    from ella.train.runs import load_run
    from tests.train.test_loop import tiny_config

    out = tmp_path / "run"
    train(tiny_config(epochs=2, paths=("conv", "gconv")), out)
    assert main(["report", str(out), "--select-paths", "--drop-epochs", "1"]) == 0
    text = capsys.readouterr().out
    assert "round 1 (network CONV+GCONV):" in text and "\nselected: " in text
    record = json.loads((out / PATH_SELECTION).read_text())
    assert record["finished"] and record["rounds"][0]["rows"][0]["dropped"] == "none"
    selected = load_torch(out / PATH_SELECTION_STATE)
    net = load_run(out).net
    net.load_state_dict(selected["model"])  # the run's network, with the selected weights
    groups = PriorStructure(net, "layer_path").tensor_groups
    params = [p for p in net.parameters() if p.requires_grad]
    assert len(selected["log_prior"]) == len(PriorStructure(net, "layer_path").names)
    for group, p in zip(groups, params, strict=True):
        path = group.rpartition(".")[2]
        if path in ("conv", "gconv"):  # a dropped path's weights are zero, a kept one's not
            assert bool(p.any()) == (path in selected["kept"])
    assert not (out / PATH_SELECTION_CANDIDATE).exists() and holds_run(out)
    assert main(["report", str(out)]) == 0  # a plain report shows the selection again
    assert "\nselected: " in capsys.readouterr().out


def test_select_paths_passes_over_a_collapsed_candidate(tmp_path, monkeypatch):
    run = write_config(tmp_path / "run")
    calls = []
    # round 2's best candidate, CONV and FC at zero, keeps 40% of its control's (FC at zero)
    # gain over the class frequencies, 0.4 * 990: it has collapsed
    likelihood = {("fc",): -10.0, ("conv", "fc"): NULL["log_likelihood"] + 0.4 * 990}
    monkeypatch.setattr(pathdrop, "train_on", fake_train_on(calls, likelihood=likelihood))
    record = pathdrop.select_paths(run, 3)
    assert [r["winner"] for r in record["rounds"]] == ["fc", "none"]
    assert record["kept"] == ["conv", "gconv"] and record["null"] == NULL
    assert float(load_torch(run / PATH_SELECTION_STATE)["model"]["w"]) == 5.0  # round 2's control
    text = pathdrop.format_path_selection(record)
    assert "-80.0       +10.0  0/0/100  collapsed" in text
    assert "uniform Dirichlet prior): log evidence -1010.0" in text
    assert "prefers the class frequencies" not in text  # -90 > -1010


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"learn_priors": False}, "needs learned priors"),
        ({"prior_mean": "init"}, "--prior-mean zero"),
        ({"paths": ("gconv",)}, "two or more --paths"),
        ({"model": "cnn"}, "--model mixer"),
    ],
)
def test_train_select_paths_refuses_what_it_cannot_select_before_any_work(values, match):
    from ella.train import TrainConfig

    with pytest.raises(ConfigError, match=match):
        TrainConfig(select_paths=True, **values)
    TrainConfig(select_paths=False, **values)  # without --select-paths each is a valid run


@pytest.mark.slow  # trains a small run and selects its paths
def test_train_select_paths_selects_after_training(tmp_path, capsys):
    from tests.test_cli import TINY

    out = tmp_path / "run"
    args = ["train", "--out", str(out), *TINY, "--paths", "conv", "gconv"]
    assert main([*args, "--select-paths", "--select-epochs", "1"]) == 0
    text = capsys.readouterr().out
    assert "round 1 (network CONV+GCONV):" in text and "\nselected: " in text
    assert json.loads((out / PATH_SELECTION).read_text())["finished"]
    assert (out / PATH_SELECTION_STATE).is_file()


def test_collapsed_is_less_than_half_of_the_controls_gain_over_the_class_frequencies():
    null, control = {"log_likelihood": -2300.0}, {"log_likelihood": -300.0}  # gain 2000
    assert not pathdrop.collapsed({"log_likelihood": -1300.0}, control, null)  # keeps 1000
    assert pathdrop.collapsed({"log_likelihood": -1301.0}, control, null)
    assert pathdrop.collapsed({"log_likelihood": -2300.0}, control, null)
    assert not pathdrop.collapsed({"log_likelihood": -100.0}, control, null)  # fits better
