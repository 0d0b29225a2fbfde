import re

import pytest
import torch
from torch import nn

from ella.engine.schedule import (
    FAN_IN_REFERENCE,
    OptimizerConfig,
    evidence_due,
    fan_in,
    lr_scale,
    make_optimizer,
)
from ella.errors import ConfigError
from ella.options.migrations import absent_means
from ella.train import TrainConfig, Trainer
from tests.runs import tiny_config


def test_fan_in_counts_inputs_per_output():
    assert fan_in(nn.Linear(784, 8).weight) == 784
    assert fan_in(nn.Conv2d(8, 16, 3).weight) == 72
    assert fan_in(nn.Linear(784, 8).bias) == 1


def test_fan_in_scaling_slows_only_wide_weights():
    assert lr_scale(nn.Linear(784, 8).weight, "fan_in") == pytest.approx(FAN_IN_REFERENCE / 784)
    assert lr_scale(nn.Linear(16, 8).weight, "fan_in") == 1.0
    assert lr_scale(nn.Linear(784, 8).bias, "fan_in") == 1.0
    assert lr_scale(nn.Linear(784, 8).weight, "none") == 1.0


def test_the_first_adam_step_moves_each_weight_by_its_scaled_rate():
    """Adam's first step is lr * m / sqrt(v) = lr * sign(gradient) per weight (eps aside)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 4), nn.ReLU(), nn.Linear(4, 3))
    config = OptimizerConfig(lr=1e-2, lr_scaling="fan_in")
    optimizer = make_optimizer(model, config)
    assert sorted(g["lr_scale"] for g in optimizer.param_groups) == [0.25, 1.0]
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(5, 256)).square().sum().backward()
    optimizer.step()
    for p, old in zip(model.parameters(), before, strict=True):
        step = (p.detach() - old).abs()
        expected = 1e-2 * (0.25 if p is model[0].weight else 1.0)
        moved = p.grad.abs() > 1e-6
        torch.testing.assert_close(
            step[moved], torch.full_like(step[moved], expected), rtol=1e-3, atol=0
        )


def test_the_schedule_keeps_each_groups_factor(tmp_path):
    config = tiny_config(lr_scaling="fan_in")
    trainer = Trainer(config, tmp_path)
    trainer.state.step = 3
    lr = trainer.set_lr(trainer.optimizer)
    assert lr < config.lr
    scales = {g["lr_scale"] for g in trainer.optimizer.param_groups}
    assert 1.0 in scales and min(scales) < 1.0
    for group in trainer.optimizer.param_groups:
        assert group["lr"] == pytest.approx(lr * group["lr_scale"])


def test_fan_in_scaling_is_refused_with_sgd():
    with pytest.raises(
        ConfigError, match="--lr-scaling fan_in is Adam's rule.*use --lr-scaling none"
    ):
        OptimizerConfig(optimizer="sgd", lr_scaling="fan_in")


def test_auto_scaling_is_fan_in_with_adam_and_none_with_sgd():
    model = nn.Sequential(nn.Linear(256, 4), nn.ReLU(), nn.Linear(4, 3))
    adam = OptimizerConfig(lr_scaling="auto")
    sgd = OptimizerConfig(optimizer="sgd", lr_scaling="auto")
    assert (adam.weight_lr_scaling(), sgd.weight_lr_scaling()) == ("fan_in", "none")
    assert sorted(g["lr_scale"] for g in make_optimizer(model, adam).param_groups) == [0.25, 1.0]
    assert [g["lr_scale"] for g in make_optimizer(model, sgd).param_groups] == [1.0]
    # ella train's default; ella.fit and ensembles keep every weight at lr
    assert tiny_config().lr_scaling == "auto" and OptimizerConfig().lr_scaling == "none"
    with pytest.raises(ValueError, match="resolve auto"):
        lr_scale(model[0].weight, "auto")


def test_fan_in_fc_scales_the_fc_paths_tensors_only(tmp_path):
    from ella.engine.schedule import fc_path_parameters
    from ella.nn.paths import FCPath

    torch.manual_seed(0)
    model = Trainer(tiny_config(lr_scaling="fan_in_fc"), tmp_path).model
    fc = fc_path_parameters(model)
    fc_modules = [m for m in model.modules() if isinstance(m, FCPath)]
    assert fc_modules and fc == {id(p) for m in fc_modules for p in m.parameters()}
    optimizer = make_optimizer(model, OptimizerConfig(lr=1e-2, lr_scaling="fan_in_fc"))
    every = make_optimizer(model, OptimizerConfig(lr=1e-2, lr_scaling="fan_in"))
    scale_of = {id(p): g["lr_scale"] for g in optimizer.param_groups for p in g["params"]}
    fan_in_of = {id(p): g["lr_scale"] for g in every.param_groups for p in g["params"]}
    assert len(scale_of) == len(list(model.parameters()))
    for p in model.parameters():
        expected = fan_in_of[id(p)] if id(p) in fc else 1.0
        assert scale_of[id(p)] == expected
    # some FC tensor is slowed and some other tensor that fan_in slows is not
    assert min(scale_of[i] for i in fc) < 1.0
    assert any(fan_in_of[id(p)] < 1.0 and scale_of[id(p)] == 1.0 for p in model.parameters())


def test_fan_in_fc_is_refused_with_sgd_and_without_the_model():
    with pytest.raises(ConfigError, match="--lr-scaling fan_in_fc is Adam's rule"):
        OptimizerConfig(optimizer="sgd", lr_scaling="fan_in_fc")
    model = nn.Linear(256, 4)
    with pytest.raises(ValueError, match="needs the model"):
        make_optimizer(model.parameters(), OptimizerConfig(lr_scaling="fan_in_fc"))
    assert lr_scale(model.weight, "fan_in_fc") == 1.0
    assert lr_scale(model.weight, "fan_in_fc", in_fc_path=True) == 0.25


def test_auto_prior_update_is_the_damped_optimum_where_it_applies():
    from ella.engine.schedule import ScheduleConfig
    from ella.train import TrainConfig

    config = TrainConfig()
    assert (config.prior_update, config.prior_step, config.marglik_frequency) == ("auto", 0.5, 2)
    assert config.prior_update_rule() == "optimum"
    # the closed-form optimum covers the network's priors with the Kronecker Hessian only
    assert TrainConfig(invariance="learned", augment="none").prior_update_rule() == "adam"
    assert (
        ScheduleConfig(prior_update="auto", hessian="diag", backend="asdl").prior_update_rule()
        == "adam"
    )
    # ella.fit's rounds are ella train's (the damped optimum); an explicit rule is kept
    fit = ScheduleConfig()
    assert (fit.prior_update_rule(), fit.prior_step, fit.marglik_frequency) == ("optimum", 0.5, 2)
    assert (fit.ggn, fit.marglik_subset_size, fit.subset_control) == ("auto", 500, "forward")
    assert ScheduleConfig(prior_update="adam").prior_update_rule() == "adam"
    assert TrainConfig(prior_update="adam", prior_step=1.0).prior_update_rule() == "adam"
    with pytest.raises(ConfigError, match="--prior-update optimum .*learned invariance"):
        TrainConfig(prior_update="optimum", invariance="learned", augment="none")


def test_the_learner_gets_the_resolved_prior_update(tmp_path):
    trainer = Trainer(tiny_config(), tmp_path)
    assert trainer.priors.update == "optimum" and trainer.priors.step == 0.5


def test_auto_with_learned_invariance_trains_with_adam_rounds(tmp_path):
    config = tiny_config(invariance="learned", augment="none", model="mlp", epochs=1)
    trainer = Trainer(config, tmp_path)
    assert config.prior_step == 0.5  # the default, not read by Adam's rounds
    assert trainer.priors.update == "adam" and trainer.priors.step == 1.0


def test_a_non_kronecker_hessian_needs_a_stock_backend():
    from ella.engine.schedule import ScheduleConfig

    with pytest.raises(ConfigError, match="hessian='full', backend='native': the native backend"):
        ScheduleConfig(hessian="full", backend="native")
    ScheduleConfig(hessian="full", backend="asdl")  # the stock backends give it


def test_the_stratified_ggn_needs_the_native_backend():
    from ella.engine.schedule import ScheduleConfig

    with pytest.raises(ConfigError, match="ggn='stratified', backend='curvlinops': the strat"):
        ScheduleConfig(ggn="stratified", backend="curvlinops")
    ScheduleConfig(ggn="stratified")  # native, the default backend


def test_auto_ggn_is_stratified_with_the_native_backend_and_mc_with_a_stock_one():
    from ella.choices import GGN
    from ella.learner import PriorLearner
    from ella.marglik import LaplaceEvidence, PriorStructure

    assert TrainConfig().ggn == "auto" and TrainConfig().marglik_subset_size == 500
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    assert GGN.AUTO.for_backend("native") is GGN.STRATIFIED
    assert GGN.AUTO.for_backend("curvlinops") is GGN.MC and GGN.EXACT.for_backend("asdl") == "exact"
    assert PriorLearner(model, n_data=10, ggn="auto").ggn == "stratified"
    assert PriorLearner(model, n_data=10, ggn="auto", backend="asdl").ggn == "mc"
    assert PriorLearner(model, n_data=10, ggn="auto", hessian="diag").ggn == "mc"  # asdl
    evidence = LaplaceEvidence(model, PriorStructure(model), backend="asdl", ggn="auto")
    assert evidence.ggn == "mc"


@pytest.mark.parametrize("group, order", [("C4", 4), ("D4", 8)])
def test_gconv_group_order_rate_speeds_the_gconv_tensors_by_the_group_order(tmp_path, group, order):
    from ella.engine.schedule import gconv_path_parameters
    from ella.nn.paths import GConvPath

    torch.manual_seed(0)
    model = Trainer(tiny_config(group=group), tmp_path).model
    gconv = gconv_path_parameters(model)
    gconv_modules = [m for m in model.modules() if isinstance(m, GConvPath)]
    assert gconv_modules and set(gconv) == {id(p) for m in gconv_modules for p in m.parameters()}
    assert set(gconv.values()) == {order}
    tied = make_optimizer(
        model, OptimizerConfig(lr=1e-2, lr_scaling="fan_in", gconv_lr="group_order")
    )
    plain = make_optimizer(model, OptimizerConfig(lr=1e-2, lr_scaling="fan_in"))
    scale_of = {id(p): g["lr_scale"] for g in tied.param_groups for p in g["params"]}
    plain_of = {id(p): g["lr_scale"] for g in plain.param_groups for p in g["params"]}
    assert len(scale_of) == len(list(model.parameters()))
    for p in model.parameters():
        assert scale_of[id(p)] == plain_of[id(p)] * (order if id(p) in gconv else 1)
    # the schedule multiplies each group's factor in
    for g in tied.param_groups:
        assert g["lr"] == pytest.approx(1e-2 * g["lr_scale"])


def test_gconv_group_order_rate_is_refused_with_sgd_and_without_the_model():
    with pytest.raises(ConfigError, match="--gconv-lr group_order corrects Adam's step"):
        OptimizerConfig(optimizer="sgd", gconv_lr="group_order")
    with pytest.raises(ValueError, match="--gconv-lr needs the model"):
        make_optimizer(nn.Linear(4, 2).parameters(), OptimizerConfig(gconv_lr="group_order"))
    assert OptimizerConfig().gconv_lr == "same"


def test_gconv_rate_auto_is_group_order_with_adam_and_same_with_sgd():
    """ella train's default: |G| times the rate for Adam, which validated better; SGD's
    summed gradient already carries the sharing, so auto leaves its rate alone."""
    assert tiny_config().gconv_lr == "auto"
    assert tiny_config().gconv_rate() == "group_order"
    assert tiny_config(optimizer="sgd").gconv_rate() == "same"
    assert OptimizerConfig(gconv_lr="same").gconv_rate() == "same"
    # a checkpoint written before the option existed ran the GCONV paths at the same rate
    assert absent_means(TrainConfig)["gconv_lr"] == "same"


def test_the_evidence_defaults_are_the_recipes():
    """ScheduleConfig's evidence options take their defaults from EvidenceRecipe's fields
    (the same recipe in force), and ella train's and ella.fit's control is the one loop
    control; PriorLearner's default recipe is EvidenceRecipe()."""
    from ella.engine.recipe import LOOP_CONTROL, EvidenceRecipe
    from ella.engine.schedule import ScheduleConfig
    from ella.learner import PriorLearner
    from ella.train.fit import FitConfig

    default = EvidenceRecipe()
    assert EvidenceRecipe.from_config(ScheduleConfig()).resolved() == default.resolved()
    for config in (TrainConfig(), FitConfig()):
        loop = default.replace(control=LOOP_CONTROL).resolved()
        assert EvidenceRecipe.from_config(config).resolved() == loop
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    assert PriorLearner(model, n_data=10).recipe == default


def test_stacked_fc_maps_are_scaled_by_each_maps_fan_in():
    """An FC stage's maps stacked in one tensor get the rate each map had as an nn.Linear of
    its own: the pixel maps' fan-in is the pixel count, the channel maps' the channel count."""
    from ella.models import mixer

    model = mixer(1, 10, 28, group="C4", width=1)
    optimizer = make_optimizer(model, OptimizerConfig(optimizer="adam", lr_scaling="fan_in"))
    scale_of = {id(p): g["lr_scale"] for g in optimizer.param_groups for p in g["params"]}
    fc = model.layer1.paths.fc
    assert scale_of[id(fc.pixel_maps.weight)] == pytest.approx(FAN_IN_REFERENCE / (28 * 28))
    channel = min(1.0, FAN_IN_REFERENCE / fc.channel_maps.in_features)
    assert scale_of[id(fc.channel_maps.weight)] == pytest.approx(channel)
    assert scale_of[id(fc.channel_maps.bias)] == 1.0


def _fixes(note: str) -> list[dict[str, int]]:
    """The settings of each way out that a no-round note offers, from its words."""
    offered = note.split("; give ", 1)[1].split(", or ")
    return [
        {name: int(value) for name, value in re.findall(r"(\w+)=(\d+)", fix)}
        for fix in offered
        if "learn_priors=False" not in fix
    ]


@pytest.mark.parametrize("burnin", [0, 1, 2, 4, 5, 9])
@pytest.mark.parametrize("frequency", [1, 2, 3, 5])
def test_the_no_round_note_says_when_the_schedule_has_no_round_and_what_gives_one(
    burnin, frequency
):
    from ella.engine.schedule import ScheduleConfig, first_evidence_epoch, no_round_note

    schedule = {"n_epochs_burnin": burnin, "marglik_frequency": frequency}
    first = first_evidence_epoch(burnin, frequency)
    for epochs in range(1, 12):
        config = ScheduleConfig(epochs=epochs, **schedule)
        rounds = config.evidence_epochs()
        assert rounds == [e for e in range(1, epochs + 1) if evidence_due(config, e)]
        assert (rounds[:1] == [first]) == (epochs >= first)  # the first round's epoch
        note = no_round_note(config)
        assert (note is None) == bool(rounds)
        assert no_round_note(ScheduleConfig(epochs=epochs, learn_priors=False, **schedule)) is None
        if note is None:
            continue
        assert note.startswith(f"no evidence round: epochs={epochs} ends before the first round")
        assert (
            f"after epoch {first} (n_epochs_burnin={burnin}, marglik_frequency={frequency})" in note
        )
        assert "prior_precision=0.01" in note and "learn_priors=False" in note
        # every way out it offers gives a round, the first with the fewest epochs that do
        for fix in _fixes(note):
            assert ScheduleConfig(**{"epochs": epochs, **schedule, **fix}).evidence_epochs()
        assert _fixes(note)[0] == {"epochs": first}
        flags = no_round_note(config, flags=True)
        assert f"--epochs {epochs} ends before" in flags and "--no-learn-priors" in flags
        assert "=" not in flags and f"--epochs {first} or more" in flags


def test_learned_invariance_counts_as_learned_by_the_evidence():
    from ella.engine.schedule import no_round_note
    from ella.train.loop import evidence_epochs

    config = TrainConfig(invariance="learned", augment="none", learn_priors=False, epochs=3)
    assert config.learned_by_evidence() == {"eta_init": "the invariance's extents eta"}
    assert evidence_epochs(config) == config.evidence_epochs() == []
    note = no_round_note(config, flags=True)
    assert "the invariance's extents eta keep their initial value (--eta-init 0.1)" in note
    assert "--no-learn-priors" not in note  # the priors are not what it learns
    assert evidence_epochs(TrainConfig(invariance="learned", augment="none", epochs=6)) == [4, 6]
