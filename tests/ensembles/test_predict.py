import math

import pytest
import torch
from torch import nn

from ella.ensembles import (
    Ensemble,
    classification_metrics,
    ensemble_log_probs,
    expected_calibration_error,
    init_members,
    member_log_probs,
    orbit_metrics,
)
from ella.metrics import orbit_same_predictions
from ella.models import mixer


def test_ensemble_prediction_is_the_mean_member_probability():
    log_probs = torch.randn(3, 5, 4).log_softmax(-1)
    expected = log_probs.exp().mean(0).log()
    assert torch.allclose(ensemble_log_probs(log_probs), expected, atol=1e-6)


def test_classification_metrics_by_hand():
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
    labels = torch.tensor([0, 1, 1, 1])
    m = classification_metrics(probs.log(), labels)
    assert m["accuracy"] == pytest.approx(0.75)
    nll = -(math.log(0.9) + math.log(0.4) + math.log(0.7) + math.log(0.8)) / 4
    assert m["nll"] == pytest.approx(nll, rel=1e-6)
    # 15 bins: confidences 0.9 (right), 0.6 (wrong), 0.7 (right), 0.8 (right), one per bin
    ece = (abs(0.9 - 1) + abs(0.6 - 0) + abs(0.7 - 1) + abs(0.8 - 1)) / 4
    assert expected_calibration_error(probs, labels) == pytest.approx(ece, rel=1e-6)
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        classification_metrics(probs, labels[:3])


def test_osp_of_an_ensemble_of_invariant_members_is_the_group_order():
    def gconv():
        return mixer(1, 5, 8, group="C4", paths=("gconv",), width=1)

    ens = Ensemble(init_members(gconv, [0, 1, 2]))
    m = orbit_metrics(ens, torch.randn(10, 1, 8, 8), "C4")
    assert m["osp"] == 4 and m["osp_std"] == 0 and m["member_osp"] == 4
    assert m["orbit_kl"] < 1e-6 and m["group_order"] == 4


def test_orbit_metrics_average_member_probabilities_over_many_inputs():
    # more inputs than one prediction chunk (500), plain non-invariant members
    def linear():
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

    ens = Ensemble(init_members(linear, [0, 1]), vectorize=False)
    x = torch.randn(700, 1, 4, 4)
    m = orbit_metrics(ens, x, "C4")
    orbit = torch.stack([member_log_probs(ens, torch.rot90(x, g, (-2, -1))) for g in range(4)])
    mean_probs = orbit.exp().mean(1)  # (|G|, N, K)
    osp = orbit_same_predictions(mean_probs).double()
    assert m["osp"] == pytest.approx(float(osp.mean()))
    member = [orbit_same_predictions(orbit[:, i]).double().mean() for i in range(2)]
    assert m["member_osp"] == pytest.approx(float(sum(member) / 2))
    assert 1 <= m["osp"] < 4
