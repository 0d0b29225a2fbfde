"""The stacked FC layout against the stored per-channel reference (tools/make_fc_reference.py),
and the evidence's per-channel view of a network (:mod:`ella.marglik.per_channel`)."""

from pathlib import Path

import pytest
import torch

from ella.learner.report import effective_parameter_report
from ella.marglik import LaplaceEvidence, PerChannelView, PriorStructure, UnsupportedModuleError
from ella.marglik.native import NativeGGN
from ella.models.mixer import mixer

REFERENCE = Path(__file__).with_name("fc_reference.pt")


def _reference() -> dict:
    return torch.load(REFERENCE, weights_only=True)


def _model(ref: dict) -> torch.nn.Module:
    model = mixer(1, 10, 8, **ref["options"]).double()
    model.load_state_dict(ref["state_dict"])  # the per-channel layout, stacked on loading
    return model.eval()


def _sketch(factor: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    probe = torch.randn(factor.shape[-1], generator=generator, dtype=factor.dtype)
    return torch.cat([factor @ probe, factor.diagonal().sum()[None]])


@pytest.fixture(scope="module", params=["c4", "trivial_rank2"])
def case(request):
    ref = _reference()[request.param]
    return ref, _model(ref)


def test_stacked_layout_gives_the_reference_outputs(case):
    ref, model = case
    with torch.no_grad():
        torch.testing.assert_close(model(ref["x"]), ref["logits"], rtol=1e-12, atol=1e-12)
    # a handful of tensors per FC path, whatever the channel count
    fc = [n for n, _ in model.named_parameters() if ".fc." in n]
    assert {n.split(".fc.")[1] for n in fc} == {
        "pixel_maps.weight",
        "channel_maps.weight",
        "channel_maps.bias",
    }


def test_native_factors_of_the_view_equal_the_reference(case):
    ref, model = case
    view = PerChannelView(model)
    _, kron = NativeGGN(view.sync(), "classification").kron(ref["x"], ref["y"], N=24)
    assert len(kron.kfacs) == len(ref["factors"])
    for block, expected in zip(kron.kfacs, ref["factors"], strict=True):
        for factor, sketch in zip(block, expected, strict=True):
            torch.testing.assert_close(_sketch(factor), sketch, rtol=1e-10, atol=1e-10)


def test_evidence_gradient_and_report_equal_the_reference(case):
    ref, model = case
    prior = PriorStructure(model)
    assert prior.names == ref["groups"]
    evidence = LaplaceEvidence(model, prior, backend="native", ggn="exact")
    data = torch.utils.data.TensorDataset(ref["x"], ref["y"])
    evidence.fit(torch.utils.data.DataLoader(data, 12))
    log_prior = ref["log_prior"].clone().requires_grad_(True)
    value = evidence.log_marginal_likelihood(log_prior)
    (grad,) = torch.autograd.grad(value, log_prior)
    torch.testing.assert_close(value.detach(), ref["log_marglik"], rtol=1e-10, atol=1e-8)
    torch.testing.assert_close(grad, ref["grad"], rtol=1e-8, atol=1e-8)
    report = effective_parameter_report(model, evidence, log_prior.detach().exp())
    for row, expected, relative in zip(
        report["layers"], ref["layers"], ref["relative"], strict=True
    ):
        for key, value in expected.items():
            assert row[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9))
        assert row["relative"] == pytest.approx(relative, rel=1e-9)


def test_the_stacked_network_is_refused_by_the_backend_with_the_fix():
    model = mixer(1, 10, 8, group="C4", width=1)
    with pytest.raises(UnsupportedModuleError, match="PerChannelView"):
        NativeGGN(model, "classification")


def test_view_shares_all_but_the_fc_maps_and_follows_them():
    model = mixer(1, 10, 8, group="C4", width=1)
    view = PerChannelView(model)
    own = {id(p) for p in model.parameters()}
    shared = [n for n, p in view.network.named_parameters() if id(p) in own]
    assert shared and all(".fc." not in n for n in shared)
    with torch.no_grad():
        model.layer1.paths.fc.channel_maps.bias.add_(1.0)
    model.train(False)
    network = view.sync()
    assert not network.training and not network.layer1.paths.fc.training
    torch.testing.assert_close(
        network.layer1.paths.fc.channel_maps[2].bias, model.layer1.paths.fc.channel_maps.bias[2]
    )
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(network(x), model(x))


def test_vector_in_the_views_order():
    model = mixer(1, 10, 8, group="C4", width=1)
    view = PerChannelView(model)
    values = torch.cat([p.detach().flatten() for p in model.parameters()])
    expected = torch.cat([p.detach().flatten() for p in view.sync().parameters()])
    torch.testing.assert_close(view.vector(values), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="trainable tensors"):
        view.vector(values[:-1])


@pytest.mark.parametrize("mode", ["layer_path", "tensor", "scalar"])
def test_view_prior_keeps_the_groups(mode):
    model = mixer(1, 10, 8, group="C4", width=1)
    prior = PriorStructure(model, mode)
    view_prior = PerChannelView(model).prior(prior)
    assert view_prior.names == prior.names
    assert sum(view_prior.numels) == sum(prior.numels)
    per_group = torch.zeros(prior.n_groups).index_add_(
        0, prior.index, torch.tensor(prior.numels, dtype=torch.float)
    )
    view_group = torch.zeros(prior.n_groups).index_add_(
        0, view_prior.index, torch.tensor(view_prior.numels, dtype=torch.float)
    )
    torch.testing.assert_close(per_group, view_group)
    if mode == "tensor":  # a stage's maps share the stacked tensor's group
        assert "layer1.paths.fc.pixel_maps.weight" in prior.names
