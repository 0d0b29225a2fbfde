"""Smoke runs of the experiment scripts on a tiny budget (results go to a temporary folder)."""

import json

import pytest

from experiments import repulsion
from tests.data.test_datasets import SHARED

needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")


@pytest.mark.slow
def test_recipe_smoke(tmp_path):
    from experiments import recipe

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
    from ella.train import TrainConfig, train
    from experiments import prior_reading

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


@pytest.mark.slow
@needs_data
def test_repulsion_smoke(tmp_path):
    repulsion.main(
        ["--profile", "smoke", "--results-dir", str(tmp_path), "--datasets", "fashion_mnist"]
    )
    saved = json.loads((tmp_path / "repulsion.json").read_text())
    assert [r["method"] for r in saved["rows"]] == repulsion.REPULSIVE
    assert all(r["ratio_initial"] > 0 and r["ratio_trained"] > 0 for r in saved["rows"])


@pytest.mark.slow
def test_round_parts_smoke(tmp_path):
    """The parts of a tiny run's rounds: each timed, nested parts within their whole."""
    from experiments import round_parts

    payload = round_parts.main(
        ["--profile", "smoke", "--rounds", "1", "--results-dir", str(tmp_path)]
    )
    parts = payload["seconds_per_round"]
    assert all(s > 0 for s in parts.values())
    assert (
        parts["forward"] + parts["output factors (backward passes, products)"]
        <= (parts["native factors"])
    )
    assert parts["eigenvalues"] <= parts["evidence terms"] <= parts["evidence fit"]
    assert parts["evidence fit"] <= parts["learner fit (fit, step)"] <= parts["round"]
    assert "| eigenvalues |" in (tmp_path / "round_parts_smoke.md").read_text()
    from ella.runtime.timing import sections

    with sections() as after:  # the collection ended with the study
        pass
    assert dict(after) == {}


def test_layer_reduction_smoke(tmp_path):
    """Every phase on 64 images at one seed: the 27 networks per data set, the reductions,
    the greedy retraining and the tables (the guide is written only by a full run)."""
    from experiments import layer_reduction

    layer_reduction.main(
        [
            "--phase",
            "all",
            "--dry",
            "--seeds",
            "0",
            "--threads",
            "1",
            "--results-dir",
            str(tmp_path),
        ]
    )
    assert (tmp_path / "layer_reduction.md").is_file()
    assert "## The candidates against it" in (tmp_path / "layer_reduction.md").read_text()
