"""ella.engine.recipe: the evidence recipe's choices, refusals and resolved rules."""

import pytest
import torch

from ella.choices import Backend, HessianStructure, PriorUpdate
from ella.engine.recipe import OPTIMUM_STEP, EvidenceRecipe, resolved_update
from ella.errors import ConfigError
from ella.learner import PriorLearner


def test_choices_are_parsed_into_members():
    recipe = EvidenceRecipe(hessian="diag", backend="asdl", update="adam", control="none")
    assert recipe.hessian == HessianStructure.DIAG and recipe.backend == Backend.ASDL
    assert isinstance(recipe.update, PriorUpdate) and recipe.control == "none"
    with pytest.raises(ValueError, match="ggn|GGN"):
        EvidenceRecipe(ggn="exactly")


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"prior_precision": 0.0}, "prior_precision must be positive"),
        ({"lr": float("nan")}, "lr must be a finite number"),
        ({"lr": 0.0}, "lr must be positive"),
        ({"step": 1.5}, r"step must be in \(0, 1\]"),
        ({"subset_size": 0}, "subset_size must be at least 1"),
        ({"batch_size": 2.5}, "batch_size must be an integer"),
        ({"n_hypersteps": -1}, "n_hypersteps must be at least 0"),
        (
            {"update": "optimum", "hessian": "diag"},
            "optimum needs the Kronecker Hessian; use hessian='kron', or update='adam'",
        ),
        ({"update": "adam", "step": 0.5}, "use update='optimum', or step=1"),
        ({"response": "laplace", "hessian": "full"}, "Laplace response needs the Kronecker"),
        ({"hessian": "full", "backend": "native"}, "native backend gives Kronecker factors"),
        ({"ggn": "stratified", "backend": "asdl"}, "use backend='native', or ggn='mc'"),
    ],
)
def test_a_bad_recipe_is_refused_with_the_fix(changes, match):
    with pytest.raises(ConfigError, match=match):
        EvidenceRecipe(**changes)


def test_replace_names_the_fields_of_the_recipe():
    assert EvidenceRecipe().replace(prior_precision=1.0).prior_precision == 1.0
    with pytest.raises(ConfigError, match="precision is not a setting.*prior_precision"):
        EvidenceRecipe().replace(precision=1.0)
    with pytest.raises(ConfigError, match="precision is not a setting"):
        PriorLearner(torch.nn.Linear(3, 2), n_data=4, precision=1.0)


def test_auto_and_none_resolve_to_the_rule_in_force():
    assert resolved_update("auto", "kron") == PriorUpdate.OPTIMUM
    assert resolved_update("auto", "diag") == PriorUpdate.ADAM
    assert resolved_update("adam", "kron") == PriorUpdate.ADAM
    default = EvidenceRecipe().resolved()
    assert (default.update, default.step, default.backend) == ("optimum", OPTIMUM_STEP, "native")
    diag = EvidenceRecipe(hessian="diag").resolved()
    assert (diag.update, diag.step, diag.backend) == ("adam", 1.0, "asdl")
    assert EvidenceRecipe(step=0.25).step_in_force() == 0.25


def test_a_rounds_subset_depends_on_seed_and_epoch_only():
    labels = torch.arange(40) % 4
    recipe = EvidenceRecipe(subset_size=8, seed=3)
    first = recipe.subset(labels, 40, epoch=2)
    assert torch.equal(first, recipe.subset(labels, 40, epoch=2))
    assert not torch.equal(first, recipe.subset(labels, 40, epoch=3))
    assert torch.bincount(labels[first]).tolist() == [2, 2, 2, 2]  # class-balanced
    assert EvidenceRecipe(subset_size=None).subset(labels, 40, 1) is None
    assert EvidenceRecipe(subset_size=40).subset(labels, 40, 1) is None  # all of them
