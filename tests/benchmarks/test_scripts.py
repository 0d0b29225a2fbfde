"""Smoke runs of the benchmark scripts on a tiny budget (results go to a temporary folder)."""

import json

import pytest

from benchmarks import table1, table3

from ..data.test_datasets import SHARED

needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")


@pytest.mark.slow
@needs_data
def test_table1_smoke(tmp_path):
    payload = table1.main(["--profile", "smoke", "--results-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "table1.json").read_text())
    assert saved["profile"] == "smoke" and len(saved["rows"]) == 10
    assert {(r["task"], r["model"]) for r in saved["rows"]} == set(table1.PAPER)
    assert all(0 <= r["test_accuracy"] <= 1 for r in saved["rows"])
    assert set(payload["claims"]) and (tmp_path / "table1.md").read_text().startswith("# ELLA")


@pytest.mark.slow
@needs_data
def test_table3_smoke(tmp_path):
    argv = ["--profile", "smoke", "--results-dir", str(tmp_path)]
    table3.main([*argv, "--datasets", "rotated_mnist", "cifar10"])
    saved = json.loads((tmp_path / "table3.json").read_text())
    assert [(r["dataset"], r["model"]) for r in saved["rows"]] == [
        ("rotated_mnist", "map"), ("rotated_mnist", "learned"),
        ("cifar10", "map"), ("cifar10", "learned"),
    ]  # fmt: skip
    for row in saved["rows"]:
        assert set(row["shares"]) >= {"fc", "conv", "gconv"}
        assert sum(row["shares"][p] for p in ("fc", "conv", "gconv")) == pytest.approx(100)
    assert saved["rows"][-1]["source"] == "subset"
    for row in saved["rows"]:  # the shares of every evidence round (epochs 1 and 2)
        assert [h["epoch"] for h in row["shares_history"]] == (
            [1, 2] if row["model"] == "learned" else []
        )
    assert (
        "rotated_mnist, learned: shares by evidence round" in (tmp_path / "table3.md").read_text()
    )


@pytest.mark.slow
@needs_data
def test_invariance_smoke(tmp_path):
    from benchmarks import invariance

    argv = ["--profile", "smoke", "--results-dir", str(tmp_path)]
    invariance.main([*argv, "--datasets", "mnist", "rotated_mnist"])
    saved = json.loads((tmp_path / "invariance.json").read_text())
    assert saved["profile"] == "smoke"
    assert {(r["dataset"], r["method"]) for r in saved["rows"]} == {
        (d, m) for d in ("mnist", "rotated_mnist") for m in invariance.METHODS
    }
    for row in saved["rows"]:  # the result-file contract
        assert 0 <= row["test_accuracy"] <= 1
        if row["method"] != "none":
            assert set(row["eta"]) == set(invariance.GENERATORS)
    assert any("rotate" in claim for claim in saved["claims"])
    assert (tmp_path / "invariance_eta.png").stat().st_size > 1000


@pytest.mark.slow
def test_recipe_smoke(tmp_path):
    from benchmarks import recipe

    argv = ["--profile", "smoke", "--results-dir", str(tmp_path), "--recipes", "default"]
    payload = recipe.main(argv)
    saved = json.loads((tmp_path / "recipe.json").read_text())
    assert len(saved["rows"]) == len(recipe.DATASETS) * len(recipe.PRIORS)
    for row in saved["rows"]:
        learned = row["priors"] != "map"
        assert len(row["prior_gaps"]) == (2 if learned else 0)
        if row["priors"] == "optimum":  # the rounds end at their optimum
            assert max(row["prior_gaps"]) < 1e-6
        assert set(row["squared_norms"]) == set(row["prior_precision"])
    assert any("change training" in claim for claim in payload["claims"])
    assert "| mnist_subset | default | map |" in (tmp_path / "recipe.md").read_text()


@pytest.mark.slow
def test_prior_reading_rereads_a_run_as_its_trainer_did(tmp_path):
    """On a run whose last epoch fitted the evidence (exact GGN, all images) and set the
    priors to its optimum, the zero-mean re-reading gives the run's own reported shares;
    every path of every layer gets a movement row, and training moved some weights."""
    from benchmarks import prior_reading
    from ella.train import TrainConfig, train

    config = TrainConfig(
        train_size=32, test_size=16, epochs=1, width=1, batch_size=16, n_epochs_burnin=1,
        marglik_frequency=1, prior_update="optimum", prior_step=1.0, ggn="exact",
        progress=False,
    )  # fmt: skip
    results = train(config, tmp_path / "run")
    text = prior_reading.main([str(tmp_path / "run")])
    mean = "/".join(
        f"{sum(r[p] for r in results['effective_parameters']) / 8:.0f}"
        for p in ("fc", "conv", "gconv")
    )
    assert f"optimum, zero-mean prior: mean shares {mean} " in text
    # the run's last round set the priors to this optimum at these weights and this fit
    # (all images, exact GGN), so the log evidence there is the run's own
    evidence = [line for line in text.splitlines() if line.startswith("  - log evidence")]
    assert len(evidence) == 2
    value = float(evidence[0].split()[3])
    assert value == pytest.approx(results["log_marglik_reported_state"], rel=1e-5, abs=0.1)
    terms = evidence[0].split("(")[1].replace(",", "").replace(";", "").split()
    parts = [float(terms[2]), float(terms[7]), float(terms[11])]
    assert sum(parts) == pytest.approx(value, abs=0.15)
    rows = [
        line.split("|")
        for line in text.splitlines()
        if line.startswith("| layer") and line[7].isdigit()
    ]
    assert {(r[1].strip(), r[2].strip()) for r in rows} == {
        (f"layer{i}", p) for i in range(1, 9) for p in ("fc", "conv", "gconv")
    }
    assert max(float(r[4]) for r in rows) > 0


def test_speed_counts_the_fits_flops_and_times_their_eigenvalues(tmp_path):
    from benchmarks.speed import eigendecomposition_seconds, fit_flops
    from ella.train import Trainer
    from tests.train.test_loop import tiny_config

    trainer = Trainer(tiny_config(), tmp_path)
    exact, mc = fit_flops(trainer, "exact"), fit_flops(trainer, "mc")
    # the exact GGN backpropagates one column per class (10), the MC GGN one
    assert 0 < mc < exact
    assert trainer.priors.backend == "native" and trainer.priors.ggn == "mc"
    assert eigendecomposition_seconds(trainer) > 0


def test_speed_counts_the_in_place_products_the_flop_counter_leaves_at_zero():
    """``baddbmm_`` and ``addmm_`` (the native factor sums; torch 2.13's counter counts them
    as 0) count ``2 n k m`` per matrix."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.speed import _accumulating_product_flops

    aten = torch.ops.aten
    mapping = dict.fromkeys([aten.baddbmm_, aten.addmm_], _accumulating_product_flops)
    a, b, c = torch.randn(3, 5, 4), torch.randn(3, 4, 6), torch.zeros(3, 5, 6)
    with FlopCounterMode(display=False, custom_mapping=mapping) as counted:
        c.baddbmm_(a, b)
        c[0].addmm_(a[0], b[0])
    assert counted.get_total_flops() == 2 * 3 * 5 * 4 * 6 + 2 * 5 * 4 * 6


def test_speed_times_epochs_and_native_fits_in_turns(tmp_path):
    from benchmarks.speed import paired_native_fits
    from ella.train import Trainer
    from tests.train.test_loop import tiny_config

    trainer = Trainer(tiny_config(), tmp_path)
    epoch, fits, ratios = paired_native_fits(trainer, rounds=1)
    assert epoch > 0 and set(fits) == {"native_exact", "native_mc", "native_stratified"}
    # one round: each ratio is that round's fit over its epoch
    for ggn in ("exact", "mc", "stratified"):
        assert ratios[ggn] == pytest.approx(fits[f"native_{ggn}"] / epoch)


def test_speed_runs_map_and_ella_in_turns(monkeypatch):
    """``paired_runs`` alternates a MAP run and an ELLA run of the same config, and
    returns each kind's seconds in the order run."""
    import benchmarks.speed as speed
    from tests.train.test_loop import tiny_config

    ran = []

    def fake_timed_run(config):
        ran.append(config)
        return float(len(ran))

    monkeypatch.setattr(speed, "timed_run", fake_timed_run)
    config = tiny_config()
    map_s, ella_s = speed.paired_runs(config, pairs=3)
    assert [c.learn_priors for c in ran] == [False, True] * 3
    assert ran[1] is config and ran[0].to_dict() == {**config.to_dict(), "learn_priors": False}
    assert map_s == [1.0, 3.0, 5.0] and ella_s == [2.0, 4.0, 6.0]


def test_comparison_notes_name_a_run_whose_training_collapsed():
    from benchmarks._runner import comparison_notes

    collapse = {
        "best": 0.994, "best_epoch": 56, "lowest": 0.154, "lowest_epoch": 63,
        "final": 0.474, "final_epoch": 80,
    }  # fmt: skip
    rows = [
        {"dataset": "rotated_mnist", "model": "map", "test_accuracy": 0.774},
        {"dataset": "rotated_mnist", "model": "learned", "test_accuracy": 0.446,
         "training_collapse": collapse},
        {"dataset": "mnist", "model": "map", "test_accuracy": 0.9, "training_collapse": None},
    ]  # fmt: skip
    notes = comparison_notes(rows, "dataset", "map", "learned")
    assert notes[0].startswith(
        "rotated_mnist, learned: training collapsed: train accuracy 99.4% at epoch 56, "
        "15.4% at epoch 63, 47.4% at the end (epoch 80)."
    )
    assert sum("collapsed" in note for note in notes) == 1
