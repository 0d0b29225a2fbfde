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
* ``ParametricLaplace.fit``: the accumulation without the decomposition, called
  with ``override=False`` on a sum ella starts (``la.H += H_batch`` on
  :class:`_RunningKronSum`, ``la.loss``, ``la.n_data``); every ``KronLaplace`` fit
  ends with :func:`decompose` instead of laplace-torch's own;
* ``KronDecomposed``'s attributes ``eigenvectors``, ``eigenvalues``, ``deltas`` and
  ``damping``, which :class:`LazyKronDecomposed` provides.

If a new laplace-torch release renames one of them, :func:`check_internals`
(called by ``tests/marglik/test_laplace_internals.py``) fails with the name of
the attribute, instead of the evidence going wrong somewhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from laplace.utils.matrix import Kron, KronDecomposed

from ella.errors import EvidenceError
from ella.marglik.linalg import SCIPY_EIGVALSH_MIN_SIZE, batched_eigvalsh, eigvalsh
from ella.runtime.timing import section

__all__ = [
    "LazyKronDecomposed",
    "check_internals",
    "decompose",
    "dense_hessian",
    "fit_undecomposed",
    "hessian_scale",
    "kron_eigenvalues",
    "kron_factors",
    "mark_permuted",
    "own_copies",
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


def _robust_symmetric(decomposition: Callable[..., Any], factor: torch.Tensor) -> Any:
    """``decomposition(factor, UPLO="U")`` (eigvalsh or eigh; the upper triangle, as
    laplace-torch reads it), made robust for rank-deficient factors with many repeated
    eigenvalues, for which LAPACK may fail or silently return NaN (seen with eigvalsh on the
    lower triangle of a 256 x 256 float32 FC factor of rank 124): a result that is not
    finite is retried with ``+I`` (removed again afterwards), then in float64."""

    def finite(result: Any) -> bool:
        parts = result if isinstance(result, tuple) else (result,)
        return all(bool(torch.isfinite(p).all()) for p in parts)

    def attempts() -> Iterator[tuple[torch.Tensor, float]]:
        # made one at a time: almost every factor succeeds at the first
        yield factor, 0.0
        eye = torch.eye(factor.shape[0], dtype=factor.dtype, device=factor.device)
        yield factor + eye, 1.0
        yield factor.double() + eye, 1.0

    for attempt, shift in attempts():
        try:
            result = decomposition(attempt, UPLO="U")
        except RuntimeError:  # did not converge
            continue
        if finite(result):
            if isinstance(result, tuple):  # (eigenvalues, eigenvectors)
                return result[0].to(factor.dtype) - shift, result[1].to(factor.dtype)
            return result.to(factor.dtype) - shift
    raise EvidenceError(
        f"a {tuple(factor.shape)} Kronecker factor could not be eigendecomposed; the "
        "curvature is ill-conditioned: try a smaller --lr"
    )


def _factor_eigenvalues(factor: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (ascending, clamped at 0) of a symmetric factor (n, n), or the factor
    itself when it is a diagonal (n,), as laplace-torch's ``Kron.decompose`` gives them;
    a failure raises :class:`EvidenceError` where laplace-torch ends the process."""
    if factor.ndim == 1:
        return factor
    return _robust_symmetric(eigvalsh, factor).clamp(min=0.0)


def _factor_eigenvectors(factor: torch.Tensor) -> torch.Tensor:
    """Eigenvectors (n, n) as columns, ascending eigenvalue; the identity for a diagonal."""
    if factor.ndim == 1:
        return torch.eye(len(factor), dtype=factor.dtype, device=factor.device)
    return _robust_symmetric(torch.linalg.eigh, factor)[1]


@section("eigenvalues")
def _eigenvalues_of(factors: list[torch.Tensor]) -> list[torch.Tensor]:
    """:func:`_factor_eigenvalues` of each factor; the dense ones below
    ``SCIPY_EIGVALSH_MIN_SIZE`` of one shape, dtype and device in one batched
    ``eigvalsh`` (one call instead of hundreds: on the default mixer 1063 of the 1123
    distinct factors are such, 832 of them 49 x 49). A factor whose batched result is not
    finite, or a batch that LAPACK does not converge on, is decomposed on its own, with
    :func:`_robust_symmetric`'s retries."""
    results: list[torch.Tensor | None] = [None] * len(factors)
    batches: dict[tuple, list[int]] = {}
    for k, f in enumerate(factors):
        if f.ndim == 2 and f.shape[-1] < SCIPY_EIGVALSH_MIN_SIZE:
            batches.setdefault((tuple(f.shape), f.dtype, f.device), []).append(k)
        else:
            results[k] = _factor_eigenvalues(f)
    stacks = [torch.stack([factors[k] for k in members]) for members in batches.values()]
    for members, values in zip(batches.values(), batched_eigvalsh(stacks), strict=True):
        finite = (
            [False] * len(members) if values is None else torch.isfinite(values).all(-1).tolist()
        )
        for n, k in enumerate(members):
            results[k] = values[n].clamp(min=0.0) if finite[n] else _factor_eigenvalues(factors[k])
    return results


class LazyKronDecomposed(KronDecomposed):
    """laplace-torch's ``KronDecomposed`` whose eigenvalues and eigenvectors are computed on
    first use.

    The log evidence needs only the eigenvalues of the Kronecker factors
    (``log det(H + P)``, see :class:`ella.marglik.kron_terms.KronEvidenceTerms`), and
    ``eigvalsh`` skips the eigenvectors that ``eigh`` also computes. laplace-torch's own
    methods (``__add__``, posterior samples, the predictive) read :attr:`eigenvectors`,
    which then decomposes every factor once more and keeps the result. Nothing is
    computed until it is read, so a decomposition replaced before that (a subset fit
    is decomposed again once its factors are scaled, :func:`scale_to_n_data`) costs
    nothing.

    Eigenvalues of dense factors are clamped at 0, and a diagonal factor is its own
    eigenvalues, as in laplace-torch's ``Kron.decompose``.

    Args:
        factors: the factors per parameter tensor, ``[B, A]`` or ``[B]`` (``Kron.kfacs``).
        damping: laplace-torch's damping flag.
    """

    def __init__(self, factors: list[list[torch.Tensor]], damping: bool = False):
        self._factors = [list(block) for block in factors]
        self._eigenvalues: list[list[torch.Tensor]] | None = None
        self._eigenvectors: list[list[torch.Tensor]] | None = None
        first = factors[0][0]
        self.deltas = torch.zeros(len(self), device=first.device, dtype=first.dtype)
        self.damping = damping

    def __len__(self) -> int:
        return len(self._factors)

    @property
    def eigenvalues(self) -> list[list[torch.Tensor]]:
        """Each factor's eigenvalues, per parameter tensor, computed on first read."""
        if self._eigenvalues is None:
            self._eigenvalues = _once_per_distinct_factor(
                self._factors, _eigenvalues_of, lambda values, _: values
            )
        return self._eigenvalues

    @property
    def eigenvectors(self) -> list[list[torch.Tensor]]:
        """Each factor's eigenvectors (columns), per parameter tensor, computed on first read."""
        if self._eigenvectors is None:
            self._eigenvectors = _once_per_distinct_factor(
                self._factors,
                lambda fs: [_factor_eigenvectors(f) for f in fs],
                lambda vectors, perm: vectors[perm],
            )
        return self._eigenvectors


def mark_permuted(factor: torch.Tensor, source: torch.Tensor, permutation: torch.Tensor) -> None:
    """Record that ``factor`` should be ``source[permutation][:, permutation]`` (a
    similarity by a permutation), so that :class:`LazyKronDecomposed` takes its
    eigenvalues from ``source``'s, and its eigenvectors from ``source``'s rows permuted.
    Only a hint: the decomposition confirms the equality entry for entry first."""
    factor._ella_permuted = (source, permutation)


def _permuted_source(factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(source, permutation)`` where :func:`mark_permuted` marked ``factor`` and the
    mark still holds exactly, else ``None``."""
    mark = getattr(factor, "_ella_permuted", None)
    if mark is None:
        return None
    source, permutation = mark
    permutation = permutation.to(factor.device)
    if source.shape != factor.shape or not torch.equal(source[permutation][:, permutation], factor):
        return None
    return source, permutation


def _once_per_distinct_factor(
    factors: list[list[torch.Tensor]],
    decompositions: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    permuted: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> list[list[torch.Tensor]]:
    """The decomposition of every factor, computed once for factors that are equal or
    equal up to a marked permutation.

    A bias block ``[B]`` repeats its weight block's output factor ``B`` (``[B, A]``),
    equal entry for entry, since both sum the same output gradients; on the default
    mixer that is 378 of the 1606 factors, among them 8 of the 28 of 784 x 784. Equal
    factors are found by identity or by their trace, confirmed by ``torch.equal``; the
    result is shared (read-only). A factor marked by :func:`mark_permuted` (the pixel
    factors of lifted copies, :class:`ella.marglik.kfac_blocks.FCPathBlock`), once
    confirmed, gets ``permuted(source's result, permutation)``.

    Args:
        factors: per parameter tensor, ``[B, A]`` or ``[B]``.
        decompositions: the results for a list of distinct factors, in order.
        permuted: a source's result turned into that of its permuted copy.
    """
    flat = [f for block in factors for f in block]
    traces = torch.stack([f.diagonal().sum() if f.ndim == 2 else f.sum() for f in flat]).tolist()
    seen: dict[tuple, list[int]] = {}  # (shape, dtype, device, trace) -> own positions
    position: dict[int, int] = {}  # id of a factor -> its position in flat
    plan: list[tuple] = []  # ("own",) | ("same", j) | ("permuted", j, permutation)
    for i, (f, trace) in enumerate(zip(flat, traces, strict=True)):
        candidates = seen.setdefault((tuple(f.shape), f.dtype, f.device, trace), [])
        same = next((j for j in candidates if flat[j] is f or torch.equal(f, flat[j])), None)
        marked = _permuted_source(f) if same is None and f.ndim == 2 else None
        if same is not None:
            plan.append(("same", same))
        elif marked is not None and id(marked[0]) in position:
            plan.append(("permuted", position[id(marked[0])], marked[1]))
        else:
            plan.append(("own",))
            candidates.append(i)
        position.setdefault(id(f), i)
    own = [i for i, step in enumerate(plan) if step[0] == "own"]
    computed = dict(zip(own, decompositions([flat[i] for i in own]), strict=True))
    results: list[torch.Tensor] = []
    for i, step in enumerate(plan):
        if step[0] == "own":
            results.append(computed[i])
        elif step[0] == "same":
            results.append(results[step[1]])
        else:
            results.append(permuted(results[step[1]], step[2]))
    parts = iter(results)
    return [[next(parts) for _ in block] for block in factors]


def decompose(la) -> None:
    """Set ``la.H`` to the decomposition of the fitted factors ``la.H_facs``
    (a :class:`LazyKronDecomposed`; what ``KronLaplace.fit`` would set, eigenvectors
    deferred)."""
    la.H = LazyKronDecomposed(la.H_facs.kfacs, damping=la.damping)


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


def scale_to_n_data(la, n_data: int, curvature_ratio: float = 1.0) -> None:
    """Turn a ``KronLaplace`` fitted on ``M`` examples into the estimator of ``n_data`` points.

    Multiplies the log-likelihood term (``la.loss``) by ``n_data / M`` and every output
    factor ``B`` (the whole block for a bias) by ``curvature_ratio * n_data / M``, keeps the
    input factors ``A`` (means over the subset), sets ``la.n_data`` and decomposes the
    factors again. Immer, van der Ouderaa, van der Wilk, Rätsch & Schölkopf, ICML 2023;
    ``curvature_ratio`` is the control variate of :mod:`ella.marglik.control` (1: none).
    """
    scale = n_data / la.n_data
    for block in la.H_facs.kfacs:
        block[0] = block[0] * (scale * curvature_ratio)
    la.loss = la.loss * scale
    la.n_data = n_data
    decompose(la)


def own_copies(sums: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """``sums`` block by block, with a tensor that appears in it a second time copied, so
    that the running sums can be added to in place without counting it twice."""
    seen: set[int] = set()
    owned = []
    for block in sums:
        own = []
        for t in block:
            own.append(t.clone() if id(t) in seen else t)
            seen.add(id(t))
        owned.append(own)
    return owned


class _RunningKronSum:
    """The start of a sum of per-batch ``Kron`` (``la.H += H_batch`` in laplace-torch's
    ``ParametricLaplace.fit``): the first batch's factors become the running totals and
    later batches are added into them in place (:class:`_InPlaceKron`).

    laplace-torch starts from zeros of every factor's shape and allocates a new sum for
    every batch; on the default mixer that is 1606 zero factors and one full copy of
    them per batch.
    """

    def __iadd__(self, batch: Kron) -> Kron:
        return _InPlaceKron([list(block) for block in batch.kfacs])


def _sharing(kfacs: list[list[torch.Tensor]]) -> list[int]:
    """Per factor (in order), the position of the first factor that is the same tensor."""
    first: dict[int, int] = {}
    return [first.setdefault(id(f), i) for i, f in enumerate(f for b in kfacs for f in b)]


class _InPlaceKron(Kron):
    """A ``Kron`` to which ``+=`` adds another's factors in place.

    A tensor that several blocks share (the native backend hands a bias block its
    weight's ``B``) is added to once, where the added ``Kron`` shares it the same way;
    otherwise the shared totals are first made copies of their own (:func:`own_copies`).
    """

    def __iadd__(self, other: Kron) -> Kron:
        if _sharing(self.kfacs) != _sharing(other.kfacs):
            self.kfacs = own_copies(self.kfacs)
        added: set[int] = set()
        for mine, theirs in zip(self.kfacs, other.kfacs, strict=True):
            for total, part in zip(mine, theirs, strict=True):
                if id(total) not in added:
                    total.add_(part)
                    added.add(id(total))
        return self


def fit_undecomposed(la, loader, progress: bool = False) -> None:
    """``KronLaplace.fit`` without its final eigendecomposition: ``la.H_facs`` holds the
    accumulated factors, to be summed over processes (:func:`sum_factors`, which
    decomposes them once) instead of decomposed twice. Calls laplace-torch's
    ``ParametricLaplace.fit`` (the accumulation over batches) directly, with the sum
    started from the first batch (:class:`_RunningKronSum`) instead of from zeros."""
    from laplace.baselaplace import ParametricLaplace

    la.H_facs = None
    la.H, la.loss, la.n_data = _RunningKronSum(), 0, 0  # what override=True would reset
    ParametricLaplace.fit(la, loader, override=False, progress_bar=progress)
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
    decompose(la)


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
