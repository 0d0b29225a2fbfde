"""PriorLearner: learned layer-wise priors for a user's own model and loop."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella import PriorLearner
from ella.errors import ConfigError
from ella.learner import prior_convergence
from ella.marglik import LaplaceEvidence, PriorStructure
from tests.user_models import user_model

#: the ELLA reference's rounds: Adam steps on the priors with the exact GGN
ADAM_EXACT = {"update": "adam", "ggn": "exact"}


def data(n: int = 24) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(3, (n,), generator=g))


def test_penalty_is_half_the_precision_weighted_square_norm_over_n():
    model = user_model()
    priors = PriorLearner(model, n_data=24, prior_precision=0.5)
    with torch.no_grad():
        priors.log_prior[0] = 1.0  # layer1.fc gets e
    delta = {n: 0.5 for n in priors.prior.param_names}
    for n in priors.prior.tensors_of(priors.prior.names[0]):
        delta[n] = torch.e
    expected = sum(0.5 * delta[n] * p.square().sum() / 24 for n, p in model.named_parameters())
    value = priors.penalty()
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    value.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, delta[n] * p.detach() / 24)


def test_a_prior_centred_at_init_penalises_only_what_training_added(tmp_path):
    """``mean="init"``: zero penalty at the initial weights; after a move ``d`` the penalty
    is ``1/2 sum delta d^2 / N`` with gradient ``delta d / N``; the evidence gets the same
    mean; the mean survives a state-dict round trip into a learner of a different
    initialisation, and a learner with the other mean refuses the state."""
    model = user_model()
    priors = PriorLearner(model, n_data=24, prior_precision=0.5, mean="init")
    assert priors.penalty().item() == 0.0
    moves = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.add_(moves[n])
    value = priors.penalty()
    expected = sum(0.5 * 0.5 * d.square().sum() / 24 for d in moves.values())
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
    value.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, 0.5 * moves[n] / 24)
    assert priors.make_evidence().prior_mean is priors.prior_mean
    torch.save(priors.state_dict(), tmp_path / "priors.pt")
    state = torch.load(tmp_path / "priors.pt", weights_only=True)
    other_model = user_model()
    with torch.no_grad():  # another initialisation: the saved mean must win
        for p in other_model.parameters():
            p.mul_(2.0)
    other = PriorLearner(other_model, n_data=24, mean="init")
    assert not torch.equal(other.prior_mean, priors.prior_mean)
    other.load_state_dict(state)
    torch.testing.assert_close(other.prior_mean, priors.prior_mean, rtol=0, atol=0)
    zero_mean = PriorLearner(user_model(), n_data=24)
    before = zero_mean.log_prior.detach().clone()
    with pytest.raises(ConfigError, match="centred at init.*prior_mean"):
        zero_mean.load_state_dict(state)
    assert torch.equal(zero_mean.log_prior.detach(), before)  # refused before any load


def test_an_evidence_step_without_steps_is_the_laplace_evidence(float64):
    model = user_model()
    priors = PriorLearner(model, n_data=24, prior_precision=0.3, ggn="exact", update="adam")
    value = priors.evidence_step(DataLoader(data(), batch_size=8), n_hypersteps=0)
    reference = LaplaceEvidence(model, PriorStructure(model))
    reference.fit(DataLoader(data(), batch_size=8))
    log_delta = torch.full((priors.prior.n_groups,), torch.log(torch.tensor(0.3)).item())
    assert value == pytest.approx(reference.log_marginal_likelihood(log_delta).item(), rel=1e-10)


def test_a_list_of_batches_is_the_same_as_a_loader(float64):
    results = []
    for batches in (DataLoader(data(), batch_size=8), list(DataLoader(data(), batch_size=8))):
        priors = PriorLearner(user_model(), n_data=24, **ADAM_EXACT)
        results.append((priors.evidence_step(batches, n_hypersteps=5), priors.log_prior.detach()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-12)
    torch.testing.assert_close(results[0][1], results[1][1])


def test_hypersteps_raise_the_evidence_of_the_fit(float64):
    priors = PriorLearner(user_model(), n_data=24, **ADAM_EXACT)
    before = priors.evidence_step(DataLoader(data(), batch_size=8), n_hypersteps=0)
    after = priors.hyper_steps(30)
    assert after > before and priors.history == [before, after]


def test_the_optimum_update_reaches_the_best_evidence_of_the_round(float64):
    loader = DataLoader(data(), batch_size=8)
    adam = PriorLearner(user_model(), n_data=24, prior_precision=0.3, **ADAM_EXACT)
    adam_value = adam.evidence_step(loader, n_hypersteps=5)
    best = PriorLearner(
        user_model(), n_data=24, prior_precision=0.3, ggn="exact", update="optimum", step=1.0
    )
    best_value = best.evidence_step(loader)
    torch.testing.assert_close(best.log_prior.detach(), best.evidence.optimal_log_prior())
    assert best_value > adam_value  # the same fit (same weights), a better prior
    assert best.gaps == [pytest.approx(0.0, abs=1e-12)]
    # Adam's gap is the distance to the same optimum
    gap = (adam.log_prior.detach() - best.log_prior.detach()).abs().max().item()
    assert adam.gaps == [pytest.approx(gap, rel=1e-9)] and gap > 0.1
    with pytest.raises(ConfigError, match="Kronecker"):
        PriorLearner(user_model(), n_data=24, hessian="diag", backend="asdl", update="optimum")
    # auto: the optimum where it applies (Kronecker Hessian), Adam elsewhere
    assert PriorLearner(user_model(), n_data=24).update == "optimum"
    assert PriorLearner(user_model(), n_data=24, hessian="diag").update == "adam"


def test_a_damped_optimum_update_moves_the_given_fraction_of_the_way(float64):
    loader = DataLoader(data(), batch_size=8)
    half = PriorLearner(user_model(), n_data=24, prior_precision=0.3, ggn="exact")
    assert half.step == 0.5  # the recipe's step towards the optimum
    half.fit(loader)
    before = half.log_prior.detach().clone()
    optimum = half.evidence.optimal_log_prior()
    half.hyper_steps(0)
    torch.testing.assert_close(half.log_prior.detach(), before + 0.5 * (optimum - before))
    assert half.gaps == [pytest.approx(0.5 * (optimum - before).abs().max().item())]
    # a second round at the same fit halves the distance again
    half.hyper_steps(0)
    torch.testing.assert_close(half.log_prior.detach(), optimum - 0.25 * (optimum - before))
    with pytest.raises(ConfigError, match="use update='optimum', or step=1"):
        PriorLearner(user_model(), n_data=24, update="adam", step=0.5)
    with pytest.raises(ConfigError, match=r"step must be in \(0, 1\]"):
        PriorLearner(user_model(), n_data=24, update="optimum", step=1.5)


def test_prior_convergence_compares_the_last_two_rounds():
    rounds = [{"a": 1.0, "b": 2.0}, {"a": 1.5, "b": 2.0}, {"a": 1.5, "b": 2.1}]
    result = prior_convergence(rounds)
    assert result["rounds"] == 3 and result["converged"]
    assert result["last_change"] == pytest.approx(math.log(2.1 / 2.0))
    assert (result["group"], result["rising"]) == ("b", True)  # the group that moved most
    assert not prior_convergence(rounds[:2])["converged"]  # log 1.5 > 0.05
    falling = prior_convergence([{"a": 1.0, "b": 2.0}, {"a": 0.5, "b": 2.1}])
    assert (falling["group"], falling["rising"]) == ("a", False)
    assert prior_convergence(rounds[:1]) == {
        "rounds": 1, "last_change": None, "converged": False, "tolerance": 0.05,
        "group": None, "rising": None,
    }  # fmt: skip


def test_convergence_line_names_the_group_that_moved_most():
    from ella.learner.report import convergence_line

    line = convergence_line(prior_convergence([{"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 8.0}]))
    assert line == (
        "priors: not converged after 2 evidence rounds (largest change of a log prior "
        "precision in the last round 1.39 in b, rising, tolerance 0.05)"
    )
    # results written before the group was recorded still print
    old = {"rounds": 2, "last_change": 0.01, "converged": True, "tolerance": 0.05}
    assert convergence_line(old).endswith("in the last round 0.01, tolerance 0.05)")


def test_a_subset_of_batches_is_the_scaled_estimator(float64):
    model = user_model()
    priors = PriorLearner(model, n_data=240, prior_precision=1.0, **ADAM_EXACT)
    value = priors.evidence_step(DataLoader(data(), batch_size=8), n_hypersteps=0)
    reference = LaplaceEvidence(model, PriorStructure(model))
    reference.fit(DataLoader(data(), batch_size=8), n_data=240)
    zeros = torch.zeros(priors.prior.n_groups)
    assert value == pytest.approx(reference.log_marginal_likelihood(zeros).item(), rel=1e-10)


def test_report_lists_the_users_layers_and_paths():
    priors = PriorLearner(user_model(), n_data=24, ggn="mc")
    priors.evidence_step(DataLoader(data(), batch_size=8), n_hypersteps=2)
    report = priors.report()
    assert [row["layer"] for row in report["effective_parameters"]] == ["layer1", "layer2"]
    for row in report["effective_parameters"]:
        assert row["fc"] + row["conv"] + row["gconv"] == pytest.approx(100)
    assert [row["module"] for row in report["effective_parameters_other"]] == ["head"]
    assert set(report["prior_variance"]) == set(priors.prior.names)


def test_state_dict_round_trip_continues_identically(tmp_path, float64):
    loader = list(DataLoader(data(), batch_size=8))
    first = PriorLearner(user_model(), n_data=24, **ADAM_EXACT)
    first.evidence_step(loader, n_hypersteps=4)
    torch.save(first.state_dict(), tmp_path / "priors.pt")
    second = PriorLearner(user_model(), n_data=24, **ADAM_EXACT)
    second.load_state_dict(torch.load(tmp_path / "priors.pt", weights_only=True))
    assert second.history == first.history
    first.evidence_step(loader, n_hypersteps=4)
    second.evidence_step(loader, n_hypersteps=4)
    torch.testing.assert_close(first.log_prior, second.log_prior, rtol=0, atol=0)


def test_bad_use_is_refused_with_the_fix():
    model = user_model()
    with pytest.raises(ConfigError, match="training-set size"):
        PriorLearner(model, n_data=0)
    with pytest.raises(ConfigError, match="positive"):
        PriorLearner(model, n_data=10, prior_precision=-1.0)
    priors = PriorLearner(model, n_data=10)
    with pytest.raises(RuntimeError, match="evidence_step"):
        priors.report()
    with pytest.raises(ConfigError, match="no batches"):
        priors.evidence_step([])
    other = PriorLearner(nn.Linear(3, 2), n_data=10)
    with pytest.raises(ConfigError, match="groups"):
        priors.load_state_dict(other.state_dict())


def test_a_model_the_evidence_cannot_read_is_refused_before_any_training(tmp_path):
    """A LayerNorm's weight has no Kronecker factors: refused when the learner is built
    (and so by ella.fit before its first step), not at the first evidence round."""
    import ella
    from ella.marglik import UnsupportedModuleError

    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    with pytest.raises(UnsupportedModuleError, match=r"2 \(LayerNorm\)"):
        PriorLearner(model, n_data=16)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    with pytest.raises(UnsupportedModuleError, match="LayerNorm"):
        ella.fit(model, DataLoader(data, batch_size=8), epochs=1, out=tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
    PriorLearner(model, n_data=16, hessian="diag")  # a diagonal Hessian reads any module


def test_forward_traces_read_any_map_style_dataset_alike_and_draw_no_random_numbers():
    from torch.utils.data import Dataset

    from ella.distributed import World
    from ella.learner import forward_traces

    class Items(Dataset):  # a user's dataset: items, no tensors to index
        def __init__(self, data):
            self.data = data

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            return self.data[i]

    data = TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,)))
    model = nn.Linear(4, 3)
    torch.manual_seed(0)
    expected = torch.rand(())
    torch.manual_seed(0)
    direct = forward_traces(model, data, 4, World())
    items = forward_traces(model, Items(data), 4, World())
    assert torch.rand(()) == expected  # torch's global generator untouched
    torch.testing.assert_close(items, direct, rtol=0, atol=0)
    assert direct.shape == (10,) and direct.dtype == torch.float64 and (direct > 0).all()
