"""Checking symmetry by acting with the group (used by ella's own tests, and yours).

``assert_equivariant`` compares ``f(g . x)`` with ``g . f(x)`` for every
element ``g``, where each side's action is chosen by name:

* ``"image"``: the group's action on (B, C, H, W) batches;
* ``"lifted"``: its action on lifted tensors (B, |G|, C, H, W);
* ``"invariant"``: the trivial action (output unchanged), for invariance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from ella.groups import Action, Group, get_group, group_action


@torch.no_grad()
def equivariance_errors(
    module: Callable[[torch.Tensor], torch.Tensor],
    group: str | Group,
    x: torch.Tensor,
    *,
    in_action: Action = "image",
    out_action: Action = "invariant",
    elements: Iterable[int] | None = None,
) -> dict[int, float]:
    """Max absolute deviation ``|f(g x) - g f(x)|`` for each group element.

    Args:
        module: the function or module to check (put it in eval mode yourself
            if it behaves differently in training).
        group: the group, or its name.
        x: input batch.
        in_action: how the group acts on the input.
        out_action: how the group acts on the output.
        elements: elements to check; all by default.

    Returns:
        ``{g: max |f(g x) - g f(x)|}``.
    """
    group = get_group(group)
    act_in, act_out = group_action(group, in_action), group_action(group, out_action)
    elements = group.elements if elements is None else list(elements)
    if not elements:
        raise ValueError("elements is empty; give at least one group element to check")
    fx = module(x)
    return {g: float((module(act_in(g, x)) - act_out(g, fx)).abs().max()) for g in elements}


def assert_equivariant(
    module: Callable[[torch.Tensor], torch.Tensor],
    group: str | Group,
    x: torch.Tensor,
    *,
    in_action: Action = "image",
    out_action: Action = "invariant",
    elements: Iterable[int] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> dict[int, float]:
    """Assert ``f(g x) == g f(x)`` for every element, within ``atol + rtol * max|f(x)|``.

    A deviation that is not finite (the module returned NaN or infinity) fails.

    Raises:
        AssertionError: naming the worst element and its deviation, or saying that
            the output is not finite.
        ValueError: ``elements`` is empty.

    Returns:
        The per-element deviations, as :func:`equivariance_errors`.
    """
    group = get_group(group)
    errors = equivariance_errors(
        module, group, x, in_action=in_action, out_action=out_action, elements=elements
    )
    with torch.no_grad():
        fx = module(x)
    if not torch.isfinite(fx).all():
        raise AssertionError(f"the module's output on x is not finite (NaN or inf): {fx}")
    scale = float(fx.abs().max())
    tol = atol + rtol * scale
    bad = {g: e for g, e in errors.items() if not math.isfinite(e)}
    if bad:
        raise AssertionError(
            f"not equivariant under {group.name}: deviations are not finite for elements "
            f"{sorted(bad)} (the module returns NaN or inf on transformed inputs)"
        )
    worst = max(errors, key=errors.get)
    if not errors[worst] <= tol:
        raise AssertionError(
            f"not equivariant under {group.name}: element {worst} deviates by "
            f"{errors[worst]:.3g} > tolerance {tol:.3g} (all: {errors})"
        )
    return errors
