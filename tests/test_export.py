"""ella export: the network without its switched-off paths computes what the run's network
computes with those paths at zero."""

from __future__ import annotations

import json

import pytest
import torch

from ella.cli import main
from ella.errors import CheckpointError, ConfigError
from ella.export import load_exported, switched_off, without_paths
from ella.io import save_torch
from ella.models import mixer
from ella.nn import RelaxedLayer
from ella.testing import assert_equivariant
from tests.cli_runs import refused, snapshot
from tests.damage import flip_bits_in_tensor_data


def zeroed(net, drop):
    """``net`` itself with the last stage of every path in ``drop`` set to zero."""
    layers = dict(net.named_modules())
    with torch.no_grad():
        for name, paths in drop.items():
            for p in paths:
                layers[name].paths[p].start_at_zero()
    return net


@pytest.mark.parametrize(
    "paths,drop",
    [
        (("gconv", "residual"), {"layer1": ["residual"], "layer5": ["residual"]}),
        (("fc", "conv", "gconv"), {"layer2": ["fc"], "layer4": ["fc", "conv"]}),
    ],
)
def test_the_exported_network_is_the_run_network_with_its_dropped_paths_at_zero(
    float64, paths, drop
):
    net = mixer(1, 10, 16, "C4", paths=paths, width=1, norm="none").eval()
    exported = without_paths(net, drop)
    x = torch.randn(3, 1, 16, 16)
    torch.testing.assert_close(exported(x), zeroed(net, drop)(x))
    layers = dict(exported.named_modules())
    for name, gone in drop.items():
        assert not set(gone) & set(layers[name].path_names)
    fewer = sum(p.numel() for p in exported.parameters())
    assert fewer < sum(p.numel() for p in net.parameters())


def test_a_layer_whose_residual_is_dropped_is_exactly_equivariant(float64):
    layer = RelaxedLayer(2, 3, 8, "C4", paths=("gconv", "residual"))
    exported = without_paths(layer, {"": ["residual"]})  # "": the layer itself
    z = torch.randn(2, 4, 2, 8, 8)
    assert_equivariant(exported, "C4", z, in_action="lifted", out_action="lifted")
    assert layer.equivariance_error(z) > 1e-2


def test_switched_off_is_relative_to_the_layers_largest_variance():
    variances = {"layer1.gconv": 1.0, "layer1.residual": 0.005, "layer2.gconv": 1e-4,
                 "layer2.residual": 2e-4, "head.0": 1e-9}  # fmt: skip
    assert switched_off(variances, 0.01) == {"layer1": ["residual"]}
    assert switched_off(variances, 0.6) == {"layer1": ["residual"], "layer2": ["gconv"]}
    with pytest.raises(ConfigError, match="threshold"):
        switched_off(variances, 1.5)
    with pytest.raises(ConfigError, match="not a relaxed layer"):
        without_paths(mixer(1, 10, 8, "C4", width=1), {"head": ["fc"]})


TINY_MIXER = [
    "--paths", "gconv", "residual", "--train-size", "64", "--test-size", "32", "--width", "1",
    "--epochs", "1", "--n-epochs-burnin", "1", "--marglik-frequency", "1",
    "--batch-size", "32", "--no-progress",
]  # fmt: skip


def test_ella_export_drops_the_residual_a_run_switched_off(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY_MIXER]) == 0
    results = json.loads((run / "results.json").read_text())
    for group in results["prior_variance"]:  # as if the evidence had switched them off
        if group.endswith(".residual"):
            results["prior_variance"][group] = 1e-6
    (run / "results.json").write_text(json.dumps(results))
    capsys.readouterr()
    assert main(["export", str(run)]) == 0
    out = capsys.readouterr().out
    assert "layer1: residual" in out and "exported" in out and "exported.pt" in out
    net = load_exported(run)
    assert all(m.path_names == ("gconv",) for m in net.modules() if isinstance(m, RelaxedLayer))
    before = snapshot(run)
    refused(capsys, ["export", str(run)], 1, "exists", "--out")
    assert snapshot(run) == before

    # an export whose weights were edited after writing (one cast to int32) is refused
    exported = torch.load(run / "exported.pt", weights_only=True)
    name = next(k for k, v in exported["model"].items() if v.is_floating_point())
    exported["model"][name] = exported["model"][name].to(torch.int32)
    torch.save(exported, run / "exported.pt")
    with pytest.raises(CheckpointError, match="does not match.*ella export"):
        load_exported(run)
    # the same cast in a file that is whole (its checksum written again) is refused by name
    save_torch(exported, run / "exported.pt")
    with pytest.raises(CheckpointError, match=f"{name} is torch.int32 where the network has"):
        load_exported(run)
    # and a checkpoint with flipped bits is refused before anything is exported
    flip_bits_in_tensor_data(run / "checkpoint.pt")
    refused(capsys, ["export", str(run), "--out", str(tmp_path / "x.pt")], 1, "checksum")
    assert not (tmp_path / "x.pt").exists()
