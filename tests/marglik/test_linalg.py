"""ella.marglik.linalg: eigenvalues through scipy's LAPACK agree with torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ella.marglik import linalg
from ella.marglik.linalg import SCIPY_EIGVALSH_MIN_SIZE, batched_eigvalsh, eigvalsh


def symmetric(n: int, dtype=torch.float64) -> torch.Tensor:
    x = torch.randn(2 * n, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    return (x.T @ x).to(dtype)


@pytest.mark.parametrize("uplo", ["U", "L"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_factor_matches_torch_in_float64(uplo, dtype, monkeypatch):
    import scipy.linalg

    real, calls = scipy.linalg.eigvalsh, []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(linalg, "scipy_blas_threads_match", lambda: True)
    monkeypatch.setattr("scipy.linalg.eigvalsh", counting)
    a = symmetric(SCIPY_EIGVALSH_MIN_SIZE + 1, dtype)
    # the other triangle is garbage: only UPLO's may be read
    garbled = a.triu() if uplo == "U" else a.tril()
    values = eigvalsh(garbled, UPLO=uplo)
    assert values.dtype == dtype
    expected = torch.linalg.eigvalsh(a.double())
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(values.double(), expected, rtol=0, atol=tol * expected.max())
    assert calls == [1]  # through scipy


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
    monkeypatch.setattr(linalg, "scipy_blas_threads_match", lambda: True)

    def fail(*args, **kwargs):
        raise np.linalg.LinAlgError("did not converge")

    monkeypatch.setattr("scipy.linalg.eigvalsh", fail)
    with pytest.raises(RuntimeError, match="did not converge"):
        linalg.eigvalsh(symmetric(SCIPY_EIGVALSH_MIN_SIZE))


def test_scipy_only_where_openblas_would_use_torchs_thread_count(monkeypatch):
    """OpenBLAS does not follow torch.set_num_threads: with another count (ELLA_THREADS, a
    data-parallel process) the eigenvalues stay with torch instead of oversubscribing."""
    import os

    calls = []
    real = linalg.scipy_blas_threads_match

    def spy(*args, **kwargs):
        calls.append(1)
        raise AssertionError("scipy must not be called")

    large = symmetric(SCIPY_EIGVALSH_MIN_SIZE)
    threads = torch.get_num_threads()
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads + 1))
    assert not real()
    monkeypatch.setattr("scipy.linalg.eigvalsh", spy)
    torch.testing.assert_close(eigvalsh(large), torch.linalg.eigvalsh(large, UPLO="U"))
    assert calls == []
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", str(threads))  # OpenBLAS's own variable wins
    assert real()
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert real() == (len(os.sched_getaffinity(0)) == threads)


def test_a_batch_is_split_over_torch_threads_with_the_same_eigenvalues(monkeypatch):
    """torch decomposes a CPU batch on one thread, so it is split into one part per
    thread; the values are those of the whole batch (to float rounding: on some CPUs
    LAPACK's kernels round a matrix differently by its place in a batch), and a part
    LAPACK does not converge on makes its whole batch ``None``."""
    torch.manual_seed(0)
    x = torch.randn(7, 5, 12)
    stack, small = x @ x.transpose(1, 2), torch.eye(4)[None]
    real, shapes = torch.linalg.eigvalsh, []

    def counting(matrix, UPLO="L"):
        shapes.append(tuple(matrix.shape))
        return real(matrix, UPLO=UPLO)

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(torch.linalg, "eigvalsh", counting)
    values, one = batched_eigvalsh([stack, small])
    assert sorted(shapes) == [(1, 4, 4), (2, 5, 5), (2, 5, 5), (3, 5, 5)]
    torch.testing.assert_close(values, real(stack, UPLO="U"), rtol=1e-6, atol=1e-5)
    assert torch.equal(one, real(small))

    def last_part_fails(matrix, UPLO="L"):
        if matrix.shape[0] == 2 and torch.equal(matrix, stack[-2:]):
            raise RuntimeError("linalg.eigvalsh: the algorithm failed to converge")
        return real(matrix, UPLO=UPLO)

    monkeypatch.setattr(torch.linalg, "eigvalsh", last_part_fails)
    assert batched_eigvalsh([stack, small])[0] is None
