"""What differs between the Hessian structures of the Laplace evidence, one class each,
chosen by :data:`HESSIANS` (laplace-torch's ``_key`` registry is the model).

A structure names laplace-torch's class, fits its object, lists its curvature for the
finiteness check, says whether a data-parallel fit, a subset's scaling and the gathered
Kronecker terms apply, and gives each parameter tensor's GGN eigenvalues;
:class:`~ella.marglik.evidence.LaplaceEvidence` asks its ``hessian`` and branches on none
of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import torch
from laplace import DiagLaplace, FullLaplace, KronLaplace

from ella.choices import HessianStructure
from ella.errors import ConfigError
from ella.marglik.kron_terms import KronEvidenceTerms
from ella.marglik.laplace_internals import (
    decompose,
    dense_hessian,
    fit_undecomposed,
    hessian_scale,
    kron_eigenvalues,
    kron_factors,
    sum_factors,
)
from ella.marglik.support import SUPPORTED_MODULES, UnsupportedModuleError, check_supported

__all__ = ["HESSIANS", "DenseHessian", "DiagonalHessian", "Hessian", "KronHessian"]


class Hessian:
    """The part of the evidence that depends on the Hessian's structure."""

    #: the structure's name, the key of :data:`HESSIANS`
    structure: ClassVar[HessianStructure]
    #: laplace-torch's class of the structure
    laplace_class: ClassVar[type]
    #: whether the structure's factors can be summed over processes and scaled to
    #: a training set's size (the Kronecker factors can; a dense matrix is not kept so)
    factored: ClassVar[bool] = False

    def check_factored(self, what: str) -> None:
        """Raise a :class:`ConfigError` saying that ``what`` needs the Kronecker Hessian,
        unless this structure is :attr:`factored`."""
        if not self.factored:
            raise ConfigError(what)

    def entries(self, model: torch.nn.Module, parameters: int) -> int:
        """How many numbers the structure stores for ``model``, of ``parameters`` trainable
        parameters (before the eigendecomposition's copy): the memory estimate's count."""
        raise NotImplementedError

    def check_model(self, network: torch.nn.Module) -> None:
        """Refuse, before any work, a network whose modules this structure cannot take."""

    def fit(self, la, batches: Iterable, sum_: Callable | None) -> None:
        """Fit ``la`` over ``batches``; ``sum_`` sums a tensor over the processes of a
        data-parallel job (None: one process)."""
        la.fit(batches, progress_bar=False)

    def curvature(self, la) -> list[torch.Tensor]:
        """The tensors whose finiteness the fit checks."""
        return [dense_hessian(la)]

    def check_blocks(self, la, n_tensors: int, backend: str) -> None:
        """Refuse a fit whose blocks do not match the prior's ``n_tensors`` tensors."""

    def terms(self, la) -> KronEvidenceTerms | None:
        """The eigenvalues gathered once for fast evaluations, where the structure has them."""
        return None

    def block_eigenvalues(self, la, numels: Sequence[int]) -> list[torch.Tensor]:
        """Eigenvalues of each parameter tensor's GGN block (clamped at 0); ``numels`` the
        tensors' sizes, in the prior's order."""
        factor, hessian, out, start = hessian_scale(la), dense_hessian(la), [], 0
        for n in numels:
            out.append(self._block_eigenvalues(hessian, start, n).clamp_min(0) * factor)
            start += n
        return out

    def _block_eigenvalues(self, hessian: torch.Tensor, start: int, n: int) -> torch.Tensor:
        raise NotImplementedError


class DenseHessian(Hessian):
    """The full GGN, one dense matrix (tiny models)."""

    structure = HessianStructure.FULL
    laplace_class = FullLaplace

    def entries(self, model: torch.nn.Module, parameters: int) -> int:
        """``p^2``."""
        return parameters * parameters

    def _block_eigenvalues(self, hessian: torch.Tensor, start: int, n: int) -> torch.Tensor:
        return torch.linalg.eigvalsh(hessian[start : start + n, start : start + n])


class DiagonalHessian(Hessian):
    """The GGN's diagonal: each entry its own eigenvalue."""

    structure = HessianStructure.DIAG
    laplace_class = DiagLaplace

    def entries(self, model: torch.nn.Module, parameters: int) -> int:
        """``p``."""
        return parameters

    def _block_eigenvalues(self, hessian: torch.Tensor, start: int, n: int) -> torch.Tensor:
        return hessian[start : start + n]


class KronHessian(Hessian):
    """Kronecker factors per parameter tensor (Martens & Grosse, ICML 2015), decomposed
    once with the eigenvectors deferred (``LazyKronDecomposed``); summed over the
    processes before the decomposition in a data-parallel job."""

    structure = HessianStructure.KRON
    laplace_class = KronLaplace
    factored = True

    def entries(self, model: torch.nn.Module, parameters: int) -> int:
        """The two factors of every ``nn.Linear``/``nn.Conv2d``: ``out^2 + (in k^2 + 1)^2``."""
        entries = 0
        for m in model.modules():
            if isinstance(m, SUPPORTED_MODULES) and m.weight.requires_grad:
                fan_in = m.weight[0].numel() + (m.bias is not None)
                entries += m.weight.shape[0] ** 2 + fan_in**2
        return entries

    def check_model(self, network: torch.nn.Module) -> None:
        """Refuse a module no Kronecker block covers (:func:`check_supported`)."""
        check_supported(network)

    def fit(self, la, batches: Iterable, sum_: Callable | None) -> None:
        """Gather the factors, sum them over the processes if asked, then decompose."""
        fit_undecomposed(la, batches, progress=False)
        if sum_ is not None:  # after the sum over the processes
            sum_factors(la, sum_)
        else:
            decompose(la)

    def curvature(self, la) -> list[torch.Tensor]:
        """Every Kronecker factor."""
        return [f for block in kron_factors(la) for f in block]

    def check_blocks(self, la, n_tensors: int, backend: str) -> None:
        """One Kronecker block per parameter tensor, or an :class:`UnsupportedModuleError`."""
        blocks = len(kron_factors(la))
        if blocks != n_tensors:
            raise UnsupportedModuleError(
                f"the {backend} backend returned {blocks} Kronecker blocks for "
                f"{n_tensors} parameter tensors; a module is unsupported or "
                "not called as module(x) in forward"
            )

    def terms(self, la) -> KronEvidenceTerms:
        """The factors' eigenvalues gathered (:class:`KronEvidenceTerms`)."""
        return KronEvidenceTerms.from_laplace(la)

    def block_eigenvalues(self, la, numels: Sequence[int]) -> list[torch.Tensor]:
        """Each block's ``lambda_A (x) lambda_B``, scaled as the Hessian is."""
        factor, out = hessian_scale(la), []
        for eigs in kron_eigenvalues(la):
            lam = eigs[0] if len(eigs) == 1 else torch.outer(eigs[0], eigs[1]).flatten()
            out.append(lam.clamp_min(0) * factor)
        return out


#: Each Hessian structure's part of the evidence, by its name.
HESSIANS: dict[HessianStructure, Hessian] = {
    h.structure: h for h in (KronHessian(), DenseHessian(), DiagonalHessian())
}
