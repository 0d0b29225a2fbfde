"""ella.marglik.linalg: eigenvalues through scipy's LAPACK agree with torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ella.marglik import linalg
from ella.marglik.linalg import SCIPY_EIGVALSH_MIN_SIZE, eigvalsh


def symmetric(n: int, dtype=torch.float64) -> torch.Tensor:
    x = torch.randn(2 * n, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    return (x.T @ x).to(dtype)


@pytest.mark.parametrize("uplo", ["U", "L"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_factor_matches_torch_in_float64(uplo, dtype):
    a = symmetric(SCIPY_EIGVALSH_MIN_SIZE + 1, dtype)
    # the other triangle is garbage: only UPLO's may be read
    garbled = a.triu() if uplo == "U" else a.tril()
    values = eigvalsh(garbled, UPLO=uplo)
    assert values.dtype == dtype
    expected = torch.linalg.eigvalsh(a.double())
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(values.double(), expected, rtol=0, atol=tol * expected.max())


def test_small_batched_and_differentiable_factors_stay_with_torch(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("scipy must not be called")

    monkeypatch.setattr("scipy.linalg.eigvalsh", refuse)
    small = symmetric(8)
    torch.testing.assert_close(eigvalsh(small), torch.linalg.eigvalsh(small))
    large = symmetric(SCIPY_EIGVALSH_MIN_SIZE)
    eigvalsh(torch.stack([large, large]))  # a batch
    leaf = large.clone().requires_grad_()
    eigvalsh(leaf).sum().backward()  # autograd: torch's path, with its gradient
    torch.testing.assert_close(leaf.grad, torch.eye(len(large), dtype=large.dtype))


def test_no_convergence_is_a_runtime_error_as_in_torch(monkeypatch):
    def fail(*args, **kwargs):
        raise np.linalg.LinAlgError("did not converge")

    monkeypatch.setattr("scipy.linalg.eigvalsh", fail)
    with pytest.raises(RuntimeError, match="did not converge"):
        linalg.eigvalsh(symmetric(SCIPY_EIGVALSH_MIN_SIZE))
