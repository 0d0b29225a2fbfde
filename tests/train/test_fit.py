"""ella.fit: the alternating job for a user's own model and DataLoader."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import ella
from ella import FitConfig, PriorLearner
from ella.engine.health import training_collapse
from ella.engine.schedule import NoEvidenceRoundWarning, cosine_lr, evidence_due
from ella.errors import ConfigError, EllaError, InputDataError
from tests.strategies import ANY_VALUE
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
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoEvidenceRoundWarning)  # its rounds run: no warning
        result = ella.fit(user_model(), train, test, out=tmp_path / "run", **SCHEDULE)
    assert result.log_marglik_epochs == [1, 2, 3] and len(result.log_marglik) == 3
    assert result.priors_learned
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
    assert saved["priors_learned"] is True
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

        def __iter__(self):  # its first call: fit's check of its first batch
            StopsInEpoch2.calls += 1
            if StopsInEpoch2.calls == 3:
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


def changed_config() -> FitConfig:
    config = FitConfig(**SCHEDULE)
    config.epochs = 0  # set after it was built
    return config


def generator_of(loader):
    return (batch for batch in loader)


# one row per bad argument of ella.fit: id, fit's arguments (from the loaders and the run
# directory) beside the model, train_loader and SCHEDULE's options, the error, the words
# its message must hold
BAD_ARGUMENTS = [
    ("an empty list of test batches", lambda train, test, out: {"test_loader": []},
     ConfigError, ["test_loader has no batches (len(test_loader) == 0, a list)",
                   "test_loader=None"]),
    ("an empty tuple of test batches", lambda train, test, out: {"test_loader": ()},
     ConfigError, ["test_loader has no batches", "a tuple"]),
    ("a number as the test loader", lambda train, test, out: {"test_loader": 5}, ConfigError,
     ["test_loader must be None, a DataLoader or another iterable", "got the int 5"]),
    ("a dict as the test loader",
     lambda train, test, out: {"test_loader": {"x": test.dataset.tensors[0]}},
     ConfigError, ["test_loader must be", "the dict", "(iterating it gives its keys)"]),
    ("a string as the test loader", lambda train, test, out: {"test_loader": "test.pt"},
     ConfigError, ["the str 'test.pt' (iterating it gives its characters)"]),
    ("a data set as the test loader", lambda train, test, out: {"test_loader": test.dataset},
     ConfigError, ["got the TensorDataset", "wrap a data set in torch.utils.data.DataLoader"]),
    ("a generator of test batches",
     lambda train, test, out: {"test_loader": generator_of(test)}, ConfigError,
     ["test_loader is an iterator (generator), which gives its batches once", "every epoch"]),
    ("tensors, not pairs, as test batches",
     lambda train, test, out: {"test_loader": [x for x, _ in test]}, InputDataError,
     ["test_loader's first batch: test_loader must yield (inputs, targets) pairs",
      "got a Tensor"]),
    ("a label outside the classes in the first test batch",
     lambda train, test, out: {"test_loader": [(x, y + 3) for x, y in test]}, InputDataError,
     ["test_loader's first batch: labels must be in [0, 2] for 3 classes"]),
    ("a number as the training loader", lambda train, test, out: {"train_loader": 5},
     ConfigError, ["train_loader must be a DataLoader of (inputs, targets) batches",
                   "got the int 5"]),
    ("a data set as the training loader",
     lambda train, test, out: {"train_loader": train.dataset}, ConfigError,
     ["train_loader must be a DataLoader", "got the TensorDataset"]),
    ("a list of training batches", lambda train, test, out: {"train_loader": list(train)},
     ConfigError, ["train_loader must be a DataLoader (with a .dataset", "got a list",
                   "DataLoader(dataset, batch_size=..., shuffle=True)"]),
    ("overwrite='no'", lambda train, test, out: {"out": out, "overwrite": "no"}, ConfigError,
     ["overwrite must be True or False, got the str 'no' (a string, which Python reads as true",
      "pass overwrite=True or overwrite=False"]),
    ("resume='no'", lambda train, test, out: {"out": out, "resume": "no"}, ConfigError,
     ["resume must be True or False, got the str 'no'", "resume=False"]),
    ("overwrite=1", lambda train, test, out: {"out": out, "overwrite": 1}, ConfigError,
     ["overwrite must be True or False, got the int 1"]),
    ("resume and overwrite",
     lambda train, test, out: {"out": out, "resume": True, "overwrite": True}, ConfigError,
     ["give resume=True or overwrite=True, not both"]),
    ("resume without out", lambda train, test, out: {"resume": True}, ConfigError,
     ["resume=True needs out=<run directory>"]),
    ("overwrite without out", lambda train, test, out: {"overwrite": True}, ConfigError,
     ["overwrite=True needs out=<run directory>"]),
    ("a number as out", lambda train, test, out: {"out": 5}, ConfigError,
     ["out must be the path of a run directory (a str or a pathlib.Path), or out=None to write "
      "nothing; got the int 5"]),
    ("an empty out", lambda train, test, out: {"out": ""}, ConfigError,
     ["out='' names nothing", "out=None to write nothing"]),
    ("bytes as out", lambda train, test, out: {"out": b"run"}, ConfigError,
     ["out must be the path of a run directory", "got the bytes b'run'"]),
    ("an unknown option", lambda train, test, out: {"epoch": 3}, ConfigError,
     ["ella.fit has no option epoch=: did you mean epochs=?"]),
    ("learn_priors='no'", lambda train, test, out: {"learn_priors": "no"}, ConfigError,
     ["learn_priors must be true or false, got 'no'"]),
    ("progress='no'", lambda train, test, out: {"progress": "no"}, ConfigError,
     ["progress must be true or false, got 'no'"]),
    ("no epochs", lambda train, test, out: {"epochs": 0}, ConfigError,
     ["epochs must be at least 1"]),
    ("fractional epochs", lambda train, test, out: {"epochs": 2.5}, ConfigError,
     ["epochs must be an integer"]),
    ("a negative burn-in", lambda train, test, out: {"n_epochs_burnin": -1}, ConfigError,
     ["n_epochs_burnin must be at least 0"]),
    ("no evidence frequency", lambda train, test, out: {"marglik_frequency": 0}, ConfigError,
     ["marglik_frequency must be at least 1"]),
    ("a negative learning rate", lambda train, test, out: {"lr": -1e-3}, ConfigError,
     ["lr must be greater than 0"]),
    ("an infinite learning rate", lambda train, test, out: {"lr": math.inf}, ConfigError,
     ["lr must be a finite number"]),
    ("no noise", lambda train, test, out: {"sigma_noise": 0.0}, ConfigError,
     ["sigma_noise must be greater than 0"]),
    ("a negative seed", lambda train, test, out: {"seed": -1}, ConfigError,
     ["seed must be at least 0"]),
    ("a config changed after it was built",
     lambda train, test, out: {"config": changed_config()}, ConfigError,
     ["epochs must be at least 1"]),
    ("a dict as the config", lambda train, test, out: {"config": {"epochs": 2}}, ConfigError,
     ["config must be an ella.FitConfig, got dict", "ella.fit(..., **options)"]),
    ("a model without parameters", lambda train, test, out: {"model": nn.Flatten()},
     ConfigError, ["model (Flatten) has no trainable parameters"]),
]  # fmt: skip


def refused_before_any_work(arguments: dict, out: Path) -> EllaError:
    """``ella.fit(**arguments)`` (with SCHEDULE's options unless a config is given), which
    must raise an EllaError before any work: no training step (a forward in training
    mode), the model's weights as they were, and nothing written at ``out``."""
    model = arguments["model"]
    before = [p.detach().clone() for p in model.parameters()]
    trained = []
    model.register_forward_hook(lambda module, args, output: trained.append(module.training))
    if "config" not in arguments:
        arguments = {**SCHEDULE, **arguments}
    with pytest.raises(EllaError) as caught:
        ella.fit(**arguments)
    assert not any(trained)  # at most the checks' forwards, in evaluation mode
    for a, b in zip(before, model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not out.exists()
    return caught.value


@pytest.mark.parametrize(
    "make, error, words", [pytest.param(*row[1:], id=row[0]) for row in BAD_ARGUMENTS]
)
def test_every_argument_of_fit_is_checked_before_any_work(tmp_path, make, error, words):
    train, test = loaders()
    out = tmp_path / "run"
    arguments = {"model": user_model(), "train_loader": train, **make(train, test, out)}
    refusal = refused_before_any_work(arguments, out)
    assert isinstance(refusal, error)
    for word in words:
        assert word in str(refusal)


#: a value of every kind a Python caller may pass, bytes among them (a path's other type)
ANY_ARGUMENT = st.one_of(ANY_VALUE, st.binary(max_size=4))


@pytest.mark.parametrize("name", ["test_loader", "out", "resume", "overwrite"])
def test_a_generated_value_of_an_argument_is_taken_or_refused_by_name_before_work(tmp_path, name):
    train, _ = loaders()
    out = tmp_path / "run"

    def takes(value) -> bool:  # the values that would train
        if name == "test_loader":
            return value is None
        if name == "out":
            return value is None or (isinstance(value, str) and bool(value.strip()))
        return value is False

    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @given(ANY_ARGUMENT)
    def check(value):
        if takes(value):
            return
        refusal = refused_before_any_work(
            {"model": user_model(), "train_loader": train, name: value}, out
        )
        assert name in str(refusal), (value, str(refusal))

    check()


def test_a_bad_flag_leaves_a_finished_run_as_it_was(tmp_path):
    """``overwrite="no"`` was read as true and rewrote a finished run's results."""
    train, test = loaders()
    out = tmp_path / "run"
    fast = {**SCHEDULE, "epochs": 1}
    ella.fit(user_model(), train, test, out=out, **fast)
    files = {path.name: path.read_bytes() for path in out.iterdir()}
    assert "results.json" in files
    for flags in ({"overwrite": "no"}, {"resume": "no"}, {"overwrite": 0}, {"resume": "False"}):
        with pytest.raises(ConfigError, match="must be True or False"):
            ella.fit(user_model(), train, test, out=out, **flags, **fast)
        assert {path.name: path.read_bytes() for path in out.iterdir()} == files


def test_fit_warns_before_work_where_no_evidence_round_learns_the_priors(tmp_path):
    train, test = loaders()
    model = user_model()
    trained = []
    model.register_forward_hook(lambda module, args, output: trained.append(module.training))
    with warnings.catch_warnings():  # a warning turned into an error stops fit before work
        warnings.simplefilter("error", NoEvidenceRoundWarning)
        with pytest.raises(NoEvidenceRoundWarning):
            ella.fit(model, train, test, epochs=1, ggn="mc", progress=False)
    assert not any(trained)

    with pytest.warns(NoEvidenceRoundWarning) as said:
        result = ella.fit(
            model, train, test, out=tmp_path / "run", epochs=1, ggn="mc", progress=False
        )
    assert len(said) == 1 and said[0].filename == __file__  # the caller's line
    assert str(said[0].message) == (
        "no evidence round: epochs=1 ends before the first round, after epoch 4 "
        "(n_epochs_burnin=4, marglik_frequency=2), so the evidence learns nothing: the prior "
        "precisions keep their initial value (prior_precision=0.01), and the network is "
        "trained by MAP alone; give epochs=4 or more, or n_epochs_burnin=1 and "
        "marglik_frequency=1, or learn_priors=False to train a MAP network by intent"
    )
    assert not result.priors_learned and result.log_marglik == []
    assert all(v == pytest.approx(0.01) for v in result.prior_precision.values())
    assert len(result.metrics) == 1  # it trained as asked
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["priors_learned"] is False

    # MAP by intent says nothing, and says so in the result
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoEvidenceRoundWarning)
        mapped = ella.fit(user_model(), train, epochs=1, learn_priors=False, progress=False)
    assert not mapped.priors_learned


def test_a_result_is_plotted_only_to_a_file(tmp_path):
    from ella.train.fit import FitResult

    result = FitResult(None, None, {}, {}, [{"layer": "layer1"}], [], [], [])
    for path, words in ((5, "path must be the path of the PNG file to write"),
                        ("", "path='' names nothing"), (tmp_path, "is a directory")):  # fmt: skip
        with pytest.raises(ConfigError, match=words):
            result.plot(path)
    assert list(tmp_path.iterdir()) == []
