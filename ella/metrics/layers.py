"""Symmetry of a network layer by layer: G-EED of named submodules via forward hooks.

:func:`measure_symmetry` is the one call: it runs the model on every point of
each input's orbit under a group, records the activations of the chosen
submodules with forward hooks (removed afterwards), and returns a
:class:`SymmetryReport` with, per layer,

* the channelwise G-EED of ``f_l`` = the network up to and including the
  layer (Kvinge et al. 2022, eq. 5; ``f_l(g x)`` against ``g f_l(x)``), raw
  and normalised by the different-input baseline (see :mod:`ella.metrics.geed`);
* the same for the layer alone, applied to its recorded input ``z`` and to
  ``g z``: whether *this* layer keeps the symmetry it is given, which is what
  a layer's learned FC / CONV / GCONV shares are about;

and, for the outputs, the invariance G-EED (eq. 4) of the logits (Euclidean,
cosine), of the softmax outputs (KL both ways) and the orbit-same-predictions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ella.groups import Action, Group, get_group, group_action
from ella.io import atomic_write
from ella.metrics.geed import (
    EquivarianceDeviation,
    as_output,
    batch_indices,
    deviation_from_orbit,
    equivariance_reference,
    geed,
    invariance_reference,
)
from ella.metrics.orbit import orbit_outputs, orbit_same_predictions
from ella.models.mixer import Mixer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "LayerSymmetry",
    "OUTPUT_METRICS",
    "SymmetryReport",
    "activation_of",
    "default_layers",
    "feature_invariance",
    "infer_action",
    "measure_symmetry",
    "plot_symmetry",
    "record_activations",
    "submodule",
]

#: Output invariance metrics of a report: (name, output, distance).
OUTPUT_METRICS: tuple[tuple[str, str, str], ...] = (
    ("logits, euclidean", "logits", "euclidean"),
    ("logits, cosine", "logits", "cosine"),
    ("softmax, KL(p(gx) || p^)", "softmax", "kl"),
    ("softmax, KL(p^ || p(gx))", "softmax", "reverse_kl"),
)


def submodule(model: nn.Module, name: str) -> nn.Module:
    """The submodule called ``name`` (as in ``model.named_modules()``), with a clear error."""
    modules = dict(model.named_modules())
    if name not in modules or name == "":
        available = ", ".join(n for n in modules if n) or "(none)"
        raise ValueError(f"the model has no submodule {name!r}; available: {available}")
    return modules[name]


@contextmanager
def record_activations(
    model: nn.Module, names: Sequence[str]
) -> Iterator[dict[str, list[tuple[torch.Tensor | None, torch.Tensor]]]]:
    """Record ``(input, output)`` of named submodules on every forward pass, inside a ``with``.

    Yields a dict ``name -> [(input, output), ...]``, one pair per call of the
    submodule (``input`` is ``None`` unless the submodule got exactly one
    tensor). The hooks are removed when the block ends, also on an error.
    """
    modules = {name: submodule(model, name) for name in names}
    records: dict[str, list] = {name: [] for name in names}
    handles = []

    def hook_for(name: str) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            single = len(inputs) == 1 and isinstance(inputs[0], torch.Tensor)
            records[name].append((inputs[0].detach() if single else None, output.detach()))

        return hook

    try:
        for name, module in modules.items():
            handles.append(module.register_forward_hook(hook_for(name)))
        yield records
    finally:
        for handle in handles:
            handle.remove()


def activation_of(model: nn.Module, name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The map ``x -> activation of submodule name when the model runs on x``.

    Composes with :func:`ella.metrics.geed` and
    :func:`ella.metrics.channelwise_equivariance` (the feature extractor ``f_1``
    of ``f = f_2 o f_1`` in Kvinge et al.). Each call hooks and unhooks.
    """
    submodule(model, name)  # fail now for a wrong name

    def forward(x: torch.Tensor) -> torch.Tensor:
        with record_activations(model, [name]) as records:
            model(x)
        if len(records[name]) != 1:
            raise RuntimeError(
                f"submodule {name!r} ran {len(records[name])} times in one forward pass; "
                "activation_of needs exactly one call"
            )
        return records[name][0][1]

    return forward


def feature_invariance(
    model: nn.Module,
    x: torch.Tensor,
    group: str | Group,
    layer: str,
    *,
    distance: str = "cosine",
    batch_size: int = 256,
) -> EquivarianceDeviation:
    """Invariance G-EED of the latent features of submodule ``layer`` (Kvinge et al. eq. 4).

    Args:
        model: the network (in eval mode).
        x: images (N, C, H, W).
        group: the group acting on images.
        layer: submodule name, e.g. ``"pool"`` or ``"head.0"``.
        distance: a name in :data:`ella.metrics.DISTANCES`.
        batch_size: images per batch.
    """
    return geed(
        activation_of(model, layer),
        x,
        group,
        out_action="invariant",
        distance=distance,
        batch_size=batch_size,
    )


def infer_action(t: torch.Tensor, group: Group) -> Action:
    """How ``group`` acts on an activation, guessed from its shape.

    (B, |G|, C, H, W) -> ``"lifted"``; (B, C, H, W) -> ``"image"``; anything
    else -> ``"invariant"``. Pass the action explicitly where the guess is
    wrong (ella's group-pooled features are (B, C, H, W) but invariant).
    """
    if t.dim() == 5 and t.shape[1] == group.order:
        return "lifted"
    if t.dim() == 4:
        return "image"
    return "invariant"


def default_layers(model: nn.Module, group: Group) -> dict[str, Action | None]:
    """Layers a report measures when none are named.

    A :class:`~ella.models.Mixer` lifted to this group: every relaxed layer
    (lifted action) and the group pool (invariant). Lifted to another group
    (its lifted tensors carry no action of this one): only the group pool.
    Any other model: every ``nn.Conv2d``, the action guessed from its output.
    """
    if isinstance(model, Mixer):
        layers: dict[str, Action | None] = {}
        if model.group.name == group.name and model.group.order == group.order:
            layers.update({name: "lifted" for name in model.layers})
        layers["pool"] = "invariant"
        return layers
    return {name: None for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}


@dataclass
class LayerSymmetry:
    """G-EED of one layer: of the network up to it, and of the layer alone."""

    name: str
    action: str
    distance: str
    up_to_layer: EquivarianceDeviation
    layer_alone: EquivarianceDeviation | None

    def as_dict(self) -> dict:
        """One JSON row: the layer, its action, the distance and both measurements."""
        row = {"layer": self.name, "action": self.action, "distance": self.distance}
        row.update(self.up_to_layer.as_dict())
        alone = self.layer_alone.as_dict() if self.layer_alone is not None else {}
        row.update({f"layer_alone_{k}": v for k, v in alone.items()})
        return row


@dataclass
class SymmetryReport:
    """Per-layer and output symmetry of one model on one data set for one group."""

    group: str
    group_order: int
    n_inputs: int
    layers: list[LayerSymmetry]
    outputs: dict[str, EquivarianceDeviation]
    osp: torch.Tensor  # (N,) orbit-same-predictions
    meta: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-ready rows: ``{"group", "n_inputs", "layers": [...], "outputs": [...], "osp"}``."""
        return {
            "group": self.group,
            "group_order": self.group_order,
            "n_inputs": self.n_inputs,
            "layers": [layer.as_dict() for layer in self.layers],
            "outputs": [{"output": k, **v.as_dict()} for k, v in self.outputs.items()],
            "osp_mean": float(self.osp.float().mean()),
            "osp_invariant_fraction": float((self.osp == self.group_order).float().mean()),
            **self.meta,
        }

    def format_table(self) -> str:
        """The per-layer G-EED table followed by the output invariance rows."""
        head = (
            f"{'layer':<10}{'action':<11}{'distance':<16}{'G-EED':>9}{'normalised':>12}"
            f"   {'layer alone: G-EED':>19}{'normalised':>12}"
        )
        lines = [
            f"G-EED under {self.group} (|G| = {self.group_order}) on {self.n_inputs} inputs "
            "(Kvinge et al. 2022; 0 = exactly symmetric, normalised ~1 = no symmetry)"
        ]
        if self.layers:
            lines += [head, "-" * len(head)]
        for layer in self.layers:
            alone = layer.layer_alone
            alone_text = (
                f"{alone.value:>19.4g}{alone.normalized:>12.3f}" if alone is not None else ""
            )
            lines.append(
                f"{layer.name:<10}{layer.action:<11}{layer.distance:<16}"
                f"{layer.up_to_layer.value:>9.4g}{layer.up_to_layer.normalized:>12.3f}   "
                + alone_text
            )
        lines.append("-" * len(head))
        lines.append(f"{'output':<37}{'G-EED':>9}{'normalised':>12}")
        for name, deviation in self.outputs.items():
            lines.append(f"{name:<37}{deviation.value:>9.4g}{deviation.normalized:>12.3f}")
        lines.append(
            f"orbit-same-predictions: mean {float(self.osp.float().mean()):.2f} of "
            f"{self.group_order}; {100 * float((self.osp == self.group_order).float().mean()):.1f}%"
            " of inputs predicted the same class at every orbit point"
        )
        return "\n".join(lines)


def _resolve_layers(
    model: nn.Module,
    group: Group,
    layers: Sequence[str] | Mapping[str, Action | None] | None,
) -> dict[str, Action | None]:
    if layers is None:
        return default_layers(model, group)
    if isinstance(layers, str):
        layers = [layers]
    resolved = dict(layers) if isinstance(layers, Mapping) else {name: None for name in layers}
    for name in resolved:
        submodule(model, name)
    return resolved


def _layer_deviations(
    name: str,
    module: nn.Module,
    action: Action,
    moved: torch.Tensor,
    layer_input: torch.Tensor | None,
    group: Group,
) -> tuple[str, EquivarianceDeviation, EquivarianceDeviation | None]:
    """(distance, up-to-layer deviation, layer-alone deviation) for one batch."""
    distance = "channel_cosine" if moved.dim() >= 5 else "cosine"  # (|G|, N, C, H, W)

    def reference(outputs: torch.Tensor) -> torch.Tensor:
        if action == "invariant":
            return invariance_reference(outputs)
        return equivariance_reference(outputs[group.identity], group, action)

    try:
        up_to = deviation_from_orbit(moved, reference(moved), distance)
        alone = None
        if layer_input is not None:
            in_action = infer_action(layer_input, group)
            local = orbit_outputs(module, layer_input, group, len(layer_input), action=in_action)
            alone = deviation_from_orbit(local, reference(local), distance)
    except ValueError as err:
        raise ValueError(f"layer {name!r} ({action} action): {err}") from err
    return distance, up_to, alone


@torch.no_grad()
def measure_symmetry(
    model: nn.Module,
    x: torch.Tensor,
    group: str | Group | None = None,
    layers: Sequence[str] | Mapping[str, Action | None] | None = None,
    *,
    batch_size: int = 64,
) -> SymmetryReport:
    """Measure a classifier's symmetry layer by layer (G-EED, Kvinge et al. 2022).

    The model runs in eval mode on ``g x`` for every element ``g``; forward
    hooks record the named submodules' inputs and outputs. Afterwards the
    hooks are removed and the model's train/eval mode is restored; no
    parameter or buffer changes.

    Args:
        model: maps images (B, C, H, W) to logits (B, K).
        x: images (N, C, H, W), N >= 2 (the normalisation pairs inputs).
        group: the group acting on images; default ``model.group`` (a Mixer's).
        layers: submodule names, or ``{name: action}`` with action ``"image"``,
            ``"lifted"``, ``"invariant"`` or ``None`` (guess from the shape,
            :func:`infer_action`); default :func:`default_layers`.
        batch_size: inputs per batch; memory grows with ``|G| * batch_size``
            times the recorded activations.

    Returns:
        A :class:`SymmetryReport` (``.format_table()``, ``.as_dict()``,
        :func:`plot_symmetry`).
    """
    if group is None:
        if not isinstance(getattr(model, "group", None), Group):
            raise ValueError("pass the group to measure (the model has no .group)")
        group = model.group
    group = get_group(group)
    if x.dim() != 4 or len(x) < 2:
        raise ValueError(f"expected at least 2 images (N, C, H, W), got shape {tuple(x.shape)}")
    wanted = _resolve_layers(model, group, layers)
    act = group_action(group, "image")
    was_training = model.training
    model.eval()
    parts: dict[str, list] = {name: [] for name in wanted}
    actions: dict[str, Action] = {}
    distances: dict[str, str] = {}
    logits_parts, osp_parts = [], []
    try:
        for index in batch_indices(len(x), batch_size):
            batch = x[index]
            with record_activations(model, list(wanted)) as records:
                logits = torch.stack([model(act(g, batch)) for g in group.elements])
            logits_parts.append(logits)
            osp_parts.append(orbit_same_predictions(logits))
            for name, action in wanted.items():
                calls = records[name]
                if len(calls) != group.order:
                    raise RuntimeError(
                        f"submodule {name!r} ran {len(calls) // group.order} times per forward "
                        "pass; only modules called once per pass can be measured"
                    )
                moved = torch.stack([out for _, out in calls])
                if action is None:
                    action = infer_action(moved[group.identity], group)
                actions[name] = action
                distance, up_to, alone = _layer_deviations(
                    name, submodule(model, name), action, moved, calls[group.identity][0], group
                )
                distances[name] = distance
                parts[name].append((up_to, alone))
    finally:
        model.train(was_training)
    layer_rows = []
    for name in wanted:
        up_to = EquivarianceDeviation.cat([p[0] for p in parts[name]])
        alones = [p[1] for p in parts[name]]
        alone = None if any(a is None for a in alones) else EquivarianceDeviation.cat(alones)
        layer_rows.append(LayerSymmetry(name, actions[name], distances[name], up_to, alone))
    outputs = _output_invariance(logits_parts)
    return SymmetryReport(
        group=group.name,
        group_order=group.order,
        n_inputs=len(x),
        layers=layer_rows,
        outputs=outputs,
        osp=torch.cat(osp_parts),
    )


def _output_invariance(logits_parts: list[torch.Tensor]) -> dict[str, EquivarianceDeviation]:
    """Invariance G-EED rows of :data:`OUTPUT_METRICS` from per-batch logits orbits."""
    rows = {}
    for name, output, distance in OUTPUT_METRICS:
        parts = []
        for logits in logits_parts:
            measured = as_output(output)(logits)
            parts.append(deviation_from_orbit(measured, invariance_reference(measured), distance))
        rows[name] = EquivarianceDeviation.cat(parts)
    return rows


def plot_symmetry(
    reports: SymmetryReport | Mapping[str, SymmetryReport],
    path: str | Path | None = None,
    *,
    normalized: bool = True,
) -> Figure:
    """Per-layer G-EED of one or several models: up to each layer, and each layer alone.

    Args:
        reports: one report, or ``{label: report}`` to compare models.
        path: if given, write the figure there as PNG (atomically).
        normalized: plot the normalised G-EED (default) or the raw value.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    if isinstance(reports, SymmetryReport):
        reports = {"model": reports}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    key = "normalized" if normalized else "value"
    for label, report in reports.items():
        names = [layer.name for layer in report.layers]
        up_to = [getattr(layer.up_to_layer, key) for layer in report.layers]
        alone = [
            getattr(layer.layer_alone, key) if layer.layer_alone is not None else float("nan")
            for layer in report.layers
        ]
        axes[0].plot(names, up_to, marker="o", label=label)
        axes[1].plot(names, alone, marker="o", label=label)
    group = next(iter(reports.values())).group
    ylabel = "normalised G-EED" if normalized else "G-EED"
    axes[0].set_title(f"network up to the layer ({group})")
    axes[1].set_title(f"layer alone, on its input ({group})")
    axes[0].set_ylabel(ylabel + " (0 = symmetric)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=45)
        ax.axhline(0, color="grey", lw=0.5)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    if path is not None:
        atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
        plt.close(fig)
    return fig
