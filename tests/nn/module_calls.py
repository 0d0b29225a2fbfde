"""Shared checks for the batched forwards of ella's layers (``ella.nn.per_module_calls``)."""

from __future__ import annotations

import torch
from torch import nn


def assert_same_as_module_calls(module: nn.Module, z: torch.Tensor) -> None:
    """The batched forward equals the one inside ``per_module_calls`` (every module called
    on its own), in value and in the gradients of the input and every parameter, for a
    random linear function of the output."""
    from ella.nn import per_module_calls

    z = z.requires_grad_()
    results = []
    for mode in (torch.enable_grad, lambda: per_module_calls(module)):
        with mode():
            out = module(z)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((out * weight).sum(), [z, *module.parameters()])
        results.append((out, grads))
    (fast, grads_fast), (reference, grads_ref) = results
    torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads_fast, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def aten_ops(fn, op=None) -> int:
    """Number of aten operator calls ``fn()`` makes (only those of ``op`` if given)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += op is None or func is op
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.calls
