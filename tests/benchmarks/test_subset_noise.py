"""benchmarks.subset_noise: the damped update's noise and the refits of a finished run."""

import math

import pytest
import torch

from benchmarks import subset_noise


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
    assert measured == pytest.approx(subset_noise.noise_change_scale(step), rel=0.01)
    assert subset_noise.noise_change_scale(1.0) == pytest.approx(math.sqrt(2))


def test_expected_largest_change_of_one_group_is_the_half_normal_mean():
    sigma = torch.tensor([0.1])
    expected = subset_noise.noise_change_scale(0.5) * 0.1 * math.sqrt(2 / math.pi)
    assert subset_noise.expected_largest_change(sigma, 0.5) == pytest.approx(expected, rel=0.02)
    assert subset_noise.expected_largest_change(torch.zeros(5), 0.5) == 0.0


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
    assert all_n["log_evidence_mean"] == pytest.approx(row["full_log_evidence"], rel=1e-6)
    assert half["sd_max"] > 0.0
    assert set(half["sd"]) == set(all_n["sd"]) and len(half["sd"]) > 8
    assert "| 16 (2 draws) |" in subset_noise.markdown([row])


def test_main_refuses_a_directory_without_results_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        subset_noise.main([str(tmp_path)])
    assert "no results.json" in capsys.readouterr().err
