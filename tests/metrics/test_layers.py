import json

import pytest
import torch
from torch import nn

from ella.metrics import activation_of, feature_invariance, measure_symmetry, plot_symmetry
from ella.models import mixer


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_gconv_only_mixer_measures_zero_everywhere_and_fc_only_does_not():
    x = torch.randn(8, 1, 12, 12)
    gconv = mixer(1, 5, 12, group="C4", paths=("gconv",), width=1)
    report = measure_symmetry(gconv, x)
    assert [r.name for r in report.layers] == [f"layer{i}" for i in range(1, 9)] + ["pool"]
    for row in report.layers:
        assert row.up_to_layer.value < 1e-6 and row.layer_alone.value < 1e-6, row.name
    assert all(d.value < 1e-6 for d in report.outputs.values())
    assert torch.equal(report.osp, torch.full((8,), 4))

    fc = measure_symmetry(mixer(1, 5, 12, group="C4", paths=("fc",), width=1), x)
    for row in fc.layers[:-1]:  # every FC layer breaks the symmetry, alone and in sequence
        assert row.up_to_layer.normalized > 0.3 and row.layer_alone.normalized > 0.3, row.name
    assert fc.layers[-1].layer_alone.value < 1e-6  # the group pool itself is invariant
    assert fc.outputs["logits, euclidean"].normalized > 0.1


def test_layer_alone_finds_the_one_layer_that_breaks_symmetry():
    x = torch.randn(6, 1, 12, 12)
    model = mixer(1, 5, 12, group="C4", paths=("gconv",), width=1)
    broken = mixer(1, 5, 12, group="C4", paths=("fc",), width=1)
    model.layer3 = broken.layer3  # one FC layer in a GCONV network
    report = measure_symmetry(model, x, layers=["layer2", "layer3", "layer4"])
    alone = {r.name: r.layer_alone.value for r in report.layers}
    up_to = {r.name: r.up_to_layer.value for r in report.layers}
    assert alone["layer2"] < 1e-6 and alone["layer4"] < 1e-6 and alone["layer3"] > 0.05
    assert up_to["layer2"] < 1e-6 and up_to["layer4"] > 0.05  # broken from layer3 on
    assert {r.action for r in report.layers} == {"lifted"}  # guessed from the shape


def test_measuring_leaves_the_model_unchanged_and_removes_its_hooks():
    model = mixer(1, 5, 8, group="C4", paths=("fc", "conv", "gconv"), width=1)
    model.train()
    x = torch.randn(4, 1, 8, 8)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model.eval()(x)
    model.train()
    measure_symmetry(model, x)
    activation_of(model, "layer2")(x)
    feature_invariance(model, x, "C4", "pool")
    assert _hooks(model) == 0
    assert model.training  # mode restored
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model.eval()(x), before)
    # hooks are removed on errors too
    with pytest.raises(ValueError, match="layer 'layer1' \\(image action\\)"):
        measure_symmetry(model, x, layers={"layer1": "image"})
    assert _hooks(model) == 0


def test_unknown_layer_lists_the_available_ones():
    model = mixer(1, 5, 8, group="C4", paths=("gconv",), width=1)
    with pytest.raises(ValueError, match="no submodule 'layer9'; available: lift, layer1, "):
        measure_symmetry(model, torch.randn(2, 1, 8, 8), layers=["layer9"])
    with pytest.raises(ValueError, match="no submodule 'conv'"):
        activation_of(model, "conv")
    with pytest.raises(ValueError, match="at least 2 images"):
        measure_symmetry(model, torch.randn(1, 1, 8, 8))
    with pytest.raises(ValueError, match="pass the group"):
        measure_symmetry(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)), torch.randn(2, 1, 8, 8))


def test_activation_of_is_the_submodule_output():
    model = mixer(1, 5, 8, group="C4", paths=("conv",), width=1).eval()
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        expected = model.layer2(model.layer1(model.lift(x)))
        assert torch.equal(activation_of(model, "layer2")(x), expected)


def test_feature_invariance_of_pooled_features():
    x = torch.randn(4, 1, 8, 8)
    gconv = mixer(1, 5, 8, group="C4", paths=("gconv",), width=1).eval()
    conv = mixer(1, 5, 8, group="C4", paths=("conv",), width=1).eval()
    assert feature_invariance(gconv, x, "C4", "head.0").value < 1e-6
    assert feature_invariance(conv, x, "C4", "head.0").value > 1e-4


def test_a_plain_cnn_and_another_group():
    cnn = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, padding_mode="circular"),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1, padding_mode="circular"),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    x = torch.randn(4, 1, 8, 8)
    report = measure_symmetry(cnn, x, "C4")
    assert [(r.name, r.action) for r in report.layers] == [("0", "image"), ("2", "image")]
    assert all(r.up_to_layer.value > 0.01 for r in report.layers)
    # a C4 mixer measured under C8: its lifted tensors carry no C8 action, so only the pool
    gconv = mixer(1, 5, 8, group="C4", paths=("gconv",), width=1)
    c8 = measure_symmetry(gconv, x, "C8")
    assert [r.name for r in c8.layers] == ["pool"]
    assert c8.outputs["logits, euclidean"].value > 1e-4  # 45-degree rotations interpolate


def test_report_table_json_and_plot(tmp_path):
    x = torch.randn(4, 1, 8, 8)
    models = {p: mixer(1, 5, 8, group="C4", paths=(p,), width=1) for p in ("fc", "gconv")}
    reports = {p: measure_symmetry(m, x) for p, m in models.items()}
    table = reports["fc"].format_table()
    assert "layer1" in table and "normalised" in table and "orbit-same-predictions" in table
    data = json.loads(json.dumps(reports["gconv"].as_dict()))
    assert data["layers"][0]["layer"] == "layer1" and data["layers"][0]["geed"] == 0
    assert data["osp_invariant_fraction"] == 1.0
    figure = plot_symmetry(reports, tmp_path / "geed.png")
    assert (tmp_path / "geed.png").stat().st_size > 1000
    assert sorted(line.get_label() for line in figure.axes[0].lines)[-2:] == ["fc", "gconv"]
