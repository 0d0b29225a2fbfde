"""The evidence's rules, stated once and asked by every entry point in its own names."""

import pytest
import torch

from ella.engine.recipe import EvidenceRecipe
from ella.engine.schedule import ScheduleConfig
from ella.errors import ConfigError
from ella.evidence_rules import CONFIG_NAMES, evidence_problems, first_problem
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.train import TrainConfig


@pytest.mark.parametrize(
    "settings, reason",
    [
        ({"hessian": "diag", "backend": "native"}, "Kronecker factors only"),
        ({"ggn": "stratified", "backend": "asdl"}, "the native backend's estimator"),
        ({"ggn": "stratified", "likelihood": "regression"}, "samples class labels"),
        ({"update": "optimum", "hessian": "full", "backend": "asdl"}, "optimum needs"),
        ({"update": "adam", "step": 0.5}, "a step towards the optimum needs the optimum"),
        ({"response": "laplace", "hessian": "diag", "backend": "asdl"}, "Laplace response"),
        ({"subset_size": 10, "n_data": 20, "hessian": "diag", "backend": "asdl"}, "subset"),
    ],
)
def test_each_rule_is_broken_alone_and_worded_with_its_fix(settings, reason):
    (problem,) = evidence_problems(**settings)
    assert reason in problem.reason
    python, flags = problem.words(), problem.words(CONFIG_NAMES, flags=True)
    for fix in problem.fixes:  # every fix keeps the rule
        fixed = {**settings, **fix}
        if fixed.get("subset_size") is None:
            fixed.pop("n_data", None)
        assert evidence_problems(**{k: v for k, v in fixed.items()}) == []
    assert "--" not in python and "use " in python
    assert flags.startswith("--") and "=" not in flags


def test_settings_that_keep_every_rule_are_not_refused():
    assert evidence_problems() == []
    assert evidence_problems(hessian="full", backend="asdl", update="adam") == []
    assert evidence_problems(subset_size=20, n_data=20, hessian="diag", backend="asdl") == []
    assert evidence_problems(update="auto", hessian="diag", backend="asdl", step=None) == []


def test_every_entry_point_asks_the_same_rule_in_its_own_names():
    """The closed-form optimum on a diagonal Hessian: the recipe and LaplaceEvidence name
    Python keywords, the command line's configurations flags; the words are the rule's."""
    rule = first_problem(update="optimum", hessian="diag", backend="asdl")
    reason = rule.split(": ", 1)[1]
    with pytest.raises(ConfigError) as recipe:
        EvidenceRecipe(update="optimum", hessian="diag", backend="asdl")
    with pytest.raises(ConfigError) as schedule:
        ScheduleConfig(prior_update="optimum", hessian="diag", backend="asdl")
    assert str(recipe.value) == rule
    assert str(schedule.value) == "--prior-update optimum --hessian diag: " + reason.replace(
        "hessian='kron', or update='adam'", "--hessian kron, or --prior-update adam"
    )
    with pytest.raises(ConfigError, match="--marglik-subset-size 100 --hessian diag: a round"):
        TrainConfig(train_size=200, marglik_subset_size=100, hessian="diag", backend="asdl")
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ConfigError, match="^structure='diag', backend='native': the native"):
        LaplaceEvidence(model, PriorStructure(model), structure="diag", backend="native")
