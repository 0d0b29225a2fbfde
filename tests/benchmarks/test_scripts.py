"""Smoke runs of the benchmark scripts on a tiny budget (results go to a temporary folder)."""

import json

import pytest

from benchmarks import table1, table3
from tests.data.shared import SHARED

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


def test_speed_counts_the_fits_flops_and_times_their_eigenvalues(tmp_path):
    from benchmarks.speed import eigendecomposition_seconds, fit_flops
    from ella.train import Trainer
    from tests.runs import tiny_config

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
    from tests.runs import tiny_config

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
    from tests.runs import tiny_config

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
    from benchmarks.runner import comparison_notes

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
