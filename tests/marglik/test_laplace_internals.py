"""The private laplace-torch attributes ella reads exist and mean what ella assumes."""

from __future__ import annotations

import types

import pytest
import torch
from laplace import FullLaplace, KronLaplace
from laplace.curvature import AsdlGGN
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.errors import EvidenceError
from ella.marglik.laplace_internals import (
    LazyKronDecomposed,
    check_internals,
    decompose,
    dense_hessian,
    hessian_scale,
    kron_eigenvalues,
    kron_factors,
    parameter_dtype,
    scale_to_n_data,
)


def regression_data(n: int = 24):
    torch.manual_seed(0)
    x = torch.randn(n, 3)
    return x, torch.sin(x[:, :2])


def fitted(cls, sigma: float = 0.5):
    x, y = regression_data()
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    la = cls(model, "regression", sigma_noise=sigma, backend=AsdlGGN)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    return model, la


def test_a_fitted_kron_laplace_has_every_internal_ella_reads(float64):
    _, la = fitted(KronLaplace)
    check_internals(la)


def test_internals_mean_what_ella_assumes(float64):
    model, la = fitted(KronLaplace, sigma=0.5)
    assert hessian_scale(la) == pytest.approx(1 / 0.5**2)
    assert parameter_dtype(la) is torch.float64
    factors, eigenvalues = kron_factors(la), kron_eigenvalues(la)
    assert len(factors) == len(eigenvalues) == len(list(model.parameters()))
    for block, eigs in zip(factors, eigenvalues, strict=True):
        assert len(block) == len(eigs)
        for factor, lam in zip(block, eigs, strict=True):
            torch.testing.assert_close(torch.linalg.eigvalsh(factor), lam.sort().values)
    # the weight of the last Linear: output factor (2, 2) first, input factor (5, 5) second
    assert [tuple(f.shape) for f in factors[2]] == [(2, 2), (5, 5)]


def test_dense_hessian_of_a_full_laplace(float64):
    model, la = fitted(FullLaplace)
    n = sum(p.numel() for p in model.parameters())
    assert dense_hessian(la).shape == (n, n)


def test_scale_to_n_data_scales_output_factors_and_likelihood(float64):
    _, la = fitted(KronLaplace)
    before = [[f.clone() for f in block] for block in kron_factors(la)]
    loss, m = float(la.loss), la.n_data
    scale_to_n_data(la, 4 * m)
    assert la.n_data == 4 * m and float(la.loss) == pytest.approx(4 * loss)
    for old, new, eigs in zip(before, kron_factors(la), kron_eigenvalues(la), strict=True):
        torch.testing.assert_close(new[0], 4 * old[0])  # output factor (or whole bias block)
        if len(old) == 2:
            torch.testing.assert_close(new[1], old[1])  # input factor unchanged
        # decomposed again: the eigenvalues are the scaled factor's
        torch.testing.assert_close(eigs[0].sort().values, torch.linalg.eigvalsh(new[0]))


def test_a_changed_laplace_torch_is_named():
    stand_in = types.SimpleNamespace(_H_factor=1.0, loss=0.0, n_data=1, damping=False)
    with pytest.raises(AttributeError, match=r"_dtype, H_facs.kfacs, H.eigenvalues"):
        check_internals(stand_in)


def test_lazy_decomposition_equals_laplace_torchs(float64):
    _, la = fitted(KronLaplace)
    stock = la.H  # laplace-torch's own Kron.decompose
    decompose(la)
    lazy = la.H
    assert isinstance(lazy, LazyKronDecomposed) and lazy._eigenvectors is None
    for block, values in zip(lazy.eigenvalues, stock.eigenvalues, strict=True):
        for lam, ref in zip(block, values, strict=True):
            torch.testing.assert_close(lam, ref, rtol=1e-10, atol=1e-12)
    # the eigenvectors, computed on first use, rebuild every factor
    for block, values, factors in zip(
        lazy.eigenvectors, lazy.eigenvalues, kron_factors(la), strict=True
    ):
        for q, lam, factor in zip(block, values, factors, strict=True):
            torch.testing.assert_close(q @ torch.diag(lam) @ q.T, factor)
    # laplace-torch's own evidence (which adds the prior through the eigenvectors) is unchanged
    lazy_value = la.log_marginal_likelihood(prior_precision=torch.tensor(0.7))
    la.H = stock
    stock_value = la.log_marginal_likelihood(prior_precision=torch.tensor(0.7))
    torch.testing.assert_close(lazy_value, stock_value, rtol=1e-12, atol=0)


def test_a_factor_lapack_returns_nan_for_is_decomposed_again(float64, monkeypatch):
    # LAPACK returned NaN eigenvalues, without an error, for a rank-deficient 256 x 256 float32
    # FC factor; the decomposition retries (+I, then float64) instead of passing NaN on
    from ella.marglik import laplace_internals

    x = torch.randn(10, 6)
    factor = x.T @ x  # rank 6 of 6 here; the stand-in below fails its first call
    real, calls = torch.linalg.eigvalsh, []

    def flaky(matrix, UPLO="L"):
        calls.append(UPLO)
        values = real(matrix, UPLO=UPLO)
        return values * float("nan") if len(calls) == 1 else values

    monkeypatch.setattr(torch.linalg, "eigvalsh", flaky)
    values = laplace_internals._factor_eigenvalues(factor)
    assert calls == ["U", "U"]  # retried once, on the upper triangle as laplace-torch reads it
    torch.testing.assert_close(values, real(factor).clamp(min=0))

    monkeypatch.setattr(torch.linalg, "eigvalsh", lambda m, UPLO="L": m.diagonal() * float("nan"))
    with pytest.raises(EvidenceError, match="could not be eigendecomposed"):
        laplace_internals._factor_eigenvalues(factor)


def test_a_subset_fit_decomposes_each_factor_once(monkeypatch):
    """A subset fit is decomposed, then scaled and decomposed again; the lazy decomposition
    computes nothing until it is read, so each dense factor meets eigvalsh once (the
    default ``ella train`` fit: 1606 calls instead of 3212)."""
    from ella.marglik import LaplaceEvidence, PriorStructure

    x, y = regression_data()
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "tensor"), likelihood="regression", sigma_noise=0.5
    )
    real, calls = torch.linalg.eigvalsh, []

    def counting(matrix, UPLO="L"):  # one entry per matrix, batched or not
        calls.extend([tuple(matrix.shape[-2:])] * (matrix.shape[0] if matrix.ndim == 3 else 1))
        return real(matrix, UPLO=UPLO)

    monkeypatch.setattr(torch.linalg, "eigvalsh", counting)
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=8), n_data=4 * len(x))
    dense = [f for block in kron_factors(evidence.laplace) for f in block if f.ndim == 2]
    distinct = [f for i, f in enumerate(dense) if not any(torch.equal(f, g) for g in dense[:i])]
    assert len(distinct) < len(dense)  # the bias blocks repeat their weights' output factors
    assert sorted(calls) == sorted(tuple(f.shape) for f in distinct)


def test_equal_factors_are_decomposed_once_and_get_the_same_eigenvalues(float64, monkeypatch):
    """A bias block ``[B]`` repeats its weight's ``B``: decomposed once, shared; a factor
    with the same trace but other entries is decomposed on its own."""
    x = torch.randn(10, 4)
    b = x.T @ x
    same_trace = b.clone()
    same_trace[0, 1] = same_trace[1, 0] = b[0, 1] + 1.0  # off-diagonal change: trace kept
    a = torch.eye(3)
    factors = [[b, a], [b.clone()], [same_trace], [torch.ones(4)]]
    real, calls = torch.linalg.eigvalsh, []

    def counting(matrix, UPLO="L"):
        calls.extend(matrix if matrix.ndim == 3 else [matrix])
        return real(matrix, UPLO=UPLO)

    monkeypatch.setattr(torch.linalg, "eigvalsh", counting)
    values = LazyKronDecomposed(factors).eigenvalues
    assert len(calls) == 3  # b, a, same_trace; not b's copy; the diagonal is its own
    for block, lams in zip(factors, values, strict=True):
        for factor, lam in zip(block, lams, strict=True):
            expected = factor if factor.ndim == 1 else real(factor).clamp(min=0)
            torch.testing.assert_close(lam, expected)


@pytest.mark.parametrize("backend", ["asdl", "native"])
def test_the_running_sum_over_batches_equals_laplace_torchs_fit(float64, backend):
    """fit_undecomposed adds the batches' factors in place into the first batch's (the
    native backend hands a bias block the same tensor as its weight's output factor):
    the factors and the log-likelihood term are laplace-torch's own sum's."""
    from ella.marglik.laplace_internals import fit_undecomposed
    from ella.marglik.native import NativeGGN

    torch.manual_seed(0)
    x, y = torch.randn(30, 3), torch.randint(4, (30,))
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4))
    curvature = AsdlGGN if backend == "asdl" else NativeGGN
    loader = DataLoader(TensorDataset(x, y), batch_size=8)  # 4 batches, the last of 6
    stock = KronLaplace(model, "classification", backend=curvature)
    stock.fit(loader)
    ours = KronLaplace(model, "classification", backend=curvature)
    fit_undecomposed(ours, loader)
    assert ours.n_data == stock.n_data == 30
    torch.testing.assert_close(ours.loss, stock.loss)
    for mine, theirs in zip(kron_factors(ours), stock.H_facs.kfacs, strict=True):
        assert len(mine) == len(theirs)
        for factor, expected in zip(mine, theirs, strict=True):
            torch.testing.assert_close(factor, expected)
    if backend == "native":  # the bias's B is its weight's, added to once per batch
        factors = kron_factors(ours)
        assert factors[1][0] is factors[0][0] and factors[3][0] is factors[2][0]


def test_a_batch_that_does_not_share_a_factor_unshares_the_running_total():
    from laplace.utils.matrix import Kron

    from ella.marglik.laplace_internals import _RunningKronSum

    shared = torch.ones(2, 2)
    total = _RunningKronSum()
    total += Kron([[shared, torch.ones(3, 3)], [shared]])
    total += Kron([[torch.full((2, 2), 2.0), torch.ones(3, 3)], [torch.full((2, 2), 5.0)]])
    total += Kron([[torch.ones(2, 2), torch.ones(3, 3)], [torch.ones(2, 2)]])
    (b_weight, a), (b_bias,) = total.kfacs
    torch.testing.assert_close(b_weight, torch.full((2, 2), 4.0))
    torch.testing.assert_close(b_bias, torch.full((2, 2), 7.0))
    torch.testing.assert_close(a, torch.full((3, 3), 3.0))


def test_small_factors_of_one_shape_are_decomposed_in_one_batch(float64, monkeypatch):
    """One batched eigvalsh per shape (on one thread; see the next test for more); a factor
    whose batched result is not finite, or a batch LAPACK does not converge on, is
    decomposed on its own (with the retries)."""
    from ella.marglik import laplace_internals

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    torch.manual_seed(0)
    grams = [(lambda x: x.T @ x)(torch.randn(12, n)) for n in (5, 5, 5, 7, 7)]
    real, shapes = torch.linalg.eigvalsh, []

    def counting(matrix, UPLO="L"):
        shapes.append(tuple(matrix.shape))
        return real(matrix, UPLO=UPLO)

    monkeypatch.setattr(torch.linalg, "eigvalsh", counting)
    values = laplace_internals._eigenvalues_of(grams)
    assert sorted(shapes) == [(2, 7, 7), (3, 5, 5)]
    for factor, lam in zip(grams, values, strict=True):
        torch.testing.assert_close(lam, real(factor).clamp(min=0))

    def nan_for_the_second(matrix, UPLO="L"):
        shapes.append(tuple(matrix.shape))
        result = real(matrix, UPLO=UPLO)
        if matrix.ndim == 3:
            result[1] = float("nan")
        return result

    shapes.clear()
    monkeypatch.setattr(torch.linalg, "eigvalsh", nan_for_the_second)
    values = laplace_internals._eigenvalues_of(grams[:3])
    assert shapes == [(3, 5, 5), (5, 5)]  # the batch, then the second factor alone
    for factor, lam in zip(grams[:3], values, strict=True):
        torch.testing.assert_close(lam, real(factor).clamp(min=0))

    def batches_fail(matrix, UPLO="L"):
        shapes.append(tuple(matrix.shape))
        if matrix.ndim == 3:
            raise RuntimeError("linalg.eigvalsh: the algorithm failed to converge")
        return real(matrix, UPLO=UPLO)

    shapes.clear()
    monkeypatch.setattr(torch.linalg, "eigvalsh", batches_fail)
    values = laplace_internals._eigenvalues_of(grams[:3])
    assert shapes == [(3, 5, 5), (5, 5), (5, 5), (5, 5)]
    for factor, lam in zip(grams[:3], values, strict=True):
        torch.testing.assert_close(lam, real(factor).clamp(min=0))
