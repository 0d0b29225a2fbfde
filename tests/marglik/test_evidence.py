"""The Laplace evidence against closed forms and finite differences."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.marglik import (
    LaplaceEvidence,
    PriorStructure,
    UnsupportedModuleError,
    effective_parameters,
)
from ella.models import mixer
from tests.cases import STOCK_BACKENDS
from tests.marglik.problems import blr_log_evidence, blr_problem, tiny_data, tiny_mixer


@pytest.mark.parametrize("structure", ["full", "kron"])
@pytest.mark.parametrize("backend", STOCK_BACKENDS)
@pytest.mark.parametrize("delta", [0.1, 1.0, 7.5])
def test_bayesian_linear_regression_matches_closed_form(float64, structure, backend, delta):
    X, y, sigma = blr_problem()
    model = nn.Linear(X.shape[1], 1, bias=False)
    # the MAP (= posterior mean) weights of Bayesian linear regression
    A = X.T @ X / sigma**2 + delta * torch.eye(X.shape[1])
    with torch.no_grad():
        model.weight.copy_(torch.linalg.solve(A, X.T @ y[:, 0] / sigma**2)[None])
    evidence = LaplaceEvidence(
        model,
        PriorStructure(model, "scalar"),
        likelihood="regression",
        structure=structure,
        backend=backend,
        sigma_noise=sigma,
    )
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=16))
    log_delta = torch.tensor([math.log(delta)])
    laplace = evidence.log_marginal_likelihood(log_delta).item()
    exact = blr_log_evidence(X, y, sigma, delta).item()
    assert laplace == pytest.approx(exact, rel=1e-6)


@pytest.mark.parametrize("backend", STOCK_BACKENDS)
def test_gradient_matches_finite_differences(float64, backend):
    model = tiny_mixer()
    prior = PriorStructure(model)
    evidence = LaplaceEvidence(model, prior, backend=backend)
    evidence.fit(tiny_data())
    log_prec = torch.linspace(-1.0, 1.5, prior.n_groups).requires_grad_()
    evidence.log_marginal_likelihood(log_prec).backward()
    eps = 1e-5
    for i in range(prior.n_groups):
        step = torch.zeros(prior.n_groups)
        step[i] = eps
        with torch.no_grad():
            up = evidence.log_marginal_likelihood(log_prec + step)
            down = evidence.log_marginal_likelihood(log_prec - step)
        fd = ((up - down) / (2 * eps)).item()
        assert log_prec.grad[i].item() == pytest.approx(fd, rel=1e-5, abs=1e-7), prior.names[i]


def test_kron_equals_full_for_a_single_output_linear_model(float64):
    """A one-output linear layer has an exact Kronecker GGN: both evidences agree."""
    X, y, sigma = blr_problem()
    model = nn.Linear(X.shape[1], 1, bias=False)
    values = {}
    for structure in ("kron", "full"):
        evidence = LaplaceEvidence(
            model, PriorStructure(model), "regression", structure, sigma_noise=sigma
        )
        evidence.fit(DataLoader(TensorDataset(X, y), batch_size=40))
        assert evidence.prior.names == ["model"]
        values[structure] = evidence.log_marginal_likelihood(torch.tensor([0.3])).item()
    assert values["kron"] == pytest.approx(values["full"], rel=1e-10)


def test_diag_structure_runs(float64):
    model = tiny_mixer()
    evidence = LaplaceEvidence(model, PriorStructure(model), structure="diag")
    evidence.fit(tiny_data())
    value = evidence.log_marginal_likelihood(torch.zeros(evidence.prior.n_groups))
    assert torch.isfinite(value)
    eigs = evidence.block_eigenvalues()
    assert [e.numel() for e in eigs] == evidence.prior.numels


def test_unsupported_module_is_named():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    with pytest.raises(UnsupportedModuleError, match=r"1 \(BatchNorm1d\)"):
        LaplaceEvidence(model, PriorStructure(model))


def test_unknown_options():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="unknown Hessian structure 'lowrank'"):
        LaplaceEvidence(model, PriorStructure(model), structure="lowrank")
    with pytest.raises(ValueError, match="unknown curvature backend 'backpack'"):
        LaplaceEvidence(model, PriorStructure(model), backend="backpack")
    with pytest.raises(RuntimeError, match="fit"):
        LaplaceEvidence(model, PriorStructure(model)).log_marginal_likelihood(torch.zeros(1))


def test_effective_parameters_limits_for_a_full_rank_block():
    eigs = torch.rand(50) + 0.1
    assert effective_parameters(eigs, 1e-9) == pytest.approx(50, rel=1e-6)
    assert effective_parameters(eigs, 1e9) == pytest.approx(0, abs=1e-6)
    values = [effective_parameters(eigs, d) for d in (1e-3, 1e-1, 1, 10, 1e3)]
    assert values == sorted(values, reverse=True)  # monotone in the prior precision
    # closed form for a single eigenvalue
    assert effective_parameters(torch.tensor([3.0]), 1.0) == pytest.approx(0.75)


def test_effective_parameters_of_a_fitted_model(float64):
    model = tiny_mixer()
    prior = PriorStructure(model, "tensor")
    evidence = LaplaceEvidence(model, prior)
    evidence.fit(tiny_data())
    for eigs, size in zip(evidence.block_eigenvalues(), evidence.prior.numels, strict=True):
        assert eigs.numel() == size
        small, large = effective_parameters(eigs, 1e-12), effective_parameters(eigs, 1e9)
        assert 0 <= large <= effective_parameters(eigs, 1.0) <= small <= size
        assert large < 1e-3
        # as delta -> 0 every direction with positive curvature counts fully
        assert int((eigs > 1e-9).sum()) - 0.01 <= small <= int((eigs > 0).sum())


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_finiteness_check_refuses_any_non_finite_entry_and_no_finite_one(bad):
    """Finite factors pass, also where their 2-norm overflows (entries near 1e20 in
    float32, whose squares do not fit); one non-finite entry anywhere among many
    factors is refused."""
    from ella.errors import EvidenceError
    from ella.marglik.backends import require_finite

    factors = [torch.randn(n, n) for n in (3, 49, 196)] + [torch.empty(0)]
    huge = torch.full((4, 4), 3e20)  # finite; its squares overflow float32
    assert not torch.isfinite(torch.linalg.norm(huge))
    require_finite(factors + [huge])
    for i in range(3):
        broken = [f.clone() for f in factors] + [huge]
        broken[i][i, 0] = bad
        with pytest.raises(EvidenceError, match="not finite"):
            require_finite(broken)


def test_non_finite_parameters_are_named_and_huge_finite_ones_are_not():
    """The fused check names exactly the parameters with a NaN or infinite entry, in
    order; finite weights whose 2-norm overflows float32 are not among them."""
    from ella.marglik.backends import non_finite_parameters

    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    assert non_finite_parameters(model) == []
    with torch.no_grad():
        model[0].weight.fill_(3e20)  # finite; its squares overflow float32
        assert non_finite_parameters(model) == []
        model[1].bias[0] = math.nan
        model[0].bias[2] = -math.inf
    assert non_finite_parameters(model) == ["0.bias", "1.bias"]


def test_instance_norm_leaves_a_flat_direction_in_weights_and_precisions(float64):
    """A CONV+GCONV layer followed by instance normalisation computes the same function
    when all its weights and biases are multiplied by ``c``; the GGN of its parameters
    is then divided by ``c^2``, so dividing its precisions by ``c^2`` too leaves the log
    evidence exactly as it was (log-likelihood, scatter ``delta ||theta||^2`` and
    ``log det (H + delta) - log det delta`` each unchanged). Along this direction the
    evidence cannot fix the scale of such a layer's priors: training that shrinks the
    weights lets the optimal precisions grow without bound
    (``docs/research/0012-precisions-run-away.md``)."""
    model = mixer(
        1, 3, 6, group="C4", width=1, blocks=((1, 1), (2, 2)), paths=("conv", "gconv"),
        norm="instance",
    )  # fmt: skip
    prior = PriorStructure(model)
    data = tiny_data()
    x = data.dataset.tensors[0]
    log_prec = torch.linspace(-1.0, 1.5, prior.n_groups)

    def log_evidence():
        evidence = LaplaceEvidence(model, prior, ggn="exact")
        evidence.fit(data)
        return evidence.log_marginal_likelihood(log_prec).item()

    before, outputs = log_evidence(), model(x)
    layer, c = model.layer1, 3.0
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(c)
    moved = [i for i, name in enumerate(prior.names) if name.startswith("layer1.")]
    assert len(moved) == 2
    log_prec[moved] -= 2 * math.log(c)
    torch.testing.assert_close(model(x), outputs, rtol=1e-6, atol=1e-6)
    assert log_evidence() == pytest.approx(before, rel=1e-7)  # up to the norm's eps
    # the same move without the precisions' half changes it: the direction is joint
    log_prec[moved] += 2 * math.log(c)
    assert abs(log_evidence() - before) > 1e-3 * abs(before)


@pytest.mark.parametrize("n_tensors", [1, 6, 200])
def test_order_by_group_is_the_stable_argsort_of_the_repeated_groups(n_tensors):
    """The permutation built from the tensors' slices equals sorting every value by its
    tensor's group, ties in their order (empty tensors included)."""
    from ella.marglik.kron_terms import order_by_group

    generator = torch.Generator().manual_seed(n_tensors)
    groups = torch.randint(0, 5, (n_tensors,), generator=generator)
    sizes = torch.randint(0, 40, (n_tensors,), generator=generator)
    expected = torch.argsort(groups.repeat_interleave(sizes), stable=True)
    assert torch.equal(order_by_group(groups, sizes), expected)


@pytest.mark.parametrize("backend", ["native", "asdl"])
def test_a_fit_does_not_depend_on_its_progress_bar(backend, capsys):
    """The MC GGN samples its labels from torch's global generator: drawing the bar must
    not draw from it, so a run gives the same evidence with and without progress."""
    model = tiny_mixer()
    prior = PriorStructure(model, "layer_path")
    values = []
    for progress in (False, True):
        torch.manual_seed(3)
        evidence = LaplaceEvidence(model, prior, ggn="mc", backend=backend)
        evidence.fit(tiny_data(), progress=progress)
        values.append(float(evidence.log_marginal_likelihood(torch.zeros(prior.n_groups))))
        values.append(float(torch.rand(())))  # the generator's state after the fit
    assert values[:2] == values[2:]
    assert "Computing Hessian" not in capsys.readouterr().err
