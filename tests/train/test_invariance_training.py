"""The trainer with input invariance: learned (LILA), Augerino, full, and resume."""

import json

import pytest
import torch

from ella.invariance import GENERATORS, InvariantClassifier
from ella.train import TrainConfig, Trainer


def config(**overrides) -> TrainConfig:
    values = dict(
        model="mlp",
        width=1,
        train_size=64,
        test_size=32,
        epochs=2,
        batch_size=32,
        n_epochs_burnin=1,
        marglik_frequency=1,
        n_hypersteps=3,
        invariance="learned",
        augment="none",
        invariance_samples=2,
        invariance_eval_samples=3,
        invariance_marglik_size=40,
        prior_structure="tensor",
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


def test_learned_invariance_moves_eta_and_reports_it(tmp_path):
    trainer = Trainer(config(generators=("rotate", "translate_x")), tmp_path)
    assert isinstance(trainer.model, InvariantClassifier)
    results = trainer.run()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["eta"]) == set(GENERATORS)
    assert saved["eta"]["rotate"] != pytest.approx(0.1)  # learned away from eta_init
    assert saved["eta"]["translate_x"] != pytest.approx(0.1)
    assert saved["eta"]["shear"] == 0.0  # inactive generators stay at 0
    assert [row["epoch"] for row in saved["eta_history"]] == [1, 2]
    assert len(saved["log_marglik"]) == 2
    assert saved["prior_precision"] != {k: 0.01 for k in saved["prior_precision"]}
    assert (tmp_path / "eta.png").stat().st_size > 1000
    assert "extents eta: translate_x" in results["table"]


def test_eta_alone_when_priors_are_fixed(tmp_path):
    trainer = Trainer(config(learn_priors=False), tmp_path)
    results = trainer.run()
    assert all(v == pytest.approx(0.01) for v in results["prior_precision"].values())
    assert len(results["log_marglik"]) == 2
    assert results["eta"]["rotate"] != pytest.approx(0.1)


def test_augerino_grows_eta_and_full_keeps_it(tmp_path):
    augerino = Trainer(
        config(invariance="augerino", learn_priors=False, augerino_reg=1.0), tmp_path / "a"
    ).run()
    assert augerino["log_marglik"] == []  # eta is trained by the loss, not the evidence
    assert all(augerino["eta"][g] > 0.1 for g in GENERATORS)
    full = Trainer(config(invariance="full", learn_priors=False), tmp_path / "f").run()
    assert full["eta"]["rotate"] == pytest.approx(torch.pi)


def test_none_is_the_plain_network(tmp_path):
    trainer = Trainer(config(invariance="none", learn_priors=False), tmp_path)
    assert not isinstance(trainer.model, InvariantClassifier)
    assert trainer.run()["eta"] == {}


@pytest.mark.slow
def test_resume_reproduces_learned_eta(tmp_path):
    full = Trainer(config(epochs=3), tmp_path / "full")
    full.run()

    class StopError(Exception):
        pass

    def stop(trainer):
        if trainer.state.epoch == 2:
            raise StopError

    with pytest.raises(StopError):
        Trainer(config(epochs=3), tmp_path / "cut", on_epoch_end=stop).run()
    resumed = Trainer(config(epochs=3), tmp_path / "cut")
    resumed.run(resume=True)
    assert torch.equal(full.model.eta, resumed.model.eta)
    for a, b in zip(full.net.parameters(), resumed.net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_bad_invariance_options(tmp_path):
    with pytest.raises(ValueError, match="unknown invariance 'lila'"):
        Trainer(config(invariance="lila"), tmp_path)
    with pytest.raises(ValueError, match="unknown generator"):
        Trainer(config(generators=("rotate", "zoom")), tmp_path)
    with pytest.raises(ValueError, match="invariance_samples must be at least 1"):
        Trainer(config(invariance_samples=-1), tmp_path)
    with pytest.raises(ValueError, match="--augment rotate would impose.*add --augment none"):
        Trainer(config(augment="rotate"), tmp_path)
    with pytest.raises(ValueError, match="unknown model"):
        Trainer(config(model="resnet"), tmp_path)
