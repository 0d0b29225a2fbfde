"""Dense linear algebra for the evidence: eigenvalues routed to the faster LAPACK, and
batches of factors decomposed in parallel on the CPU."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import torch

__all__ = [
    "SCIPY_EIGVALSH_MIN_SIZE",
    "batched_eigvalsh",
    "eigvalsh",
    "scipy_blas_threads_match",
]

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

    On the CPU, torch's MKL routine is slower than scipy's OpenBLAS from about
    ``SCIPY_EIGVALSH_MIN_SIZE`` on, and no slower below
    (``python -m experiments.eigenvalues`` measures both); the 784 x 784 factors of the
    default mixer's 28 x 28 FC paths are most of a fit's eigenvalue time. Only where
    OpenBLAS would use torch's thread count (:func:`scipy_blas_threads_match`). Raises
    ``RuntimeError`` where LAPACK does not converge, as torch does.

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


def batched_eigvalsh(stacks: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """``torch.linalg.eigvalsh(stack, UPLO="U")`` of each batch of factors (K, n, n), or
    ``None`` for a batch on which LAPACK did not converge.

    On the CPU torch decomposes a batch one matrix after the other on one thread,
    whatever ``torch.get_num_threads()`` says. So each CPU batch is split into as many
    parts as torch has threads and the parts run in a thread pool (torch releases the
    GIL), which divides the time by about the number of threads. Each matrix still meets
    the same LAPACK routine alone, so the eigenvalues are the same bit for bit.
    """
    workers = torch.get_num_threads()
    jobs: list[list[Future]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for stack in stacks:
            parts = stack.tensor_split(workers) if stack.device.type == "cpu" else [stack]
            jobs.append(
                [pool.submit(torch.linalg.eigvalsh, part, UPLO="U") for part in parts if len(part)]
            )
    results: list[torch.Tensor | None] = []
    for parts in jobs:
        try:
            results.append(torch.cat([job.result() for job in parts]))
        except RuntimeError:  # did not converge on one of them
            results.append(None)
    return results
