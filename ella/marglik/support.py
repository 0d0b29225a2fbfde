"""Which modules the Kronecker-factored evidence supports, checked before any fit."""

from __future__ import annotations

from torch import nn

from ella.errors import EllaError
from ella.nn.batched import BatchedLinear

__all__ = ["SUPPORTED_MODULES", "UnsupportedModuleError", "check_supported"]

SUPPORTED_MODULES = (nn.Linear, nn.Conv2d)


class UnsupportedModuleError(EllaError, ValueError):
    """A parameter lives in a module the Kronecker-factored backends cannot handle."""


def check_supported(model: nn.Module, stacked: bool = True) -> None:
    """Raise if a parameter is not the weight/bias of an ``nn.Linear`` or ``nn.Conv2d``
    (or, where ``stacked``, of an FC path's :class:`~ella.nn.batched.BatchedLinear`, which
    :class:`~ella.marglik.LaplaceEvidence` sees per channel), or if a module has only some
    of its parameters frozen. A curvature backend called on the network itself passes
    ``stacked=False``."""
    partial = []
    for name, m in model.named_modules():
        own = dict(m.named_parameters(recurse=False))
        if len({p.requires_grad for p in own.values()}) > 1:
            frozen = ", ".join(n for n, p in own.items() if not p.requires_grad)
            partial.append(f"{name or '<model>'} ({frozen} frozen)")
    if partial:
        raise UnsupportedModuleError(
            "the Kronecker-factored evidence needs each module's weight and bias both trainable "
            f"or both frozen; partly frozen: {', '.join(partial)}. Freeze the whole module "
            "(module.requires_grad_(False)) or none of it."
        )
    unsupported = [
        (f"{name or '<model>'} ({type(m).__name__})", isinstance(m, BatchedLinear))
        for name, m in model.named_modules()
        if any(p.requires_grad for p in m.parameters(recurse=False))
        and not isinstance(m, SUPPORTED_MODULES)
    ]
    batched = [label for label, is_batched in unsupported if is_batched]
    if batched and not stacked:
        raise UnsupportedModuleError(
            f"{', '.join(batched)}: an FC path's stacked maps are one Kronecker block per "
            "channel; fit the evidence on ella.marglik.PerChannelView(model).network "
            "(LaplaceEvidence does)"
        )
    bad = [label for label, is_batched in unsupported if not is_batched]
    if bad:
        raise UnsupportedModuleError(
            "the Kronecker-factored evidence supports parameters of nn.Linear and nn.Conv2d "
            f"modules only; unsupported: {', '.join(bad)}. Put symmetry in parameter-free "
            "transforms around such modules (as ella.nn does), or freeze these parameters."
        )
