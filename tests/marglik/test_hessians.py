"""Each Hessian structure's part of the evidence, chosen by one table."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.choices import HessianStructure
from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.marglik.backends import hessian_bytes
from ella.marglik.hessians import HESSIANS
from tests.cases import STRUCTURES


def test_every_structure_has_its_entry():
    assert set(HESSIANS) == set(HessianStructure) == set(STRUCTURES)
    assert all(h.structure == key for key, h in HESSIANS.items())
    assert [h.factored for h in HESSIANS.values()].count(True) == 1


def fitted(structure):
    """A linear regression of one output without a bias: one tensor, whose Kronecker GGN
    is exact."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1, bias=False)
    x = torch.randn(40, 3, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    model = model.double()
    evidence = LaplaceEvidence(model, PriorStructure(model, "tensor"), "regression", structure)
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    return evidence, x


def test_block_eigenvalues_of_each_structure_agree_where_the_mathematics_says(float64):
    (kron, x), (full, _), (diag, _) = (fitted(s) for s in ("kron", "full", "diag"))
    gram = x.T @ x  # the weight's GGN at unit noise
    expected = [torch.linalg.eigvalsh(gram)]
    for structure in (kron, full):
        found = [e.sort().values for e in structure.block_eigenvalues()]
        for got, want in zip(found, expected, strict=True):
            assert got == pytest.approx(want.sort().values, rel=1e-8)
    # the diagonal keeps the GGN's diagonal entries
    assert diag.block_eigenvalues()[0] == pytest.approx(torch.diagonal(gram), rel=1e-8)
    # the evidence is one value whichever way it is computed
    delta = torch.tensor([0.3], dtype=torch.float64)
    assert kron.log_marginal_likelihood(delta).item() == pytest.approx(
        full.log_marginal_likelihood(delta).item(), rel=1e-10
    )


@pytest.mark.parametrize("structure", [s for s in STRUCTURES if not HESSIANS[s].factored])
def test_a_subset_evidence_needs_the_kronecker_factors(structure):
    model = nn.Linear(3, 2)
    evidence = LaplaceEvidence(model, PriorStructure(model), structure=structure)
    data = DataLoader(TensorDataset(torch.randn(8, 3), torch.randint(2, (8,))), batch_size=4)
    with pytest.raises(ConfigError, match=r"subset evidence \(n_data\) needs structure='kron'"):
        evidence.fit(data, n_data=80)


def test_the_memory_estimate_counts_what_each_structure_stores():
    """Twice (with the decomposition's copy) the entries: p^2, p, and per layer the two
    Kronecker factors out^2 and (fan-in + bias)^2, in float32's 4 bytes."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Conv2d(4, 2, 3, bias=False))
    p = 3 * 4 + 4 + 4 * 2 * 9
    assert hessian_bytes(model, "full") == 2 * p * p * 4
    assert hessian_bytes(model, "diag") == 2 * p * 4
    assert hessian_bytes(model, "kron") == 2 * (4**2 + 4**2 + 2**2 + 36**2) * 4
    assert hessian_bytes(model.double(), "diag") == 2 * p * 8
    model.requires_grad_(False)
    assert hessian_bytes(model, "full") == 0
