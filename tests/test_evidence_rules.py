"""The evidence's rules, stated once and asked by every entry point in its own names."""

import pytest
import torch

import ella
from ella import PriorLearner
from ella.engine.recipe import EvidenceRecipe
from ella.engine.schedule import ScheduleConfig
from ella.errors import ConfigError
from ella.evidence_rules import (
    CONFIG_NAMES,
    EvidenceRuleError,
    as_flag,
    evidence_problems,
    first_problem,
)
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.train import TrainConfig
from tests.cli_runs import TINY, refused
from tests.tiny_fit import FAST, N, labels, loader, tiny_model

#: each rule broken alone, by the recipe's names (``n_data`` is the entry point's), and
#: the words of its reason
RULES = [
    ({"hessian": "diag", "backend": "native"}, "Kronecker factors only"),
    ({"ggn": "stratified", "backend": "asdl"}, "the native backend's estimator"),
    ({"ggn": "stratified", "likelihood": "regression"}, "samples class labels"),
    ({"update": "optimum", "hessian": "full", "backend": "asdl"}, "optimum needs"),
    ({"update": "adam", "step": 0.5}, "a step towards the optimum needs the optimum"),
    ({"response": "laplace", "hessian": "diag", "backend": "asdl"}, "Laplace response"),
    ({"subset_size": 4, "hessian": "diag", "backend": "asdl"}, "subset"),
]


def _with_n_data(settings: dict) -> dict:
    """``settings`` with the entry points' ``N`` training examples where a subset is asked."""
    return {**settings, "n_data": N} if "subset_size" in settings else settings


@pytest.mark.parametrize("settings, reason", RULES)
def test_each_rule_is_broken_alone_and_worded_with_its_fix(settings, reason):
    settings = _with_n_data(settings)
    (problem,) = evidence_problems(**settings)
    assert reason in problem.reason
    python, flags = problem.words(), problem.words(CONFIG_NAMES, flags=True)
    for fix in problem.fixes:  # every fix keeps the rule
        fixed = {**settings, **fix}
        if fixed.get("subset_size") is None:
            fixed.pop("n_data", None)
        assert evidence_problems(**fixed) == []
    assert "--" not in python and "use " in python
    assert flags.startswith("--") and "=" not in flags


def test_settings_that_keep_every_rule_are_not_refused():
    assert evidence_problems() == []
    assert evidence_problems(hessian="full", backend="asdl", update="adam") == []
    assert evidence_problems(subset_size=20, n_data=20, hessian="diag", backend="asdl") == []
    assert evidence_problems(update="auto", hessian="diag", backend="asdl", step=None) == []


def test_every_entry_point_asks_the_same_rule_in_its_own_names():
    """The closed-form optimum on a diagonal Hessian: the recipe and LaplaceEvidence name
    the recipe's keywords, the configurations their fields, the command line its flags
    (:meth:`~ella.evidence_rules.EvidenceRuleError.on_command_line`); the words are the
    rule's."""
    rule = first_problem(update="optimum", hessian="diag", backend="asdl")
    reason = rule.split(": ", 1)[1]
    with pytest.raises(ConfigError) as recipe:
        EvidenceRecipe(update="optimum", hessian="diag", backend="asdl")
    with pytest.raises(EvidenceRuleError) as schedule:
        ScheduleConfig(prior_update="optimum", hessian="diag", backend="asdl")
    assert str(recipe.value) == rule
    assert str(schedule.value) == "prior_update='optimum', hessian='diag': " + reason.replace(
        "update='adam'", "prior_update='adam'"
    )
    assert schedule.value.on_command_line() == (
        "--prior-update optimum --hessian diag: "
        + reason.replace(
            "hessian='kron', or update='adam'", "--hessian kron, or --prior-update adam"
        )
    )
    with pytest.raises(ConfigError, match="marglik_subset_size=100, hessian='diag': a round"):
        TrainConfig(train_size=200, marglik_subset_size=100, hessian="diag", backend="asdl")
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ConfigError, match="^structure='diag', backend='native': the native"):
        LaplaceEvidence(model, PriorStructure(model), structure="diag", backend="native")


def _rule(settings: dict) -> tuple[str, list[str]]:
    """The rule's reason, and the recipe's names of the settings its message names."""
    (problem,) = evidence_problems(**_with_n_data(settings))
    return problem.reason, [n for n in problem.settings if n != "likelihood"]


@pytest.mark.parametrize("settings, reason", RULES)
def test_the_command_line_ella_fit_and_the_learner_refuse_each_rule_in_one_message(
    settings, reason, capsys, tmp_path
):
    """Each invalid combination, fed to ``ella train``, :func:`ella.fit` and
    :class:`~ella.PriorLearner`: each refuses it before any work, in one message whose
    reason is the rule's, with its settings in the entry point's own names."""
    rule, named = _rule(settings)
    assert reason in rule
    likelihood = settings.get("likelihood")
    recipe = {k: v for k, v in settings.items() if k != "likelihood"}
    if likelihood is None:  # ella train learns classifiers only
        flags = [w for k, v in recipe.items() for w in (as_flag(CONFIG_NAMES.get(k, k)), str(v))]
        out = tmp_path / "run"
        err = refused(capsys, ["train", *TINY, *flags, "--out", str(out)], 1, rule)
        assert err.count(rule) == 1 and not out.exists()
        assert all(as_flag(CONFIG_NAMES.get(name, name)) in err for name in named)
    options = {CONFIG_NAMES.get(k, k): v for k, v in recipe.items()}
    y = labels() if likelihood is None else torch.randn(N, 3)
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ConfigError) as fit:
        ella.fit(model, loader(y), likelihood=likelihood or "classification", **FAST, **options)
    assert str(fit.value).count(rule) == 1
    assert all(f"{CONFIG_NAMES.get(name, name)}=" in str(fit.value) for name in named)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ConfigError) as learner:
        PriorLearner(tiny_model(), N, likelihood=likelihood or "classification", **recipe)
    assert str(learner.value).count(rule) == 1
    for name in named:  # the learner's words are the recipe's names
        assert f"{name}=" in str(learner.value)


def test_the_learner_asks_its_rules_again_when_its_recipe_is_replaced():
    """The recipe may be replaced between rounds (``learner.recipe =
    learner.recipe.replace(...)``): a round refuses a subset on a diagonal Hessian before
    fitting anything."""
    learner = PriorLearner(tiny_model(), N, subset_size=4)
    learner.recipe = learner.recipe.replace(hessian="diag", backend="asdl")
    data = torch.utils.data.TensorDataset(torch.randn(N, 4), labels())
    with pytest.raises(EvidenceRuleError, match="subset_size=4, hessian='diag': a round"):
        learner.evidence_round(data, epoch=1)
    assert learner.evidence is None and learner.history == []
