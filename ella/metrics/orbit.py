"""Predictions over a group orbit: orbit-same-predictions (OSP) and symmetric KL.

For an input ``x`` and a group ``G`` the *orbit* is ``{g . x : g in G}``.
A model is invariant on ``x`` when its prediction is the same at every point
of the orbit. Two summaries, both per input:

* **OSP** (Gerken & Kessel, ICML 2024, "orbit same predictions"): the number
  of elements ``g`` with ``argmax f(g . x) == argmax f(x)``, identity
  included, so an integer in ``1 .. |G|``; ``|G|`` means invariant on ``x``.
* **Orbit symmetric KL**: the mean over the non-identity elements of the
  Jeffreys divergence ``KL(p(x) || p(g x)) + KL(p(g x) || p(x))`` between
  predicted class distributions; zero means invariant on ``x``.

Both take the stacked outputs over the orbit, ``(|G|, B, K)`` with element 0
the identity, which :func:`orbit_outputs` computes for any callable.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ella.groups import Action, Group, get_group, group_action

__all__ = ["orbit_outputs", "orbit_same_predictions", "orbit_symmetric_kl"]


@torch.no_grad()
def orbit_outputs(
    predict: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    group: str | Group,
    batch_size: int = 500,
    *,
    action: Action = "image",
) -> torch.Tensor:
    """Outputs of ``predict`` at every point of each input's orbit.

    Args:
        predict: maps images (B, C, H, W) to outputs (B, K) (logits,
            probabilities or log-probabilities; a module should be in eval mode),
            or any inputs (B, ...) to outputs (B, ...).
        x: images (N, C, H, W), or inputs (N, ...) the group acts on by ``action``.
        group: group (or name) acting on images; element 0 is the identity.
        batch_size: images per call of ``predict``.
        action: how the group acts on ``x`` (see :func:`ella.groups.group_action`):
            ``"image"`` (default) or ``"lifted"`` for lifted tensors (N, |G|, C, H, W).

    Returns:
        ``out[g, n] = predict(g . x[n])``, shape (|G|, N, K) (or (|G|, N, ...)).
    """
    group = get_group(group)
    act = group_action(group, action)
    rows = []
    for g in group.elements:
        chunks = [predict(act(g, x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
        rows.append(torch.cat(chunks))
    return torch.stack(rows)


def _check_orbit(outputs: torch.Tensor) -> None:
    if outputs.dim() != 3:
        raise ValueError(
            "expected orbit outputs of shape (|G|, N, K) with element 0 the identity, got "
            f"shape {tuple(outputs.shape)}; compute them with orbit_outputs(model, x, group)"
        )


def orbit_same_predictions(outputs: torch.Tensor) -> torch.Tensor:
    """OSP per input: how many orbit points keep the identity's predicted class.

    Args:
        outputs: (|G|, N, K) scores over the orbit (any monotone transform of
            the class probabilities: logits, probabilities, log-probabilities).

    Returns:
        (N,) long tensor with values in ``1 .. |G|``.
    """
    _check_orbit(outputs)
    labels = outputs.argmax(dim=-1)  # (|G|, N)
    return (labels == labels[0]).sum(dim=0)


def orbit_symmetric_kl(log_probs: torch.Tensor) -> torch.Tensor:
    r"""Mean symmetric KL divergence between the identity's and each other orbit point's prediction.

    Args:
        log_probs: (|G|, N, K) log class probabilities over the orbit (e.g.
            ``log_softmax`` of logits, or the log of an ensemble's mean
            probabilities).

    Returns:
        (N,) :math:`\frac{1}{|G| - 1} \sum_{g \neq e} \left[\mathrm{KL}(p_e \| p_g)
        + \mathrm{KL}(p_g \| p_e)\right]`; zeros for the trivial group.
    """
    _check_orbit(log_probs)
    if len(log_probs) == 1:
        return torch.zeros(log_probs.shape[1], dtype=log_probs.dtype, device=log_probs.device)
    reference, others = log_probs[:1], log_probs[1:]
    jeffreys = ((reference.exp() - others.exp()) * (reference - others)).sum(dim=-1)
    return jeffreys.mean(dim=0)
