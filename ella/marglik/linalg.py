"""Dense linear algebra for the evidence, routed to the fastest LAPACK measured here."""

from __future__ import annotations

import os

import torch

__all__ = ["SCIPY_EIGVALSH_MIN_SIZE", "eigvalsh", "scipy_blas_threads_match"]

#: from this size on, a CPU factor's eigenvalues come from scipy's LAPACK (see :func:`eigvalsh`)
SCIPY_EIGVALSH_MIN_SIZE = 256


def scipy_blas_threads_match() -> bool:
    """Whether scipy's OpenBLAS would run with as many threads as torch does.

    OpenBLAS reads ``OPENBLAS_NUM_THREADS`` (else ``OMP_NUM_THREADS``) when it is
    loaded, else starts one thread per CPU of the process's affinity mask; it does
    not follow ``torch.set_num_threads`` (``ELLA_THREADS``, a cgroup quota,
    data-parallel processes sharing a machine). Where the counts differ, the
    eigenvalues stay with torch rather than oversubscribe the cores.
    """
    chosen = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    try:
        blas = int(chosen) if chosen else len(os.sched_getaffinity(0))
    except (ValueError, AttributeError, OSError):
        return False
    return blas == torch.get_num_threads()


def eigvalsh(factor: torch.Tensor, UPLO: str = "U") -> torch.Tensor:
    """``torch.linalg.eigvalsh``, or for a large CPU factor outside autograd the same LAPACK
    routine through scipy (``?syev``, eigenvalues only), whose wheels bring OpenBLAS.

    On this project's 2-core machines torch's MKL took longer for the large factors
    (``python -m benchmarks.eigenvalues``, ``benchmarks/results/eigenvalues_cpu.md``,
    2026-11-25: 19.8 against 14.8 ms at n = 784, 9.8 against 7.5 at 576, the same at
    128-256, slower below); the
    784 x 784 factors of the default mixer's 28 x 28 FC paths are most of a fit's
    eigenvalue time. Only where OpenBLAS would use torch's thread count
    (:func:`scipy_blas_threads_match`). Raises ``RuntimeError`` where LAPACK does not
    converge, as torch does.

    Args:
        factor: a symmetric matrix (n, n), or a batch of them (torch's path).
        UPLO: the triangle that is read, ``"U"`` or ``"L"``.

    Returns:
        The eigenvalues, ascending, in ``factor``'s dtype and device.
    """
    routed = (
        factor.device.type == "cpu"
        and factor.ndim == 2
        and factor.shape[-1] >= SCIPY_EIGVALSH_MIN_SIZE
        and factor.dtype in (torch.float32, torch.float64)
        and not factor.requires_grad
        and scipy_blas_threads_match()
    )
    if not routed:
        return torch.linalg.eigvalsh(factor, UPLO=UPLO)
    import numpy as np
    import scipy.linalg

    try:
        values = scipy.linalg.eigvalsh(
            factor.numpy(), lower=UPLO == "L", driver="ev", check_finite=False
        )
    except np.linalg.LinAlgError as err:
        raise RuntimeError(f"eigvalsh did not converge: {err}") from err
    return torch.from_numpy(values).to(factor.dtype)
