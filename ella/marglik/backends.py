"""What the Laplace evidence stands on: the stock curvature backends' tables and
wrappers (laplace-torch, ASDL, Curvlinops, the native one), the memory estimate checked
before a fit, and the checks of its inputs (the data size, finite batches, weights and
curvature)."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from laplace.curvature import AsdlGGN, CurvlinopsGGN
from torch import nn
from tqdm.auto import tqdm

from ella.choices import Backend, HessianStructure
from ella.errors import ConfigError, EvidenceError, InputDataError, TrainingDivergedError
from ella.marglik.hessians import HESSIANS
from ella.marglik.native import NativeGGN
from ella.runtime.system import available_memory, format_bytes

_NOT_FINITE = (
    "the GGN of the model is not finite at these weights (overflow); the evidence cannot be "
    "computed. Training probably diverged: try a smaller --lr"
)

#: the largest training-set size ``N`` accepted (far beyond any data set; ``N`` and the
#: ratios ``N / M`` stay exact in float64 and int64 arithmetic)
MAX_N_DATA = 10**12


def check_n_data(n_data, name: str = "n_data") -> int:
    """``n_data`` as a Python ``int`` if it is a valid training-set size ``N``: an integer
    (``int`` or a NumPy/torch integer scalar; not a bool, and no float, even a whole one)
    from 1 to :data:`MAX_N_DATA`.

    Raises:
        ConfigError: naming ``name``, the valid range and the value given.
    """
    valid = f"an int from 1 to {MAX_N_DATA:_}"
    is_bool = isinstance(n_data, bool) or getattr(n_data, "dtype", None) == torch.bool
    try:
        n = None if is_bool else operator.index(n_data)
    except TypeError:
        n = None
    if n is None:
        fix = "pass int(n)" if isinstance(n_data, float) else "pass len(train_set)"
        raise ConfigError(
            f"{name} must be the training-set size, {valid} (floats and bools are refused); "
            f"got {n_data!r} ({type(n_data).__name__}): {fix}"
        )
    if not 1 <= n <= MAX_N_DATA:
        raise ConfigError(f"{name} must be the training-set size, {valid}; got {n}")
    return int(n)


def _non_finite(tensors: list[torch.Tensor]) -> list[int]:
    """Indices of the tensors with a NaN or infinite entry, in order.

    One fused 2-norm over all of them (thousands of small factors or weights): the
    2-norm is finite when the tensor is, unless its squares overflow, so only tensors
    whose 2-norm is not finite are checked entry by entry. The 2-norm's kernel is the
    fast one: the largest |entry| over the default mixer's 1606 factors, and a check of
    each tensor on its own, are slower.
    """
    nonempty = [i for i, t in enumerate(tensors) if t.numel()]
    if not nonempty:
        return []
    norms = torch._foreach_norm([tensors[i].detach() for i in nonempty])
    finite = torch.isfinite(torch.stack([n.double() for n in norms])).tolist()
    suspect = [i for i, ok in zip(nonempty, finite, strict=True) if not ok]
    return [i for i in suspect if not bool(torch.isfinite(tensors[i]).all())]


def require_finite(tensors: Iterable[torch.Tensor]) -> None:
    """Refuse curvature with a NaN or infinite entry (:class:`~ella.errors.EvidenceError`)."""
    if _non_finite(list(tensors)):
        raise EvidenceError(_NOT_FINITE)


def _checking_finiteness(backend: type) -> type:
    """``backend`` with every batch's dense or diagonal curvature checked for finiteness as
    it is computed, so that a non-finite Hessian is refused before laplace-torch
    decomposes it (and may call ``exit()``). Kronecker factors are not checked per batch:
    laplace-torch only adds them up (:func:`fit_undecomposed`), a non-finite entry stays
    non-finite in the sum, and :meth:`LaplaceEvidence.fit` checks the sum once before
    anything decomposes it (two of three passes over the factors saved per fit)."""

    class Checked(backend):
        def full(self, *args, **kwargs):
            loss, hessian = super().full(*args, **kwargs)
            require_finite([hessian])
            return loss, hessian

        def diag(self, *args, **kwargs):
            loss, hessian = super().diag(*args, **kwargs)
            require_finite([hessian])
            return loss, hessian

    Checked.__name__ = Checked.__qualname__ = f"FinitenessChecked{backend.__name__}"
    return Checked


BACKENDS = {
    name: _checking_finiteness(cls)
    for name, cls in {
        Backend.NATIVE: NativeGGN,
        Backend.ASDL: AsdlGGN,
        Backend.CURVLINOPS: CurvlinopsGGN,
    }.items()
}


def hessian_bytes(model: nn.Module, structure: HessianStructure | str) -> int:
    """Bytes of the Laplace Hessian of ``model``'s trainable parameters (float32 or the
    parameters' dtype), including the eigendecomposition's copy.

    Twice the entries the structure stores (:meth:`~ella.marglik.hessians.Hessian.entries`):
    ``full``: ``2 p^2``; ``diag``: ``2 p``; ``kron``: twice the two factors of every
    ``nn.Linear``/``nn.Conv2d`` (``out^2 + (in k^2 + 1)^2``).
    """
    structure = HessianStructure.parse(structure, "Hessian structure")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return 0
    p = sum(t.numel() for t in params)
    return 2 * HESSIANS[structure].entries(model, p) * params[0].element_size()


def check_memory(model: nn.Module, structure: HessianStructure | str) -> None:
    """Refuse a Hessian that cannot fit in the memory available now, with the estimate."""
    need, have = hessian_bytes(model, structure), available_memory()
    if have is not None and need > have:
        p = sum(t.numel() for t in model.parameters() if t.requires_grad)
        said = (
            f"the {HessianStructure.parse(structure).value} Laplace Hessian of this model "
            f"({p:,} parameters) needs about {format_bytes(need)}, but only "
            f"{format_bytes(have)} of memory is available; use {{}} (or a smaller model)"
        )
        raise ConfigError(
            said.format("the Kronecker Hessian, 'kron'"),
            command_line=said.format("--hessian kron"),
        )


@contextmanager
def dependency_may_not_exit(what: str) -> Iterator[None]:
    """Turn a dependency's ``exit()`` into an :class:`~ella.errors.EvidenceError`.

    laplace-torch 0.3 calls ``exit()`` when an eigendecomposition does not converge
    (``laplace.utils.symeig``); the process must not end without a word.
    """
    try:
        yield
    except SystemExit as err:
        raise EvidenceError(
            f"{what} failed: laplace-torch could not eigendecompose the curvature (it "
            "tried to end the process); the curvature is probably not finite. Training "
            "probably diverged: try a smaller --lr"
        ) from err


class FiniteBatches:
    """A loader's batches, refusing inputs or targets with NaN or infinite values; other
    attributes (``dataset``, ``batch_size``) are the loader's, as laplace-torch reads them.

    With ``progress``, one transient bar counts the batches (laplace-torch's own bar is
    off, so that a round leaves no line between the epochs' bar and the next)."""

    def __init__(self, loader: Iterable, progress: bool = False):
        self.loader = loader
        self.progress = progress

    def __iter__(self) -> Iterator:
        # a bar beside the loader, not around it: a tqdm that iterates a DataLoader draws
        # from torch's global generator, which the MC GGN samples from (a run must not
        # depend on whether it shows progress)
        total = len(self.loader) if hasattr(self.loader, "__len__") else None
        bar = tqdm(total=total, desc="evidence fit", leave=False, disable=not self.progress)
        try:
            for batch in self.loader:
                bar.update()
                x, y = batch[0], batch[1]
                if not torch.isfinite(x).all():
                    raise InputDataError("the input data contains NaN or infinite values")
                if y.is_floating_point() and not torch.isfinite(y).all():
                    raise InputDataError("the targets contain NaN or infinite values")
                yield batch
        finally:
            bar.close()

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)


def non_finite_parameters(model: nn.Module) -> list[str]:
    """Names of ``model``'s parameters with a NaN or infinite entry, in order (one fused
    check over all of them first, :func:`_non_finite`)."""
    named = list(model.named_parameters())
    return [named[i][0] for i in _non_finite([p for _, p in named])]


def check_finite_weights(model: nn.Module) -> None:
    """Refuse to fit the evidence at weights that are not finite (a diverged run)."""
    bad = non_finite_parameters(model)
    if bad:
        raise TrainingDivergedError(
            f"the weights of {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} are not "
            "finite (training diverged); the evidence cannot be fitted"
        )


#: the bracket of the closed-form prior optimum in log precision; a group whose maximum
