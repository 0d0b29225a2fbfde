"""Every ella layer is supported by the stock KFAC backends of laplace-torch on the
network's per-channel view (``PerChannelView``: one ``nn.Linear`` per FC map), which hook
module calls (``per_module_calls``)."""

import pytest
import torch
from laplace import KronLaplace
from laplace.curvature import AsdlGGN, CurvlinopsGGN
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import PerChannelView
from ella.marglik.laplace_internals import kron_factors
from ella.models import mixer
from ella.nn import per_module_calls
from tests.cases import NONTRIVIAL_GROUPS


@pytest.mark.parametrize("gconv_mode", ["full", "shared"])
@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
def test_kron_laplace_backends_agree(float64, gconv_mode, group):
    net = mixer(1, 3, 6, group=group, width=1, blocks=((1, 1), (2, 2)), gconv_mode=gconv_mode)
    model = PerChannelView(net).network
    x, y = torch.randn(12, 1, 6, 6), torch.randint(0, 3, (12,))
    loader = DataLoader(TensorDataset(x, y), batch_size=5)
    n_tensors = len(list(model.parameters()))
    prior = torch.linspace(0.5, 2.0, n_tensors)
    marglik = {}
    for backend in (AsdlGGN, CurvlinopsGGN):
        la = KronLaplace(model, "classification", backend=backend, prior_precision=prior)
        with per_module_calls(model):
            la.fit(loader)
        assert len(kron_factors(la)) == n_tensors, backend.__name__
        marglik[backend.__name__] = la.log_marginal_likelihood().item()
    asdl, curvlinops = marglik["AsdlGGN"], marglik["CurvlinopsGGN"]
    assert asdl == pytest.approx(curvlinops, rel=1e-6)
