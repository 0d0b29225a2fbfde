"""How much of each relaxed layer's output each path carries.

The evidence's shares (:mod:`ella.learner.report`) say how many of a path's parameters the data
determine; they do not say how much of the layer's function the path computes. This
module measures the latter directly: each path's mean squared output on a batch of
images, as a percentage of the sum over the layer's paths (the paths' outputs are added
before the layer's normalisation, so this is their share of the summed signal's power,
cross terms left out). A path started at zero and kept near it by its prior scores
about 0; a path that carries the layer, about 100.
"""

from __future__ import annotations

import torch
from torch import nn

from ella.nn import RelaxedLayer, path_columns, per_module_calls

__all__ = ["format_path_outputs", "path_output_shares"]


@torch.no_grad()
def path_output_shares(model: nn.Module, x: torch.Tensor) -> list[dict]:
    """Each relaxed layer's share of output power per path, on the images ``x``.

    Runs ``model`` once on ``x`` with every path called on its own
    (:func:`~ella.nn.per_module_calls`) and forward hooks on the paths, removed
    afterwards. Put the model in eval mode yourself if it behaves differently in
    training.

    Args:
        model: a network holding :class:`~ella.nn.RelaxedLayer` modules (the mixer,
            or a user's model with relaxed layers).
        x: input images (B, C, H, W).

    Returns:
        One row per relaxed layer, in the order the forward pass reached them:
        ``{"layer": name, "fc": %, "conv": %, "gconv": %, "power": {path: mean
        square}}``, the percentages over the layer's own paths (summing to 100), or
        0 for every path of a layer whose paths all output zero.

    Raises:
        ValueError: ``model`` has no relaxed layer.
    """
    layers = {m: name for name, m in model.named_modules() if isinstance(m, RelaxedLayer)}
    if not layers:
        raise ValueError(
            "the model has no RelaxedLayer; path output shares are measured on ella's "
            "relaxed layers (ella.nn.RelaxedLayer, the mixer's layers)"
        )
    power: dict[str, dict[str, float]] = {}
    hooks = []
    for layer, name in layers.items():
        for path_name, path in layer.paths.items():

            def record(module, inputs, output, key=(name, path_name)):
                power.setdefault(key[0], {})[key[1]] = float(output.double().square().mean())

            hooks.append(path.register_forward_hook(record))
    try:
        with per_module_calls(model):
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    rows = []
    for name, by_path in power.items():  # the order the forward pass reached them
        total = sum(by_path.values())
        shares = {p: 100 * v / total if total > 0 else 0.0 for p, v in by_path.items()}
        rows.append({"layer": name, **shares, "power": by_path})
    return rows


def format_path_outputs(rows: list[dict]) -> str:
    """A table of :func:`path_output_shares`: one line per layer and the mean (a residual
    column where a layer has that path)."""
    columns = path_columns({p for row in rows for p in row})
    widths = [(p, max(7, len(p) + 4)) for p in columns]
    head = f"{'layer':<9}" + "".join(f"{p.upper() + ' %':>{w}}" for p, w in widths)
    lines = [head, "-" * len(head)]

    def line(label: str, values: dict) -> str:
        cells = [f"{values[p]:>{w}.1f}" if p in values else f"{'-':>{w}}" for p, w in widths]
        return f"{label:<9}" + "".join(cells)

    for row in rows:
        lines.append(line(row["layer"], row))
    mean = {p: sum(r[p] for r in rows) / len(rows) for p in columns if all(p in r for r in rows)}
    lines += ["-" * len(head), line("mean", mean)]
    return "\n".join(lines)
