"""How the training steps compute: their precision (``--precision``) and compilation
(``--compile``).

* :class:`StepArithmetic`: ``fp32`` keeps float32 throughout, the matrix units' TF32
  mode off in products and convolutions; ``tf32`` turns that mode on for the epoch's
  steps; ``bf16`` runs the forward pass under :func:`torch.autocast` to bfloat16 (products
  and convolutions in bfloat16, reductions and the loss in float32, the weights and their
  gradients float32). The settings hold inside the training steps only: the evidence fit,
  its log determinants and the test metrics keep float32 (or the float64 they use).
* :class:`CompiledOrEager`: :func:`torch.compile` of a module, which falls back to the
  module itself, with one message, where compiling fails.

Micikevicius et al., "Mixed Precision Training" (ICLR 2018); bfloat16 keeps float32's
exponent range, so no loss scaling is needed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ella.choices import Precision
from ella.errors import error_summary

__all__ = ["CompiledOrEager", "StepArithmetic"]


class StepArithmetic:
    """The arithmetic of the training steps on ``device`` for ``precision``.

    Use :meth:`arithmetic` around an epoch's steps and :meth:`autocast` around each
    forward pass and loss.
    """

    def __init__(self, precision: Precision | str, device: torch.device | str):
        self.precision = Precision.parse(precision, "precision")
        self.device = torch.device(device)

    @contextlib.contextmanager
    def arithmetic(self) -> Iterator[None]:
        """TF32 on in products and convolutions for ``tf32``, off otherwise; restored on
        exit (the flags are process-wide and act on CUDA devices only)."""
        matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
        before = matmul.allow_tf32, cudnn.allow_tf32
        tf32 = self.precision is Precision.TF32
        matmul.allow_tf32 = cudnn.allow_tf32 = tf32
        try:
            yield
        finally:
            matmul.allow_tf32, cudnn.allow_tf32 = before

    def autocast(self) -> contextlib.AbstractContextManager:
        """:func:`torch.autocast` to bfloat16 for ``bf16``, else nothing."""
        if self.precision is Precision.BF16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


class CompiledOrEager:
    """Call ``module`` through :func:`torch.compile`; where compiling fails (torch compiles
    at the first call: a missing C++ compiler, an operation the compiler does not know),
    say so once on stderr and call ``module`` itself from then on.

    Only the calls go through the compiled module; ``module`` keeps its parameters,
    state dict and hooks (an evidence fit calls it directly). Before the first call,
    which compiles (minutes on a CPU), one line on stderr says so where ``announce``.
    """

    def __init__(self, module: nn.Module, announce: bool = True, **options: Any):
        self.module = module
        self.compiled: Any = torch.compile(module, **options)
        self.announce = announce

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The module's output, from the compiled module while it compiles and runs."""
        if self.compiled is None:
            return self.module(*args, **kwargs)
        if self.announce:
            self.announce = False
            tqdm.write(
                "--compile: compiling the training step with torch.compile (can take "
                "minutes on a CPU) ...",
                file=sys.stderr,
            )
        try:
            return self.compiled(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 (whatever the compiler raises)
            tqdm.write(
                f"--compile: torch.compile failed ({error_summary(err)}); the "
                "training steps run without compilation",
                file=sys.stderr,
            )
            self.compiled = None
            torch._dynamo.reset()
            return self.module(*args, **kwargs)
