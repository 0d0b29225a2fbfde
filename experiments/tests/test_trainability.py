"""The trainability ablation: its normalised layers keep exact invariance; a smoke run."""

import json

import pytest
import torch

from ella.data.datasets import load_dataset
from ella.nn import paths as path_module
from ella.nn.downsample import downsample
from ella.testing import assert_equivariant
from experiments import trainability


@pytest.mark.parametrize("group", ["C4", "D4"])
def test_instance_normalised_gconv_mixer_stays_invariant(float64, group):
    data = load_dataset("mnist_subset", train_size=8, test_size=8)
    variant = trainability.Variant("t", paths=("gconv",), group=group, norm="instance", width=1)
    torch.manual_seed(0)
    model = trainability.build(variant, data).eval()
    assert_equivariant(model, group, torch.randn(3, 1, 28, 28), atol=1e-9, rtol=1e-9)


def test_batch_norm_couples_the_examples_and_instance_norm_does_not():
    data = load_dataset("mnist_subset", train_size=8, test_size=8)
    x = data.train.tensors[0][:4]
    for norm, coupled in (("instance", False), ("batch", True)):
        torch.manual_seed(0)
        model = trainability.build(trainability.Variant("t", paths=("conv",), norm=norm), data)
        alone, together = model(x[:1]), model(x)[:1]
        assert torch.allclose(alone, together, atol=1e-5) is not coupled, norm


@pytest.mark.slow
def test_trainability_smoke(tmp_path):
    names = ["cnn baseline", "CONV, fixed downsampling", "CONV, instance norm"]
    argv = ["--profile", "smoke", "--results-dir", str(tmp_path), "--data-dir", ""]
    trainability.main([*argv, "--variants", *names])
    saved = json.loads((tmp_path / "trainability_smoke.json").read_text())
    assert [r["name"] for r in saved["rows"]] == names
    assert all(0 <= r["test_accuracy"] <= 1 and r["parameters"] > 0 for r in saved["rows"])
    assert path_module.downsample_by is downsample  # restored
    assert "| CONV, instance norm |" in (tmp_path / "trainability_smoke.md").read_text()
    with pytest.raises(SystemExit):  # an unknown variant is refused before any work
        trainability.main(["--profile", "smoke", "--variants", "no such variant"])
