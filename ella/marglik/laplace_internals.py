"""Every access to laplace-torch's private attributes, in one place.

ella builds on laplace-torch 0.3 (Daxberger et al., "Laplace Redux", NeurIPS
2021) through its public classes (``KronLaplace``, ``FullLaplace``,
``DiagLaplace``, ``CurvatureInterface``, ``Kron``) and, for the things its
public API does not give, through the attributes read or written here:

* ``la._H_factor``: the scale ``1 / sigma_noise^2`` laplace-torch applies to the
  fitted curvature before adding the prior precision;
* ``la._dtype``: the dtype of the model's parameters (and of the posterior);
* ``la.H_facs.kfacs``: the undecomposed Kronecker factors of a ``KronLaplace``,
  one list per parameter tensor, ``[B, A]`` or ``[B]`` (output factor first);
* ``la.H``: the decomposed ``KronDecomposed`` (``.eigenvalues``, a list per
  tensor) of a ``KronLaplace``, or the dense/diagonal Hessian of a
  ``FullLaplace``/``DiagLaplace``;
* ``la.loss``, ``la.n_data`` and ``la.damping``: written by subset evidence;
* ``ParametricLaplace.fit``: the accumulation of a data-parallel fit, whose factors
  are decomposed only after they are summed over the processes.

If a new laplace-torch release renames one of them, :func:`check_internals`
(called by ``tests/marglik/test_laplace_internals.py``) fails with the name of
the attribute, instead of the evidence going wrong somewhere else.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "check_internals",
    "dense_hessian",
    "fit_undecomposed",
    "hessian_scale",
    "kron_eigenvalues",
    "kron_factors",
    "parameter_dtype",
    "scale_to_n_data",
    "sum_factors",
]


def hessian_scale(la) -> float:
    """laplace-torch's factor between the fitted curvature and the GGN (``1 / sigma^2``)."""
    return float(la._H_factor)


def parameter_dtype(la) -> torch.dtype:
    """The dtype laplace-torch builds the prior precision and posterior in."""
    return la._dtype


def kron_factors(la) -> list[list[torch.Tensor]]:
    """The Kronecker factors of a fitted ``KronLaplace``: per parameter tensor
    ``[B, A]`` (output factor, input factor) or ``[B]`` (a bias or scalar block)."""
    return la.H_facs.kfacs


def kron_eigenvalues(la) -> list[list[torch.Tensor]]:
    """Eigenvalues of each tensor's decomposed factors (same layout as :func:`kron_factors`)."""
    return la.H.eigenvalues


def dense_hessian(la) -> torch.Tensor:
    """The fitted Hessian of a ``FullLaplace`` (P, P) or ``DiagLaplace`` (P,)."""
    return la.H


def scale_to_n_data(la, n_data: int) -> None:
    """Turn a ``KronLaplace`` fitted on ``M`` examples into the estimator of ``n_data`` points.

    Multiplies the log-likelihood term (``la.loss``) and every output factor
    ``B`` (the whole block for a bias) by ``n_data / M``, keeps the input factors
    ``A`` (means over the subset), sets ``la.n_data`` and decomposes the factors
    again. Immer, van der Ouderaa, van der Wilk, Rätsch & Schölkopf, ICML 2023.
    """
    scale = n_data / la.n_data
    for block in la.H_facs.kfacs:
        block[0] = block[0] * scale
    la.loss = la.loss * scale
    la.n_data = n_data
    la.H = la.H_facs.decompose(damping=la.damping)


def fit_undecomposed(la, loader, progress: bool = False) -> None:
    """``KronLaplace.fit`` without its final eigendecomposition: ``la.H_facs`` holds the
    accumulated factors, to be summed over processes (:func:`sum_factors`, which
    decomposes them once) instead of decomposed twice. Calls laplace-torch's
    ``ParametricLaplace.fit`` (the accumulation over batches) directly."""
    from laplace.baselaplace import ParametricLaplace

    la.H_facs = None
    ParametricLaplace.fit(la, loader, override=True, progress_bar=progress)
    la.H_facs = la.H


def sum_factors(la, sum_: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Replace a fitted ``KronLaplace``'s factors and log-likelihood term by their sums over
    the processes of a data-parallel fit, then decompose the factors again.

    Each process fitted its shard with the whole data set's ``N`` (``la.n_data``), so
    its factors are its shard's sums ``[sum b b^T, sum a a^T / N]`` and the sums over the
    processes are the factors of the whole data set: KFAC sums both factors over the
    examples (laplace-torch adds the factors of its batches the same way).

    Args:
        la: a fitted ``KronLaplace``.
        sum_: sums a tensor over the processes in place and returns it
            (:meth:`ella.distributed.World.sum_`).
    """
    factors = [f for block in la.H_facs.kfacs for f in block]
    loss = la.loss if torch.is_tensor(la.loss) else torch.tensor(float(la.loss))
    # one all-reduce of everything flattened together (thousands of small factors would
    # each pay a collective's latency), in the factors' dtype
    flat = torch.cat([f.reshape(-1) for f in factors] + [loss.detach().reshape(1).to(factors[0])])
    flat = sum_(flat)
    parts = iter(flat.split([f.numel() for f in factors] + [1]))
    for block in la.H_facs.kfacs:
        for i, factor in enumerate(block):
            block[i] = next(parts).view_as(factor).clone()
    la.loss = next(parts)[0].to(loss.dtype)
    la.H = la.H_facs.decompose(damping=la.damping)


def check_internals(la) -> None:
    """Raise ``AttributeError`` naming each private attribute a fitted ``KronLaplace`` lacks.

    Args:
        la: a fitted laplace-torch ``KronLaplace``.
    """
    import laplace

    version = getattr(laplace, "__version__", "unknown")
    factors = getattr(la, "H_facs", None)
    decomposed = getattr(la, "H", None)
    from laplace.baselaplace import ParametricLaplace

    present = {
        "ParametricLaplace.fit": callable(getattr(ParametricLaplace, "fit", None)),
        "_H_factor": hasattr(la, "_H_factor"),
        "_dtype": isinstance(getattr(la, "_dtype", None), torch.dtype),
        "H_facs.kfacs": isinstance(getattr(factors, "kfacs", None), list),
        "H_facs.decompose": callable(getattr(factors, "decompose", None)),
        "H.eigenvalues": isinstance(getattr(decomposed, "eigenvalues", None), list),
        "loss": hasattr(la, "loss"),
        "n_data": hasattr(la, "n_data"),
        "damping": hasattr(la, "damping"),
    }
    missing = [name for name, ok in present.items() if not ok]
    if missing:
        raise AttributeError(
            f"laplace-torch {version} lacks the internals ella reads: {', '.join(missing)}; "
            "update ella/marglik/laplace_internals.py for this release or install "
            "laplace-torch 0.3"
        )
