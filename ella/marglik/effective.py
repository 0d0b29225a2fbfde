"""Effective number of parameters, per tensor and aggregated per layer and path.

For a parameter tensor whose GGN block has eigenvalues ``lambda_i`` and whose
prior precision is ``delta``, the effective number of parameters is
``sum_i lambda_i / (lambda_i + delta)`` (MacKay 1992, eq. 4.9; ELLA paper,
Sec. 6): each direction counts fully when the data determine it
(``lambda >> delta``) and not at all when the prior does.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ella.nn import PATH_KINDS, path_columns


def effective_parameters(eigenvalues: torch.Tensor, delta: float | torch.Tensor) -> float:
    """``sum lambda / (lambda + delta)`` for non-negative ``eigenvalues`` and ``delta > 0``."""
    lam = eigenvalues.clamp_min(0).double()
    return float((lam / (lam + float(delta))).sum())


def split_name(group: str) -> tuple[str, str | None]:
    """``"layer3.gconv"`` -> ``("layer3", "gconv")``; ``"head.0"`` -> ``("head.0", None)``."""
    layer, _, last = group.rpartition(".")
    if last in PATH_KINDS:
        return layer or "layer", last
    return group, None


def switched_off_paths(variances: Mapping[str, float], threshold: float) -> list[str]:
    """The paths of one relaxed layer, ``{path: prior variance}``, whose variance is below
    ``threshold`` times the layer's largest: their prior holds their weights near zero
    while the others' do not (``ella export`` drops them)."""
    largest = max(variances.values(), default=0.0)
    return [p for p, v in variances.items() if v < threshold * largest]


def aggregate(
    groups: list[str],
    effective: list[float],
    sizes: list[int],
    precisions: list[float],
) -> tuple[list[dict], list[dict]]:
    """Aggregate per-tensor figures into per-layer rows with path shares.

    Args:
        groups: layer-path group name of each tensor (``layer3.gconv``, ``head.0``).
        effective: effective number of parameters of each tensor.
        sizes: number of parameters of each tensor.
        precisions: prior precision of each tensor.

    Returns:
        ``(layers, others)``: one row per relaxed layer with ``layer``, the
        shares ``fc``/``conv``/``gconv`` in percent (absent paths 0; ``residual`` too
        where a layer has that path, :func:`~ella.nn.path_columns`),
        ``effective`` and ``parameters`` per path, and ``prior_variance`` per
        path (parameter-weighted mean of ``1/delta``); and one row per other
        module with its totals.
    """
    rows: dict[str, dict] = {}
    others: dict[str, dict] = {}
    columns = path_columns(split_name(group)[1] for group in groups)
    for group, eff, size, prec in zip(groups, effective, sizes, precisions, strict=True):
        layer, path = split_name(group)
        if path is None:
            row = others.setdefault(
                layer, {"module": layer, "effective": 0.0, "parameters": 0, "_var": 0.0}
            )
            row["effective"] += eff
            row["parameters"] += size
            row["_var"] += size / prec
            continue
        row = rows.setdefault(
            layer,
            {
                "layer": layer,
                "effective": dict.fromkeys(columns, 0.0),
                "parameters": dict.fromkeys(columns, 0),
                "_var": dict.fromkeys(columns, 0.0),
            },
        )
        row["effective"][path] += eff
        row["parameters"][path] += size
        row["_var"][path] += size / prec
    for row in rows.values():
        total = sum(row["effective"].values())
        for path in columns:
            row[path] = 100.0 * row["effective"][path] / total if total > 0 else 0.0
        row["total_effective"] = total
        row["prior_variance"] = {
            p: row["_var"][p] / row["parameters"][p] for p in columns if row["parameters"][p]
        }
        del row["_var"]
    for row in others.values():
        row["prior_variance"] = row.pop("_var") / row["parameters"]
    return list(rows.values()), list(others.values())


def relative_effective(
    names: list[str], groups: list[str], effective: list[float], sizes: list[int]
) -> dict[str, dict[str, float]]:
    """The ELLA paper's Table 3 measure, "relative effective number of parameters", per
    relaxed layer: how determined each path's weights are for their number, in percent.

    For every path, its weight tensors (biases left out) are split into stages, the
    tensors that differ only in a channel index (an FC path's ``pixel_maps.*`` and its
    ``channel_maps.*`` as the evidence sees them, :mod:`ella.marglik.per_channel`; a CONV
    or GCONV path has one stage); a stage's ratio is its
    effective parameters over its parameters, the path's value is the mean over its
    stages, and the paths' values are normalised to sum to 100 in each layer. This is how
    the authors' analysis notebook computes the table (``tychovdo/ella``, notebook
    "[analysis] relative importance of layers", ``print_table2``: ``norm_effect_dim`` =
    effective dimension / ``numel`` of ``lin_U``, ``lin_V``, ``conv`` and ``gconv``
    weights, FC the mean of ``lin_U`` and ``lin_V``), not in the paper's text. Where
    :func:`aggregate`'s share counts effective parameters, this one is per parameter: a
    small path whose few weights the data determine (GCONV has ``1/|G|`` of CONV's
    weights) scores high even when its share of the effective parameters is small.

    Args:
        names: parameter name of each tensor (``layer2.paths.fc.pixel_maps.3.weight``).
        groups: layer-path group name of each tensor (``layer2.fc``).
        effective: effective number of parameters of each tensor.
        sizes: number of parameters of each tensor.

    Returns:
        ``{layer: {"fc": %, "conv": %, "gconv": %}}`` for the relaxed layers (absent
        paths 0; all 0 where no path has an effective parameter).
    """
    stages: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name, group, eff, size in zip(names, groups, effective, sizes, strict=True):
        layer, path = split_name(group)
        if path is None or not name.endswith("weight"):
            continue
        stage = ".".join(part for part in name.split(".") if not part.isdigit())
        totals = stages.setdefault(layer, {}).setdefault(path, {}).setdefault(stage, [0.0, 0])
        totals[0] += eff
        totals[1] += size
    out: dict[str, dict[str, float]] = {}
    columns = path_columns(split_name(group)[1] for group in groups)
    for layer, paths in stages.items():
        value = {
            path: sum(eff / size for eff, size in by_stage.values()) / len(by_stage)
            for path, by_stage in paths.items()
        }
        total = sum(value.values())
        out[layer] = {p: 100.0 * value.get(p, 0.0) / total if total > 0 else 0.0 for p in columns}
    return out
