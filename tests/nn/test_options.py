"""A layer's options: one object from a configuration to each path, and a kind's own."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from ella.models import mixer
from ella.models.build import build_model
from ella.nn import PATH_KINDS, ConvPath, LayerOptions, RelaxedLayer
from ella.nn.kinds import declared_options
from ella.train import TrainConfig


class SizedConvPath(ConvPath):
    """A kind of path defined outside ella with an option of its own: its kernel size."""

    kind = "sized"
    color = "#000000"
    own_options = {"sized_kernel": 5}

    @classmethod
    def for_layer(cls, options, **common):
        return cls(**common, kernel_size=options.own["sized_kernel"], downsample=options.downsample)


@pytest.fixture
def sized(monkeypatch):
    monkeypatch.setitem(PATH_KINDS, "sized", SizedConvPath)


def kernels(model):
    return {name: layer.paths["sized"].conv.kernel_size[0] for name, layer in model.layers.items()}


def test_every_option_reaches_the_paths_from_a_configuration():
    config = dataclasses.replace(
        TrainConfig(), fc_mode="dense", fc_rank=1, gconv_mode="shared", downsample="polyphase",
        norm="none", zero_init=("conv",), width=1, group="C4",
    )  # fmt: skip
    model = build_model(config, 1, 10, 8)
    assert all(layer.options == LayerOptions.of(config, {}) for layer in model.layers.values())
    layer = model.layers["layer1"]
    assert layer.paths["fc"].mode == "dense" and layer.paths["gconv"].mode == "shared"
    assert layer.paths["gconv"].downsample == "polyphase" and layer.norm == "none"
    assert torch.count_nonzero(layer.paths["conv"].output_parameters()[0]) == 0
    # the same network as the keywords build
    keywords = mixer(1, 10, 8, group="C4", width=1, fc_mode="dense", gconv_mode="shared",
                     downsample="polyphase", norm="none", zero_init=("conv",))  # fmt: skip
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in keywords.named_parameters()]


def test_defaults_are_declared_once():
    layer = RelaxedLayer(2, 3, 8, "C4")
    assert layer.options == LayerOptions()
    assert layer.paths["conv"].conv.kernel_size == (LayerOptions().kernel_size,) * 2
    assert RelaxedLayer(2, 3, 8, "C4", options=LayerOptions(), kernel_size=5).options == (
        LayerOptions(kernel_size=5)
    )


def test_an_unknown_option_is_refused_naming_the_known_ones():
    refusal = r"RelaxedLayer got unknown option\(s\) kernel; .*kernel_size"
    with pytest.raises(TypeError, match=refusal):
        RelaxedLayer(2, 3, 8, "C4", kernel=5)
    with pytest.raises(TypeError, match=r"Mixer got unknown option\(s\) sized_kernel"):
        mixer(1, 10, 8, sized_kernel=3)
    with pytest.raises(TypeError, match=r"LayerOptions.replace got unknown option\(s\) x"):
        LayerOptions().replace(x=1)


def test_a_kind_with_an_option_of_its_own_is_its_class_and_its_registry_entry(sized):
    assert declared_options() == {"sized_kernel": 5}
    layer = RelaxedLayer(2, 3, 8, "C4", paths=("gconv", "sized"))
    assert layer.paths["sized"].conv.kernel_size == (5, 5)
    layer = RelaxedLayer(2, 3, 8, "C4", paths=("gconv", "sized"), sized_kernel=3)
    assert layer.paths["sized"].conv.kernel_size == (3, 3)
    assert layer.options.replace(sized_kernel=7).own == {"sized_kernel": 7}
    model = mixer(1, 10, 8, group="C4", paths=("gconv", "sized"), width=1, sized_kernel=1)
    assert set(kernels(model).values()) == {1}
    # a configuration's field of that name: how the command line's option would reach it
    config = SimpleNamespace(model="mixer", paths=("gconv", "sized"), group="C4", width=1,
                             pool="max", sized_kernel=3)  # fmt: skip
    model = build_model(config, 1, 10, 8)
    assert set(kernels(model).values()) == {3}
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def test_two_kinds_declaring_one_option_alike_or_not(sized, monkeypatch):
    class Other(SizedConvPath):
        kind = "other"

    monkeypatch.setitem(PATH_KINDS, "other", Other)
    assert declared_options() == {"sized_kernel": 5}
    Other.own_options = {"sized_kernel": 3}
    with pytest.raises(ValueError, match="give one default or two names"):
        declared_options()
