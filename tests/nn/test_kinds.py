"""The registry of path kinds: the one place a kind's name, facts and rules live."""

import math

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ella
from ella.choices import PathName
from ella.marglik import PriorStructure
from ella.marglik.effective import split_name
from ella.nn import PATH_KINDS, ConvPath, GConvPath, RelaxedLayer
from ella.nn.kinds import (
    ALL_PATH_NAMES,
    PathProblem,
    check_path_names,
    path_columns,
    path_problems,
    zero_init_problem,
)


def test_the_registry_names_every_kind_once_as_the_command_line_does():
    assert tuple(PATH_KINDS) == ALL_PATH_NAMES == PathName.values()
    for name, kind in PATH_KINDS.items():
        assert kind.kind == name
        assert kind.color.startswith("#")
    layer = RelaxedLayer(2, 3, 8, "C4", paths=("fc", "conv", "gconv"))
    assert {name: type(path) for name, path in layer.paths.items()} == {
        name: PATH_KINDS[name] for name in ("fc", "conv", "gconv")
    }


@pytest.mark.parametrize(
    "paths, group_trivial, expected",
    [
        (("fc", "conv", "gconv"), False, []),
        (("gconv", "residual"), False, []),
        (("fc", "fc"), False, [("names fc more than once", ("fc",))]),
        (
            ("conv", "residual"),
            False,
            [("redundant", ("gconv", "residual")), ("stands beside", ("gconv", "residual"))],
        ),
        (("residual",), False, [("stands beside the GCONV path", ("gconv", "residual"))]),
        (("fc", "residual"), False, [("stands beside", ("fc", "gconv", "residual"))]),
        (("gconv", "residual"), True, [("nothing for a residual to break", None)]),
    ],
)
def test_path_problems_state_each_rule_and_the_nearest_legal_choice(paths, group_trivial, expected):
    found = path_problems(paths, trivial_group=group_trivial)
    assert [(type(p), p.fix) for p in found] == [(PathProblem, fix) for _, fix in expected]
    for problem, (words, _) in zip(found, expected, strict=True):
        assert words in problem.reason
    for problem in found:  # the fix is itself legal
        if problem.fix is not None:
            assert path_problems(problem.fix) == []


def test_the_layer_and_the_command_line_ask_the_same_rules():
    with pytest.raises(ValueError, match=r"paths=\('fc', 'residual'\): a residual path"):
        check_path_names(("fc", "residual"))
    assert zero_init_problem(("fc",), ("fc", "conv")) is None
    assert zero_init_problem(("fc", "conv"), ("fc",)) is None  # a one-path layer keeps its start
    assert "leave at least one path out" in zero_init_problem(("fc", "conv"), ("conv", "fc"))


class WideConvPath(ConvPath):
    """A kind of path defined outside ella: a CONV path with a 5 x 5 kernel."""

    kind = "wide"
    color = "#000000"

    @classmethod
    def for_layer(cls, options, **common):
        return cls(**common, kernel_size=5, downsample=options.downsample)


def test_a_new_kind_is_its_class_and_its_registry_entry(monkeypatch, float64):
    """A new kind joins by its class and one registry entry: the layer builds it, checks it,
    orders it, its prior groups are named by it, the report's columns show it, and the
    native evidence (whose blocks are found by class) equals ASDL's on it."""
    from tests.cases import NoHead
    from tests.marglik.problems import assert_same_evidence, fitted, zero_padded

    monkeypatch.setitem(PATH_KINDS, "wide", WideConvPath)
    layer = RelaxedLayer(2, 3, 8, "C4", paths=("wide", "gconv"))
    assert layer.path_names == ("gconv", "wide")
    assert layer.paths["wide"].conv.kernel_size == (5, 5)
    assert path_columns(["wide"]) == ("fc", "conv", "gconv", "wide")
    model = NoHead("C4", ("gconv", "wide"))
    groups = PriorStructure(model, "layer_path").names
    assert "layer1.wide" in groups and split_name("layer1.wide") == ("layer1", "wide")
    torch.manual_seed(0)
    model = zero_padded(NoHead("C4", ("gconv", "wide")))
    assert_same_evidence(fitted(model, "native"), fitted(model, "asdl"))
    # and it trains: one epoch of ella.fit with an evidence round, its prior learned
    x = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    data = DataLoader(TensorDataset(x, torch.arange(16) % 5), batch_size=8, shuffle=True)
    result = ella.fit(model, data, epochs=1, n_epochs_burnin=0, marglik_frequency=1,
                      n_hypersteps=1, progress=False)  # fmt: skip
    assert "layer1.wide" in result.prior_precision and math.isfinite(result.log_marglik[-1])
    assert result.effective_parameters[0]["wide"] >= 0


def test_rate_facts_come_from_the_kinds():
    from ella.engine.schedule import fc_path_parameters, gconv_path_parameters

    layer = RelaxedLayer(2, 3, 8, "D4", paths=("fc", "conv", "gconv"))
    assert fc_path_parameters(layer) == {id(p) for p in layer.paths["fc"].parameters()}
    assert gconv_path_parameters(layer) == {id(p): 8 for p in layer.paths["gconv"].parameters()}
    assert isinstance(layer.paths["gconv"], GConvPath)
