import pytest
import torch
from torch import nn

from ella.marglik import PriorStructure
from ella.marglik.effective import aggregate, relative_effective, split_name
from ella.models import mixer
from ella.nn import RelaxedLayer


def small_mixer(paths=("fc", "conv", "gconv")):
    return mixer(1, 3, 8, group="C4", width=1, blocks=((1, 1), (2, 2)), paths=paths)


def test_layer_path_groups_are_named_and_ordered():
    model = small_mixer()
    prior = PriorStructure(model)
    assert prior.names == [
        "layer1.fc", "layer1.conv", "layer1.gconv",
        "layer2.fc", "layer2.conv", "layer2.gconv",
        "head.0", "head.2",
    ]  # fmt: skip
    assert prior.n_tensors == len(list(model.parameters()))


def test_expansion_lands_on_exactly_its_tensors():
    model = small_mixer()
    prior = PriorStructure(model)
    values = torch.arange(prior.n_groups, dtype=torch.float64) + 1
    per_tensor = prior.expand(values)
    names = [n for n, _ in model.named_parameters()]
    assert names == prior.param_names
    layers = {"layer1": model.layer1, "layer2": model.layer2}
    for t, name in enumerate(names):
        group = prior.names[int(per_tensor[t].item()) - 1]
        if name.startswith("head"):
            assert name.startswith(group + ".")
        else:
            layer, path = group.split(".")
            param = dict(model.named_parameters())[name]
            assert any(param is p for p in layers[layer].path_parameters(path)), (name, group)
    # and per parameter, in model.parameters() order
    diag = prior.expand_diagonal(values)
    assert diag.numel() == sum(p.numel() for p in model.parameters())
    start = 0
    for t, p in enumerate(model.parameters()):
        assert torch.all(diag[start : start + p.numel()] == per_tensor[t])
        start += p.numel()


def test_expansion_is_differentiable():
    prior = PriorStructure(small_mixer())
    values = torch.ones(prior.n_groups, requires_grad=True)
    (prior.expand(values) * torch.arange(prior.n_tensors)).sum().backward()
    expected = torch.zeros(prior.n_groups).index_add_(
        0, prior.index, torch.arange(prior.n_tensors, dtype=torch.float32)
    )
    assert torch.equal(values.grad, expected)


def test_other_structures_and_plain_modules():
    model = nn.Sequential(RelaxedLayer(1, 2, 4, paths=("conv", "gconv")), nn.Conv2d(2, 2, 1))
    assert PriorStructure(model).names == ["0.conv", "0.gconv", "1"]
    assert PriorStructure(model, "scalar").names == ["all"]
    assert PriorStructure(model, "tensor").names == [n for n, _ in model.named_parameters()]
    assert PriorStructure(model, "tensor").tensors_of("1.bias") == ["1.bias"]
    with pytest.raises(ValueError, match="unknown prior structure 'layer'"):
        PriorStructure(model, "layer")
    with pytest.raises(ValueError, match="expected 3 group values"):
        PriorStructure(model).expand(torch.ones(2))


def test_split_name():
    assert split_name("layer3.gconv") == ("layer3", "gconv")
    assert split_name("head.0") == ("head.0", None)
    assert split_name("blocks.2.fc") == ("blocks.2", "fc")


def test_aggregate_shares_sum_to_100():
    groups = ["layer1.fc", "layer1.conv", "layer1.gconv", "layer2.conv", "head.0", "head.0"]
    eff = [1.0, 3.0, 6.0, 2.0, 4.0, 1.0]
    sizes = [10, 10, 10, 5, 8, 2]
    precisions = [2.0, 1.0, 0.5, 1.0, 1.0, 4.0]
    layers, others = aggregate(groups, eff, sizes, precisions)
    assert [r["layer"] for r in layers] == ["layer1", "layer2"]
    first, second = layers
    assert (first["fc"], first["conv"], first["gconv"]) == pytest.approx((10, 30, 60))
    assert (second["fc"], second["conv"], second["gconv"]) == (0.0, 100.0, 0.0)
    for row in layers:
        assert sum(row[p] for p in ("fc", "conv", "gconv")) == pytest.approx(100)
    assert first["prior_variance"] == pytest.approx({"fc": 0.5, "conv": 1.0, "gconv": 2.0})
    assert others == [
        {"module": "head.0", "effective": 5.0, "parameters": 10, "prior_variance": 0.85}
    ]


def test_aggregate_adds_the_residual_column_only_where_a_layer_has_it():
    layers, _ = aggregate(["layer1.gconv", "layer1.residual"], [1.0, 3.0], [4, 12], [1.0, 2.0])
    (row,) = layers
    assert (row["gconv"], row["residual"], row["fc"], row["conv"]) == pytest.approx((25, 75, 0, 0))
    assert row["prior_variance"] == pytest.approx({"gconv": 1.0, "residual": 0.5})
    paper, _ = aggregate(["layer1.conv", "layer1.gconv"], [1.0, 1.0], [4, 4], [1.0, 1.0])
    assert "residual" not in paper[0] and "residual" not in paper[0]["effective"]


def test_relative_effective_is_per_parameter_of_each_stage_normalised_over_paths():
    """The paper's Table 3 measure, by hand: FC = mean of its stages' effective /
    parameters (pixel maps 5/20, channel maps 1/20: 0.15), CONV 3/10, GCONV 5.5/10;
    biases and modules outside the relaxed layers are left out."""
    names = [
        "layer1.paths.fc.pixel_maps.0.weight",
        "layer1.paths.fc.pixel_maps.1.weight",
        "layer1.paths.fc.channel_maps.0.weight",
        "layer1.paths.fc.channel_maps.0.bias",
        "layer1.paths.conv.conv.weight",
        "layer1.paths.conv.conv.bias",
        "layer1.paths.gconv.conv.weight",
        "layer2.paths.conv.conv.weight",
        "head.0.weight",
    ]
    groups = ["layer1.fc"] * 4 + ["layer1.conv"] * 2 + ["layer1.gconv", "layer2.conv", "head.0"]
    eff = [2.0, 3.0, 1.0, 7.0, 3.0, 2.0, 5.5, 0.0, 4.0]
    sizes = [10, 10, 20, 7, 10, 2, 10, 5, 8]
    relative = relative_effective(names, groups, eff, sizes)
    assert set(relative) == {"layer1", "layer2"}
    assert (relative["layer1"]["fc"], relative["layer1"]["conv"], relative["layer1"]["gconv"]) == (
        pytest.approx(15),
        pytest.approx(30),
        pytest.approx(55),
    )
    # a layer whose paths have no effective parameter: zeros, not a division by zero
    assert relative["layer2"] == {"fc": 0.0, "conv": 0.0, "gconv": 0.0}
    # against the share of the effective parameters (aggregate): the small, well
    # determined GCONV path weighs more per parameter than in the count
    layers, _ = aggregate(groups, eff, sizes, [1.0] * len(eff))
    assert layers[0]["gconv"] == pytest.approx(100 * 5.5 / 23.5)
