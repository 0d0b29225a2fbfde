"""The Python API refuses bad inputs with an ``EllaError`` that names the problem and the fix,
before anything is trained: ``ella.fit``'s first batch, ``n_data`` wherever it enters, and
``PriorLearner.load_state_dict``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

import ella
from ella import FitConfig, PriorLearner
from ella.errors import CheckpointError, ConfigError, EllaError, InputDataError
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.backends import MAX_N_DATA, check_n_data
from ella.train.fit_inputs import check_first_batch
from tests.tiny_fit import FAST, K, N, inputs, labels, loader, tiny_model


class Items(Dataset):
    """A data set whose items are whatever ``item(i)`` returns."""

    def __init__(self, item):
        self.item = item

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        return self.item(i)


def fewer_labels(batch):
    x, y = zip(*batch, strict=True)
    return torch.stack(x), torch.stack(y)[:-1]


def labels_as_list(batch):
    x, y = zip(*batch, strict=True)
    return torch.stack(x), [int(v) for v in y]


# one row per bad first batch: id, the loader, the model's outputs, fit's options,
# the words the message must contain
BAD_BATCHES = [
    ("float labels", lambda: loader(labels().float()), K, {},
     ["labels must be integers (int64)", "torch.float32", "y.long()"]),
    ("fractional labels", lambda: loader(labels() + 0.5), K, {},
     ["labels must be integers (int64)", "not whole numbers"]),
    ("int32 labels", lambda: loader(labels().int()), K, {},
     ["labels must be integers (int64)", "torch.int32", "y.long()"]),
    ("label above the classes", lambda: loader(labels() + 3), K, {},
     ["labels must be in [0, 2] for 3 classes", "from 3 to 5", "the model's output width"]),
    ("negative label", lambda: loader(labels() - 1), K, {},
     ["labels must be in [0, 2]", "from -1 to 1"]),
    ("one-hot labels", lambda: loader(F.one_hot(labels(), K).float()), K, {},
     ["one class index per example", "(4, 3)", "y.argmax(-1)"]),
    ("a column of labels", lambda: loader(labels()[:, None]), K, {},
     ["one class index per example", "(4, 1)", "y.view(-1)"]),
    ("fewer labels than images",
     lambda: DataLoader(TensorDataset(inputs(), labels()), batch_size=4,
                        collate_fn=fewer_labels), K, {},
     ["(4, 4) inputs but (3,) targets", "one target per input"]),
    ("labels not a tensor",
     lambda: DataLoader(TensorDataset(inputs(), labels()), batch_size=4,
                        collate_fn=labels_as_list), K, {},
     ["targets must be a tensor", "list"]),
    ("not a pair",
     lambda: DataLoader(TensorDataset(inputs(), labels(), labels()), batch_size=4), K, {},
     ["(inputs, targets) pairs", "list of 3 entries"]),
    ("a dict per item", lambda: DataLoader(Items(lambda i: {"x": inputs()[i], "y": i % K}),
                                           batch_size=4), K, {},
     ["(inputs, targets) pairs", "dict"]),
    ("no batches", lambda: loader(labels(), drop_last=True, batch_size=16), K, {},
     ["yields no batches", "drop_last"]),
    ("one output per example", lambda: loader(labels()), 1, {"likelihood": "regression"},
     ["regression needs targets of the outputs' shape (4, 1)", "got (4,)", "y.view"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "make_loader, outputs, options, words",
    [pytest.param(*row[1:], id=row[0]) for row in BAD_BATCHES],
)
def test_fit_refuses_a_bad_first_batch_before_any_training_step(
    make_loader, outputs, options, words
):
    model = tiny_model(outputs)
    before = [p.detach().clone() for p in model.parameters()]
    trained = []  # a forward in training mode: a training step began
    model.register_forward_hook(lambda module, args, out: trained.append(module.training))
    rng = torch.get_rng_state()
    with pytest.raises(InputDataError) as caught:
        ella.fit(model, make_loader(), **FAST, **options)
    for word in words:
        assert word in str(caught.value)
    assert trained == [False] * len(trained)  # at most the check's forward, in eval mode
    assert model.training  # the check's eval mode undone
    for a, b in zip(before, model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.equal(torch.get_rng_state(), rng)


def test_fit_with_good_batches_still_trains():
    model = tiny_model()
    trained = []
    model.register_forward_hook(lambda module, args, out: trained.append(module.training))
    result = ella.fit(model, loader(labels(), shuffle=True), **FAST)
    assert trained.count(True) >= 2 and len(result.metrics) == 1


def test_the_first_batch_check_leaves_torchs_generator_and_the_model_as_they_were():
    model = tiny_model()
    rng = torch.get_rng_state()
    check_first_batch(model, loader(labels(), shuffle=True), FitConfig())
    assert torch.equal(torch.get_rng_state(), rng) and model.training


class Stream(IterableDataset):
    """A stream of (x, y) pairs without ``__len__``."""

    def __iter__(self):
        return iter(zip(inputs(), labels(), strict=True))


def label_in_batch(batch: int, value: int = 12) -> torch.Tensor:
    """:func:`labels` with ``value`` in the first example of ``batch`` (batches of 4)."""
    y = labels().clone()
    y[4 * batch] = value
    return y


# one row per loader that fit refuses only once it is running, or before its first batch:
# id, fit's arguments (model, loaders, options), the error, the words of the message
def items(y: torch.Tensor) -> DataLoader:
    """A loader of a map-style data set that is no TensorDataset (its labels are read as
    its batches are)."""
    return DataLoader(Items(lambda i: (inputs()[i], y[i])), batch_size=4)


BAD_LOADERS = [
    ("a label outside the classes after the first batch",
     lambda: (tiny_model(), items(label_in_batch(1)), None, {}), InputDataError,
     ["train_loader's batch 2 in epoch 1", "labels must be in [0, 2] for 3 classes",
      "from 0 to 12", "the model's output width", "training stopped there"]),
    ("a label outside the classes in a TensorDataset's later batch",
     lambda: (tiny_model(), loader(label_in_batch(1)), None, {}), InputDataError,
     ["train_loader's data set: labels must be in [0, 2]", "from 0 to 12"]),
    ("a test label outside the classes",
     lambda: (tiny_model(), loader(labels()), items(label_in_batch(1, -1)), {}),
     InputDataError, ["test_loader's batch 2", "labels must be in [0, 2]", "from -1 to 2"]),
    ("a test label outside the classes in a TensorDataset",
     lambda: (tiny_model(), loader(labels()), loader(label_in_batch(0, 3)), {}),
     InputDataError, ["test_loader's data set: labels must be in [0, 2]", "from 0 to 3"]),
    ("an iterable data set without len",
     lambda: (tiny_model(), DataLoader(Stream(), batch_size=4), None,
              {"marglik_subset_size": None}), ConfigError,
     ["(Stream) has no len()", "n_data", "give the data set a __len__"]),
    ("a model that is not a module", lambda: (lambda x: x, loader(labels()), None, {}),
     ConfigError, ["model must be a torch.nn.Module", "got function"]),
    ("an empty training set",
     lambda: (tiny_model(), DataLoader(TensorDataset(inputs()[:0], labels()[:0])), None, {}),
     ConfigError, ["train_loader's data set is empty"]),
    ("an empty test set",
     lambda: (tiny_model(), loader(labels()),
              DataLoader(TensorDataset(inputs()[:0], labels()[:0])), {}), ConfigError,
     ["test_loader's data set is empty", "test_loader=None"]),
    ("NaN in the test inputs held in memory",
     lambda: (tiny_model(), loader(labels()),
              DataLoader(TensorDataset(inputs().index_fill(0, torch.tensor([5]), math.nan),
                                       labels())), {}),
     InputDataError, ["test_loader's data set holds NaN or infinite inputs",
                      "the first at example 5"]),
    ("NaN in the test inputs of a later batch",
     lambda: (tiny_model(), loader(labels()),
              DataLoader(Items(lambda i: (inputs()[i] * (math.inf if i == 6 else 1),
                                          labels()[i])), batch_size=4), {}),
     InputDataError, ["test_loader's batch 2 holds NaN or infinite inputs", "the data"]),
    ("lr_hyp under the closed-form update", lambda: (tiny_model(), loader(labels()), None,
                                                     {"lr_hyp": 0.05}), ConfigError,
     ["--lr-hyp 0.05 sets the Adam steps", "add --prior-update adam"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "arguments, error, words", [pytest.param(*row[1:], id=row[0]) for row in BAD_LOADERS]
)
def test_fit_refuses_a_bad_loader_naming_the_batch_and_the_fix(arguments, error, words):
    model, train_loader, test_loader, options = arguments()
    with pytest.raises(error) as caught:
        ella.fit(model, train_loader, test_loader, **{**FAST, **options})
    for word in words:
        assert word in str(caught.value)
    assert "IndexError" not in str(caught.value) and "TypeError" not in str(caught.value)


def test_fit_takes_lr_hyp_where_the_rounds_step_by_adam():
    result = ella.fit(tiny_model(), loader(labels()), lr_hyp=0.05, prior_update="adam", **FAST)
    assert result.priors.optimizer.param_groups[0]["lr"] == 0.05


# one row per bad n_data, through each public entry: the call, the words of the message
def learner(n_data):
    return PriorLearner(tiny_model(), n_data=n_data)


def from_config(n_data):
    return PriorLearner.from_config(tiny_model(), n_data, FitConfig())


def evidence_fit(n_data):
    model = tiny_model()
    LaplaceEvidence(model, PriorStructure(model)).fit(loader(labels()), n_data=n_data)


BAD_N_DATA = [
    (learner, True, ["n_data", "1 to 1_000_000_000_000", "True (bool)", "bools are refused"]),
    (learner, False, ["n_data", "False (bool)"]),
    (learner, torch.tensor(True), ["n_data", "bools are refused"]),
    (learner, 10**30, ["n_data", "1 to 1_000_000_000_000", f"got {10**30}"]),
    (learner, MAX_N_DATA + 1, ["n_data", f"got {MAX_N_DATA + 1}"]),
    (learner, 0, ["n_data must be the training-set size", "got 0"]),
    (learner, -5, ["n_data", "got -5"]),
    (learner, 10.0, ["n_data", "floats", "10.0 (float)", "int(n)"]),
    (learner, 10.5, ["n_data", "10.5 (float)"]),
    (learner, "10", ["n_data", "'10' (str)", "len(train_set)"]),
    (learner, None, ["n_data", "None (NoneType)"]),
    (from_config, True, ["n_data", "True (bool)"]),
    (from_config, 10**30, ["n_data", "1_000_000_000_000"]),
    (evidence_fit, True, ["n_data", "True (bool)"]),
    (evidence_fit, 0, ["n_data", "got 0"]),
    (evidence_fit, 8.0, ["n_data", "8.0 (float)"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "call, n_data, words",
    [pytest.param(*row, id=f"{row[0].__name__}-{row[1]!r}") for row in BAD_N_DATA],
)
def test_a_bad_n_data_is_refused_with_the_valid_range(call, n_data, words):
    with pytest.raises(ConfigError) as caught:
        call(n_data)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    "n_data, expected",
    [(1, 1), (MAX_N_DATA, MAX_N_DATA), (np.int64(24), 24), (torch.tensor(24), 24)],
)
def test_integer_n_data_is_taken_as_a_python_int(n_data, expected):
    assert check_n_data(n_data) == expected and type(check_n_data(n_data)) is int
    priors = learner(n_data)
    assert priors.n_data == expected and type(priors.n_data) is int


# one row per broken saved state: how it is broken, the words of the message
def without(*keys):
    return lambda state: {k: v for k, v in state.items() if k not in keys}


def replaced(key, value):
    return lambda state: {**state, key: value}


def with_adam_moments(exp_avg):
    def edit(state):
        optimizer = dict(state["optimizer"])
        optimizer["state"] = {0: {"step": torch.tensor(1.0), "exp_avg": exp_avg,
                                  "exp_avg_sq": torch.ones(2)}}  # fmt: skip
        return {**state, "optimizer": optimizer}

    return edit


BAD_STATES = [
    ("no log_prior", without("log_prior"), ["lack the entries ['log_prior']", "state_dict()"]),
    ("no optimizer or history", without("optimizer", "history"),
     ["lack the entries ['optimizer', 'history']", "they have"]),
    ("log_prior too long", replaced("log_prior", torch.zeros(3)),
     ["log_prior has shape (3,)", "expected a tensor of shape (2,)", "prior group"]),
    ("log_prior a scalar", replaced("log_prior", torch.tensor(0.0)),
     ["log_prior has shape ()", "(2,)"]),
    ("log_prior a list", replaced("log_prior", [0.0, 0.0]), ["log_prior is a list", "(2,)"]),
    ("Adam moment too short", with_adam_moments(torch.zeros(1)),
     ["optimizer exp_avg has shape (1,)", "(2,)"]),
    ("optimizer without groups", replaced("optimizer", {"state": {}, "param_groups": []}),
     ["optimizer state of the priors does not fit", "ValueError"]),
    ("optimizer without param_groups", replaced("optimizer", {"state": {}}),
     ["optimizer state of the priors does not fit", "KeyError"]),
    ("not a dict", lambda state: list(state), ["must be a dict", "got list"]),
]  # fmt: skip


@pytest.mark.parametrize("edit, words", [pytest.param(*row[1:], id=row[0]) for row in BAD_STATES])
def test_load_state_dict_refuses_a_broken_state_and_changes_nothing(edit, words):
    saved = PriorLearner(tiny_model(), n_data=N, prior_precision=2.0).state_dict()
    priors = PriorLearner(tiny_model(), n_data=N)
    priors.history = [1.0]
    before = priors.log_prior.detach().clone()
    with pytest.raises(CheckpointError) as caught:
        priors.load_state_dict(edit(saved))
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, EllaError)
    for word in words:
        assert word in str(caught.value)
    torch.testing.assert_close(priors.log_prior.detach(), before, rtol=0, atol=0)
    assert priors.history == [1.0] and priors.optimizer.state_dict()["state"] == {}


def test_load_state_dict_still_loads_a_whole_state():
    first = PriorLearner(tiny_model(), n_data=N, prior_precision=2.0)
    first.evidence_step(loader(labels()), n_hypersteps=2)
    second = PriorLearner(tiny_model(), n_data=N)
    second.load_state_dict(first.state_dict())
    torch.testing.assert_close(second.log_prior, first.log_prior, rtol=0, atol=0)
    assert second.history == first.history
