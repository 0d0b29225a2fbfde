import math

import pytest
import torch
from torch import nn

from ella.ensembles import (
    EnsembleConfig,
    EnsembleTrainer,
    augment_with_group,
    log_kernel_density,
    member_features,
)
from ella.train import TrainingDivergedError, cosine_lr
from tests.ensembles.tiny_trainer import config, tiny_data, tiny_model, trainer


def member_states(t: EnsembleTrainer):
    return t.ensemble.member_state_dicts()


def assert_states_close(a, b, atol):
    for sa, sb in zip(a, b, strict=True):
        for k in sa:
            assert torch.allclose(sa[k], sb[k], atol=atol), k


@pytest.mark.parametrize(
    "method,extra",
    [
        ("de", {"augment": "orbit", "augment_group": "C4"}),
        ("weight_rde", {"weight_decay": 1e-3}),
        ("function_rde", {"augment": "sampled", "augment_group": "C8"}),
        ("forde", {}),
        ("forde", {"lengthscales": "mix", "alpha": 0.5, "optimizer": "sgd", "lr": 0.05}),
    ],
)
def test_vectorised_and_looped_training_give_the_same_members(method, extra):
    runs = []
    for vectorize in (True, False):
        t = trainer(method=method, vectorize=vectorize, **extra)
        t.run(evaluate=False)
        runs.append(member_states(t))
    assert_states_close(runs[0], runs[1], atol=1e-4)


def test_repulsion_off_reproduces_independently_trained_members():
    data = tiny_data()
    ens = trainer(data, method="de", init_seed=10, augment="sampled", augment_group="C4")
    ens.run(evaluate=False)
    cfg = ens.config
    total = cfg.epochs * ens.steps_per_epoch
    for i in range(cfg.members):
        # a plain PyTorch loop: seed, build, Adam, cosine schedule, the same batches
        torch.manual_seed(10 + i)
        model = tiny_model()
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        step = 0
        for epoch in range(cfg.epochs):
            for x, y, _ in ens.batches(epoch):
                for group in opt.param_groups:
                    group["lr"] = cosine_lr(step, total, cfg.lr, cfg.lr_min)
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
        assert_states_close([ens.ensemble.member_state_dicts()[i]], [model.state_dict()], 1e-5)
    # and a one-member run with the member's seed is that member too
    single = trainer(data, method="de", members=1, init_seed=11, augment="sampled")
    single.run(evaluate=False)
    assert_states_close(member_states(single), member_states(ens)[1:2], 1e-5)


def test_zero_repulsion_is_a_deep_ensemble_and_repulsion_changes_members():
    de = trainer(method="de")
    de.run(evaluate=False)
    off = trainer(method="forde", repulsion_scale=0.0)
    off.run(evaluate=False)
    on = trainer(method="forde", repulsion_scale=1.0)
    on.run(evaluate=False)
    assert_states_close(member_states(off), member_states(de), 1e-6)
    diff = (on.ensemble.flat_parameters() - de.ensemble.flat_parameters()).abs().max()
    assert diff > 1e-3


@pytest.mark.parametrize("method", ["weight_rde", "function_rde", "forde"])
def test_trainer_gradient_is_autograd_of_the_kernel_density_objective(float64, method):
    t = trainer(method=method, repulsion_scale=0.7, weight_decay=0.01, members=3)
    x, y, _ = next(t.batches(0))
    x, y = x.double(), y
    params = list(t.ensemble.parameters())
    surrogate, _ = t.loss(x, y)
    wgd = torch.autograd.grad(surrogate, params)
    # the kernel-density form: CE + L2 + scale * log sum_j k(theta_i, theta_j) (theta_j fixed)
    logits, phi = member_features(method, t.ensemble, x, y)
    ce = nn.functional.cross_entropy(logits.flatten(0, 1), y.repeat(3), reduction="none")
    theta = t.ensemble.flat_parameters()
    objective = ce.view(3, -1).mean(1).sum() + 0.005 * theta.square().sum()
    objective = objective + 0.7 * log_kernel_density(phi).sum()
    reference = torch.autograd.grad(objective, params)
    for a, b in zip(wgd, reference, strict=True):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-8)


def test_orbit_augmentation_puts_every_transform_in_the_batch():
    x, y = torch.randn(3, 1, 6, 6), torch.tensor([0, 1, 2])
    xa, ya = augment_with_group(x, y, "orbit", "C4")
    assert xa.shape == (12, 1, 6, 6) and ya.tolist() == [0, 1, 2] * 4
    for g in range(4):
        assert torch.equal(xa[3 * g : 3 * g + 3], torch.rot90(x, g, dims=(-2, -1)))
    xs, ys = augment_with_group(x, y, "sampled", "C4", torch.Generator().manual_seed(0))
    assert torch.equal(ys, y)
    for i in range(3):
        assert any(torch.equal(xs[i], torch.rot90(x[i], g, dims=(-2, -1))) for g in range(4))
    with pytest.raises(ValueError, match="unknown augmentation"):
        augment_with_group(x, y, "all", "C4")


def test_resume_continues_to_the_same_members(tmp_path):
    straight = trainer(method="forde")
    straight.run(evaluate=False)

    class SimulatedCrashError(Exception):
        pass

    first = EnsembleTrainer(config(method="forde"), tmp_path, tiny_model, tiny_data())
    save = first.save

    def save_then_stop():  # the process dies right after the first checkpoint
        save()
        raise SimulatedCrashError

    first.save = save_then_stop
    with pytest.raises(SimulatedCrashError):
        first.run(evaluate=False)
    resumed = EnsembleTrainer(config(method="forde"), tmp_path, tiny_model, tiny_data())
    resumed.run(resume=True, evaluate=False)
    assert resumed.state.epoch == 2
    assert_states_close(member_states(resumed), member_states(straight), 1e-6)


def test_evaluation_writes_results(tmp_path):
    t = EnsembleTrainer(
        config(epochs=1, corruption_severities=(1, 5), osp_group="C4"),
        tmp_path, tiny_model, tiny_data(),
    )  # fmt: skip
    results = t.run()
    assert (tmp_path / "results.json").is_file() and (tmp_path / "checkpoint.pt").is_file()
    assert 0 <= results["test"]["accuracy"] <= 1 and results["test"]["nll"] > 0
    assert set(results["corrupted"]["by_corruption"]["contrast"]) == {1, 5}
    assert 1 <= results["orbit"]["osp"] <= 4


def test_nan_loss_is_a_clear_error():
    def broken():
        model = tiny_model()
        with torch.no_grad():
            model.head[-1].bias.fill_(math.nan)
        return model

    t = EnsembleTrainer(config(), model_fn=broken, data=tiny_data())
    with pytest.raises(TrainingDivergedError, match="smaller --lr"):
        t.run()


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"method": "svgd"}, "unknown method"),
        ({"augment_group": "C0"}, "unknown group"),
        ({"method": "forde", "members": 1}, "members >= 2"),
        ({"corruption_severities": (6,)}, "severities"),
        ({"lengthscales": "learned"}, "unknown lengthscales"),
        ({"model": "resnet"}, "unknown model"),
    ],
)
def test_bad_configurations_are_clear_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        config(**kw).validate()


@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_plain_baseline_members_from_the_configuration(model):
    data = tiny_data(size=8)
    t = EnsembleTrainer(config(model=model, epochs=1, method="forde"), data=data)
    assert not any("layer1" in n for n, _ in t.ensemble.template.named_parameters())
    t.run(evaluate=False)
    assert t.state.epoch == 1


def test_gradient_norms_split_the_update_into_its_terms():
    de = trainer(method="de")
    x, y, _ = next(de.batches(0))
    assert set(de.gradient_norms(x, y)) == {"likelihood"}
    t = trainer(method="forde", weight_decay=1e-3, repulsion_scale=0.5)
    norms = t.gradient_norms(x, y)
    assert set(norms) == {"likelihood", "prior", "repulsion"}
    assert norms["repulsion"] > 0
    half = trainer(method="forde", weight_decay=1e-3, repulsion_scale=0.25).gradient_norms(x, y)
    assert half["repulsion"] == pytest.approx(norms["repulsion"] / 2, rel=1e-4)
    assert half["likelihood"] == pytest.approx(norms["likelihood"], rel=1e-6)


def test_the_default_members_are_the_mixer_the_config_names():
    """Every mixer option reaches the members (gconv_mode and fc_mode were once dropped)."""
    from ella.data import load_dataset
    from ella.ensembles.trainer import default_model_fn

    config = EnsembleConfig(
        model="mixer", paths=("fc", "gconv"), gconv_mode="shared", fc_mode="dense", width=1,
        group="D4", progress=False,
    )  # fmt: skip
    data = load_dataset("mnist_subset", train_size=8, test_size=8)
    member = default_model_fn(config, data)()
    assert member.group.name == "D4"
    for layer in member.layers.values():
        assert layer.path_names == ("fc", "gconv")
        assert layer.paths["gconv"].mode == "shared" and layer.paths["fc"].mode == "dense"
