"""experiments.subset_noise: the damped update's noise and the refits of a finished run."""

import math

import pytest
import torch

from experiments import subset_noise


def noise_change_scale(step: float) -> float:
    """Standard deviation of a round's change per unit of the optima's: for independent
    optima of variance sigma^2, x <- x + s (o - x) leaves x with variance
    s sigma^2 / (2 - s) and the change s (o - x) with variance 2 s^2 sigma^2 / (2 - s)."""
    return step * math.sqrt(2.0 / (2.0 - step))


@pytest.mark.parametrize("step", [0.3, 0.5, 1.0])
def test_noise_change_scale_is_the_damped_recursions_stationary_change(step):
    """Simulate x <- x + s (o - x) with standard normal optima: the changes' standard
    deviation after the start is forgotten matches the closed form."""
    generator = torch.Generator().manual_seed(1)
    optima = torch.randn(200_000, generator=generator, dtype=torch.float64)
    x, changes = 0.0, []
    for k, o in enumerate(optima.tolist()):
        change = step * (o - x)
        x += change
        if k >= 100:
            changes.append(change)
    measured = torch.tensor(changes).std().item()
    assert measured == pytest.approx(noise_change_scale(step), rel=0.01)
    assert noise_change_scale(1.0) == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize("step", [0.5, 1.0])
def test_damped_rounds_bootstrap_the_draws_with_the_closed_form_spread(step):
    """Rounds whose optimum is one of a few draws change with the stationary spread of
    noise_change_scale (which holds for any independent optima, not only Gaussian ones);
    a group whose draws agree never changes."""
    optima = torch.tensor([[0.0, 1.0], [1.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    changes = subset_noise.damped_rounds(optima, step, rounds=40_000)
    assert changes.shape == (40_000, 2)
    population_sd = optima[:, 0].std(unbiased=False).item()
    expected = noise_change_scale(step) * population_sd
    assert changes[:, 0].std().item() == pytest.approx(expected, rel=0.03)
    assert changes[:, 1].abs().max().item() == 0.0


@pytest.mark.slow
def test_refits_of_all_images_agree_and_subsets_spread(tmp_path):
    """With the exact GGN, every draw of M = N fits the same factors (zero spread, the
    all-N optimum); draws of M < N differ."""
    from ella.train import TrainConfig, train

    config = TrainConfig(
        train_size=32, test_size=16, epochs=1, width=1, batch_size=16, n_epochs_burnin=1,
        marglik_frequency=1, ggn="exact", progress=False,
    )  # fmt: skip
    train(config, tmp_path / "run")
    row = subset_noise.measure(tmp_path / "run", [32, 16], draws=2, progress=False)
    assert row["n_train"] == 32 and row["ggn"] == "exact"
    all_n, half = row["sizes"]
    assert all_n["sd_max"] == 0.0 and all_n["offset_max"] == 0.0
    assert all_n["largest_change_median"] == 0.0 and all_n["converged_fraction"] == 1.0
    assert all_n["log_evidence_mean"] == pytest.approx(row["full_log_evidence"], rel=1e-6)
    assert half["sd_max"] > 0.0
    assert set(half["sd"]) == set(all_n["sd"]) and len(half["sd"]) > 8
    assert "| 16 (2 draws) |" in subset_noise.markdown([row])


def test_main_refuses_a_directory_without_results_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        subset_noise.main([str(tmp_path)])
    assert "no results.json" in capsys.readouterr().err


@pytest.mark.slow
def test_refits_with_a_control_variate(tmp_path):
    """The control is the trainer's (training: two augmented passes' traces at the final
    weights; forward: the current traces); on all N images it changes nothing."""
    from ella.choices import SubsetControl
    from ella.train import TrainConfig, train
    from ella.train.runs import load_run

    config = TrainConfig(
        train_size=32, test_size=16, epochs=1, width=1, batch_size=16, n_epochs_burnin=1,
        marglik_frequency=1, ggn="exact", progress=False,
    )  # fmt: skip
    train(config, tmp_path / "run")
    trainer = subset_noise.trainer_for(load_run(tmp_path / "run"), 16, None, "training")
    trace = trainer.output_trace
    assert trace.shape == (32,) and torch.isfinite(trace).all() and (trace >= 0).all()
    data = trainer.evidence_data()
    assert trainer.subset_curvature_ratio(data) != 1.0
    row = subset_noise.measure(
        tmp_path / "run", [32, 16], draws=2, progress=False, control=SubsetControl.FORWARD
    )
    all_n, half = row["sizes"]
    assert row["subset_control"] == "forward" and all_n["sd_max"] == 0.0
    assert 0.0 <= half["common_sd"] <= half["sd_max"] + 1e-12
    assert "| exact, forward |" in subset_noise.markdown([row])
