"""ella.learner.report: the share summaries, checked against hand-computed numbers."""

import pytest

from ella.learner.report import share_summary, shares_history_line


def layer(fc: float, conv: float, gconv: float) -> dict:
    return {"fc": fc, "conv": conv, "gconv": gconv}


def test_share_summary_is_the_mean_and_range_over_layers():
    s = share_summary([layer(10, 30, 60), layer(50, 20, 30), layer(0, 100, 0)])
    assert s["fc"] == pytest.approx(20) and s["conv"] == pytest.approx(50)
    assert s["gconv"] == pytest.approx(30)
    assert (s["fc_min"], s["fc_max"], s["gconv_min"], s["gconv_max"]) == (0, 50, 0, 60)
    assert share_summary([]) == {}  # a network without relaxed layers


def test_shares_history_line_shows_first_last_and_evenly_spaced_rounds():
    history = [{"epoch": 2 * i, **layer(50 - i, 25, 25 + i)} for i in range(1, 10)]
    line = shares_history_line(history, points=3)
    assert line == (
        "shares by evidence round (FC/CONV/GCONV %): "
        "epoch 2 49/25/26, epoch 10 45/25/30, epoch 18 41/25/34"
    )
    two = shares_history_line(history[:2])  # fewer rounds than points: each once
    assert two.endswith("epoch 2 49/25/26, epoch 4 48/25/27")
    single_path = shares_history_line([{"epoch": 1, "conv": 100.0}] * 2, points=2)
    assert single_path.endswith("epoch 1 -/100/-, epoch 1 -/100/-")


def test_null_model_line_only_where_the_class_frequencies_have_more_evidence():
    from ella.learner.report import null_model_line

    results = {
        "class_frequency_log_evidence": -2319.8,
        "log_marglik_reported_state": -24084.0,
        "train_size": 1000,
        "config": {"learn_priors": True},
    }
    line = null_model_line(results)
    assert line.startswith("the class frequencies alone (no network) have log evidence -2319.8")
    assert "at 1000 training images its Occam factor outweighs its fit" in line
    assert null_model_line({**results, "log_marglik_reported_state": -2000.0}) is None
    assert null_model_line({**results, "config": {"learn_priors": False}}) is None  # MAP
    del results["class_frequency_log_evidence"]  # a run from before it was recorded
    assert null_model_line(results) is None


def test_the_table_has_a_residual_column_where_the_layers_have_that_path():
    from ella.learner.report import format_table

    row = {
        "layer": "layer1",
        **layer(0.0, 0.0, 40.0),
        "residual": 60.0,
        "effective": {"fc": 0.0, "conv": 0.0, "gconv": 4.0, "residual": 6.0},
        "parameters": {"fc": 0, "conv": 0, "gconv": 10, "residual": 30},
        "prior_variance": {"gconv": 1.0, "residual": 0.25},
    }
    lines = format_table({"effective_parameters": [row]}).splitlines()
    assert lines[0].split()[:6] == ["layer", "FC", "%", "CONV", "%", "GCONV"]
    assert "RESIDUAL %" in lines[0] and "(fc/conv/gconv/residual)" in lines[0]
    assert lines[2].split()[:5] == ["layer1", "0.0", "0.0", "40.0", "60.0"]
    assert "0/0/4/6 of 40" in lines[2] and "-/-/1/0.25" in lines[2]
    assert "residual 60-60" in lines[-2]
    assert lines[-1] == "symmetry breaking (the residual's prior variance / GCONV's): layer1 0.25"
    off = {**row, "prior_variance": {"gconv": 1.0, "residual": 0.001}}
    assert format_table({"effective_parameters": [off]}).endswith(
        "layer1 0.001; residual switched off (ella export: exactly equivariant) in layer1"
    )
    paper = {**row, "effective": {"fc": 1.0, "conv": 1.0, "gconv": 1.0}}
    del paper["residual"]
    assert "RESIDUAL" not in format_table({"effective_parameters": [paper]})


def test_the_table_says_when_no_evidence_round_ran():
    from ella.learner.report import format_table, no_round_line

    config = {"learn_priors": True, "epochs": 2, "n_epochs_burnin": 4, "marglik_frequency": 2,
              "prior_precision": 0.01, "invariance": "none", "eta_init": 0.1}  # fmt: skip
    results = {"effective_parameters": [], "log_marglik_epochs": [], "config": config}
    line = format_table(results).splitlines()[-1]
    assert line == no_round_line(results)
    assert line.startswith(
        "warning: no evidence round: --epochs 2 ends before the first round, after epoch 4 "
        "(--n-epochs-burnin 4, --marglik-frequency 2), so the evidence learns nothing: the "
        "prior precisions keep their initial value (--prior-precision 0.01)"
    )
    assert line.endswith("or --no-learn-priors to train a MAP network by intent")
    assert no_round_line({**results, "log_marglik_epochs": [4]}) is None  # a round ran
    assert no_round_line({**results, "config": {**config, "learn_priors": False}}) is None
    assert no_round_line({**results, "config": {}}) is None  # no schedule to word it by
    assert no_round_line({"effective_parameters": []}) is None  # a learner's report
    learned_eta = {**config, "learn_priors": False, "invariance": "learned"}
    assert "extents eta keep their initial value (--eta-init 0.1)" in no_round_line(
        {**results, "config": learned_eta}
    )
