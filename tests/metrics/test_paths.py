"""ella.metrics.paths: each path's share of a relaxed layer's output power, checked against
the paths' outputs computed by hand."""

import pytest
import torch
from torch import nn

from ella.metrics import format_path_outputs, path_output_shares
from ella.nn import Lift, RelaxedLayer


def two_layers(**options) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        Lift("C4"),
        RelaxedLayer(1, 2, 8, group="C4", **options),
        RelaxedLayer(2, 2, 8, group="C4", paths=("conv", "gconv")),
    )


def test_shares_are_each_paths_mean_square_over_the_layers_sum(float64):
    model = two_layers().double()
    x = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    rows = path_output_shares(model, x)
    assert [r["layer"] for r in rows] == ["1", "2"]  # the order the forward pass reached
    z = model[0](x)
    first = model[1]
    with torch.no_grad():
        by_hand = {p: float(first.paths[p](z).square().mean()) for p in ("fc", "conv", "gconv")}
    total = sum(by_hand.values())
    for p, value in by_hand.items():
        assert rows[0]["power"][p] == pytest.approx(value, rel=1e-12)
        assert rows[0][p] == pytest.approx(100 * value / total, rel=1e-12)
    assert sum(rows[1][p] for p in ("conv", "gconv")) == pytest.approx(100)
    assert "fc" not in rows[1]  # a layer without that path


def test_a_path_at_zero_carries_nothing_and_scaling_a_path_scales_its_power(float64):
    model = two_layers(zero_init=("fc",)).double()
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    before = path_output_shares(model, x)[0]
    assert before["fc"] == 0 and before["conv"] + before["gconv"] == pytest.approx(100)
    with torch.no_grad():  # the CONV path's output is linear in its weight and bias
        for param in model[1].paths["conv"].parameters():
            param.mul_(3.0)
    after = path_output_shares(model, x)[0]
    assert after["power"]["conv"] == pytest.approx(9 * before["power"]["conv"], rel=1e-10)
    assert after["power"]["gconv"] == pytest.approx(before["power"]["gconv"], rel=1e-12)


def test_the_hooks_are_removed_and_the_model_is_unchanged():
    model = two_layers().eval()
    x = torch.randn(3, 1, 8, 8)
    expected = model(x)
    path_output_shares(model, x)
    assert all(not m._forward_hooks for m in model.modules())
    assert torch.equal(model(x), expected)


def test_a_model_without_relaxed_layers_is_refused():
    with pytest.raises(ValueError, match="no RelaxedLayer"):
        path_output_shares(nn.Linear(4, 2), torch.randn(2, 4))


def test_the_table_has_a_row_per_layer_and_the_mean():
    rows = [
        {"layer": "a", "fc": 10.0, "conv": 30.0, "gconv": 60.0},
        {"layer": "b", "fc": 30.0, "conv": 50.0, "gconv": 20.0},
    ]
    lines = format_path_outputs(rows).splitlines()
    assert lines[2].split() == ["a", "10.0", "30.0", "60.0"]
    assert lines[-1].split() == ["mean", "20.0", "40.0", "40.0"]
