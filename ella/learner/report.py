"""The effective-parameter report: per layer and path, as a table, JSON rows and a figure."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from ella.engine.health import collapse_line
from ella.engine.schedule import no_round_words
from ella.io import atomic_write
from ella.marglik import (
    LaplaceEvidence,
    PriorStructure,
    aggregate,
    effective_parameters,
    relative_effective,
    switched_off_paths,
)
from ella.nn import PATH_KINDS, path_columns
from ella.rundir import EXPORT_THRESHOLD


def counted(n: int, noun: str) -> str:
    """``"1 epoch"``, ``"3 epochs"``: a count and its noun in the right number."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def effective_parameter_report(
    model: nn.Module, evidence: LaplaceEvidence, group_precision: torch.Tensor
) -> dict[str, list[dict]]:
    """Effective parameters of every tensor, aggregated per relaxed layer and path.

    Args:
        model: the network the evidence was fitted on.
        evidence: a fitted :class:`~ella.marglik.LaplaceEvidence`.
        group_precision: prior precision per group of ``evidence.prior`` (n_groups,).

    Returns:
        ``{"layers": [...], "others": [...]}`` as :func:`ella.marglik.aggregate`; each
        layer row also holds ``"relative"``, the paper's Table 3 measure per path
        (:func:`ella.marglik.relative_effective`).
    """
    per_tensor = evidence.prior.expand(group_precision.detach()).tolist()
    effective = [
        effective_parameters(eigs, delta)
        for eigs, delta in zip(evidence.block_eigenvalues(), per_tensor, strict=True)
    ]
    groups = PriorStructure(evidence.view.network, "layer_path").tensor_groups
    layers, others = aggregate(groups, effective, evidence.prior.numels, per_tensor)
    relative = relative_effective(
        evidence.prior.param_names, groups, effective, evidence.prior.numels
    )
    for row in layers:
        row["relative"] = relative[row["layer"]]
    return {"layers": layers, "others": others}


def share_summary(layers: list[dict]) -> dict[str, float]:
    """Mean share per path over the relaxed layers and its min-max range, as the ELLA
    paper's Table 3 aggregates them: ``{"fc": mean, "fc_min": ..., "fc_max": ...,
    "conv": ...}`` in percent; empty for a network without relaxed layers.

    Args:
        layers: per layer ``{"fc": %, "conv": %, "gconv": %}``: the ``"layers"`` rows of
            :func:`effective_parameter_report` (shares of the effective parameters), or
            their ``"relative"`` entries (the paper's own measure,
            :func:`ella.marglik.relative_effective`).
    """
    out: dict[str, float] = {}
    for p in path_columns(layers[0]) if layers else ():
        values = [row[p] for row in layers]
        out[p] = sum(values) / len(values)
        out[f"{p}_min"], out[f"{p}_max"] = min(values), max(values)
    return out


def mean_shares(
    model: nn.Module, evidence: LaplaceEvidence, group_precision: torch.Tensor
) -> dict[str, float]:
    """Mean FC / CONV / GCONV share in percent over the relaxed layers of ``model``
    (:func:`share_summary` without the ranges): ``{"fc": ..., "conv": ..., "gconv": ...}``,
    empty for a network without relaxed layers. The training loops record it at every
    evidence round, so a run shows whether its answer had settled, not only its priors."""
    return layer_mean_shares(effective_parameter_report(model, evidence, group_precision)["layers"])


def layer_mean_shares(layers: list[dict]) -> dict[str, float]:
    """:func:`share_summary` of ``layers`` without the ranges: the mean share per path."""
    summary = share_summary(layers)
    return {p: summary[p] for p in PATH_KINDS if p in summary}


def prior_convergence(rounds: list[dict[str, float]], tolerance: float = 0.05) -> dict:
    """Whether the prior precisions had settled by the last evidence round.

    Args:
        rounds: ``{group: precision}`` after each evidence round, in order.
        tolerance: the largest change of a log precision between the last two rounds
            that counts as converged (0.05: every precision within about 5%).

    Returns:
        ``{"rounds", "last_change", "converged", "tolerance", "group", "rising"}``;
        ``last_change`` is ``max_g |log delta_g(last) - log delta_g(previous)|``,
        ``group`` the group it belongs to and ``rising`` whether that precision grew (a
        path the evidence is switching off keeps rising); None with fewer than two
        rounds, which never counts as converged.
    """
    change = group = rising = None
    if len(rounds) >= 2:
        last, previous = rounds[-1], rounds[-2]
        steps = {g: math.log(last[g]) - math.log(previous[g]) for g in last}
        group = max(steps, key=lambda g: abs(steps[g]))
        change, rising = abs(steps[group]), steps[group] > 0
    return {
        "rounds": len(rounds),
        "last_change": change,
        "converged": change is not None and change < tolerance,
        "tolerance": tolerance,
        "group": group,
        "rising": rising,
    }


def shares_history(metrics: list[dict]) -> list[dict]:
    """The mean shares recorded at each evidence round of a run's epoch rows:
    ``[{"epoch": e, "fc": ..., "conv": ..., "gconv": ...}]`` (rows without ``"shares"``
    are skipped)."""
    return [{"epoch": row["epoch"], **row["shares"]} for row in metrics if "shares" in row]


def convergence_line(convergence: dict) -> str:
    """One line saying whether the priors had converged (see
    :func:`prior_convergence`)."""
    rounds, change = convergence["rounds"], convergence["last_change"]
    if change is None:
        return "priors: not converged (one evidence round; convergence needs two or more)"
    verdict = "converged" if convergence["converged"] else "not converged"
    where = ""
    if convergence.get("group"):  # absent from older results files
        where = f" in {convergence['group']}, {'rising' if convergence['rising'] else 'falling'}"
    return (
        f"priors: {verdict} after {rounds} evidence rounds (largest change of a log prior "
        f"precision in the last round {change:.3g}{where}, tolerance "
        f"{convergence['tolerance']:.3g})"
    )


def shares_history_line(history: list[dict], points: int = 5) -> str:
    """The mean shares at up to ``points`` evidence rounds, evenly spaced from the first to
    the last: ``shares by round (FC/CONV/GCONV %): epoch 4 33/33/33, ..., epoch 80 3/70/28``."""
    picks = sorted({round(i * (len(history) - 1) / (points - 1)) for i in range(points)})
    columns = path_columns(history[-1])
    steps = ", ".join(
        f"epoch {history[i]['epoch']} "
        + "/".join(f"{history[i][p]:.0f}" if p in history[i] else "-" for p in columns)
        for i in picks
    )
    return f"shares by evidence round ({paths_label(columns)} %): {steps}"


def paths_label(columns: tuple[str, ...]) -> str:
    """``FC/CONV/GCONV`` (and ``/RESIDUAL``) for the table's path columns."""
    return "/".join(p.upper() for p in columns)


def relative_rows(layers: list[dict]) -> list[dict] | None:
    """The paper's measure of every layer row (``row["relative"]``), or None where the
    rows lack it (older results files) or there are no relaxed layers."""
    if layers and all("relative" in row for row in layers):
        return [row["relative"] for row in layers]
    return None


def _ranges(summary: dict[str, float]) -> str:
    """``range fc 0-3, conv 20-30, gconv 70-78`` from a :func:`share_summary`."""
    return "range " + ", ".join(
        f"{p} {summary[p + '_min']:.0f}-{summary[p + '_max']:.0f}" for p in path_columns(summary)
    )


def format_table(results: dict) -> str:
    """The per-layer FC / CONV / GCONV table: shares of the effective parameters per layer
    and their mean, then the ELLA paper's Table 3 measure (per parameter of each path,
    :func:`ella.marglik.relative_effective`), the priors' convergence and the shares by
    evidence round."""
    rows = results["effective_parameters"]
    columns = path_columns(rows[0]) if rows else ()
    widths = [max(7, len(p) + 4) for p in columns]
    names = "/".join(columns)
    effective, variance = f"effective ({names})", f"prior variance ({names})"
    width_e, width_v = max(30, len(effective) + 2), max(32, len(variance) + 2)
    head = (
        f"{'layer':<9}"
        + "".join(f"{p.upper() + ' %':>{w}}" for p, w in zip(columns, widths, strict=True))
        + f"   {effective:<{width_e}}{variance:<{width_v}}"
    )
    lines = [head, "-" * len(head)] if rows else []  # no relaxed layers: no table

    def triple(values: dict, fmt: str) -> str:
        return "/".join(format(values[p], fmt) if p in values else "-" for p in columns)

    def shares(values: dict) -> str:
        return "".join(f"{values[p]:>{w}.1f}" for p, w in zip(columns, widths, strict=True))

    for r in rows:
        counts = triple(r["effective"], ".0f") + " of " + str(sum(r["parameters"].values()))
        lines.append(
            f"{r['layer']:<9}{shares(r)}   {counts:<{width_e}}"
            f"{triple(r['prior_variance'], '.3g'):<{width_v}}"
        )
    if rows:
        s = share_summary(rows)
        lines.append("-" * len(head))
        lines.append(f"{'mean':<9}{shares(s)}   " + _ranges(s))
    relative = relative_rows(rows)
    if relative:
        rel = share_summary(relative)
        lines.append(
            "relative effective parameters (the paper's Table 3 measure: per parameter of "
            f"each path), mean {paths_label(columns)} %: {triple(rel, '.0f')}, {_ranges(rel)}"
        )
    line = symmetry_breaking_line(rows)
    if line:
        lines.append(line)
    if results.get("eta"):
        extents = ", ".join(f"{name} {value:.3g}" for name, value in results["eta"].items())
        lines.append(f"invariance ({results.get('invariance')}), extents eta: {extents}")
    convergence = results.get("prior_convergence")
    if convergence and convergence["rounds"]:
        lines.append(convergence_line(convergence))
    history = results.get("shares_history") or []
    if len(history) >= 2:
        lines.append(shares_history_line(history))
    if results.get("training_collapse"):
        lines.append(collapse_line(results["training_collapse"]))
    acc = results.get("test_accuracy")
    if acc is not None:
        lines.append(
            f"test accuracy {100 * acc:.2f}% ({results.get('reported_state', 'final')} state), "
            f"log marginal likelihood {results.get('log_marglik_reported_state', float('nan')):.1f}"
        )
    line = null_model_line(results)
    if line:
        lines.append(line)
    line = no_round_line(results)
    if line:
        lines.append(line)
    return "\n".join(lines)


def no_round_line(results: dict) -> str | None:
    """For a run that learns by the evidence (its priors, or an invariance) whose epochs all
    ended before its first round (``log_marglik_epochs`` empty): a warning that the evidence
    learned nothing, with the options that give a round
    (:func:`~ella.engine.schedule.no_round_words`, as flags); None otherwise, and for results
    without the schedule in their configuration."""
    config = results.get("config") or {}
    schedule = [config.get(k) for k in ("epochs", "n_epochs_burnin", "marglik_frequency")]
    if results.get("log_marglik_epochs") != [] or not all(isinstance(v, int) for v in schedule):
        return None
    initial = {}
    if config.get("learn_priors"):
        initial["prior_precision"] = ("the prior precisions", config.get("prior_precision"))
    if config.get("invariance") == "learned":
        initial["eta_init"] = ("the invariance's extents eta", config.get("eta_init"))
    if not initial:
        return None
    return "warning: " + no_round_words(*schedule, initial, flags=True)


def symmetry_breaking_line(rows: list[dict]) -> str | None:
    """For layers with a GCONV and a residual path: how much each breaks the group's
    symmetry, as the residual's prior variance over GCONV's, and the layers whose residual
    is switched off (below ``EXPORT_THRESHOLD`` of the layer's largest variance: ``ella
    export`` makes them exactly equivariant); None without such layers."""
    ratios, off = [], []
    for row in rows:
        variance = row.get("prior_variance", {})
        if "gconv" in variance and "residual" in variance:
            ratios.append(f"{row['layer']} {variance['residual'] / variance['gconv']:.3g}")
            if "residual" in switched_off_paths(variance, EXPORT_THRESHOLD):
                off.append(row["layer"])
    if not ratios:
        return None
    line = "symmetry breaking (the residual's prior variance / GCONV's): " + ", ".join(ratios)
    if off:
        line += f"; residual switched off (ella export: exactly equivariant) in {', '.join(off)}"
    return line


def null_model_line(results: dict) -> str | None:
    """For a run with learned priors whose log evidence is below the class-frequency
    model's (:mod:`ella.marglik.null`; absent from older results files): a line saying so."""
    null = results.get("class_frequency_log_evidence")
    value = results.get("log_marglik_reported_state")
    learned = results.get("config", {}).get("learn_priors", False)
    if null is None or value is None or not learned or value >= null:
        return None
    return (
        f"the class frequencies alone (no network) have log evidence {null:.1f}, more than "
        f"the Laplace estimate for this network: at {results.get('train_size', '?')} training "
        "images its Occam factor outweighs its fit, so by this estimate the evidence would "
        "choose no network (the shares say how it prices the paths, not that it prefers the "
        "network to none)"
    )


def save_figure(results: dict, path: str | Path) -> Path:
    """Stacked bars of the FC / CONV / GCONV shares per layer, written as PNG: the shares
    of the effective parameters, and beside them the paper's per-parameter measure
    (:func:`ella.marglik.relative_effective`) where the rows hold it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["effective_parameters"]
    names = [r["layer"] for r in rows]
    panels = [("share of effective parameters [%]", rows)]
    relative = relative_rows(rows)
    if relative:
        panels.append(("relative, per parameter (paper's Table 3) [%]", relative))
    width = max(4, 0.7 * len(rows) + 2)
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 3.5), squeeze=False)
    for ax, (label, values_of) in zip(axes[0], panels, strict=True):
        bottom = [0.0] * len(rows)
        for p in path_columns(rows[0]) if rows else ():
            values = [v[p] for v in values_of]
            ax.bar(names, values, bottom=bottom, color=PATH_KINDS[p].color, label=p.upper())
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_ylabel(label)
        ax.set_ylim(0, 100)
        ax.tick_params(axis="x", labelrotation=45)
    axes[0][0].set_title("Effective parameters per layer and path")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return Path(path)


def save_eta_figure(results: dict, path: str | Path) -> Path:
    """The extent ``eta`` of each active generator over the epochs, written as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = results["eta_history"]
    if not history:
        raise ValueError("the run has no eta history (was it trained with --invariance?)")
    epochs = [row["epoch"] for row in history]
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for name in results["eta"]:
        values = [row[name] for row in history]
        if any(values):
            ax.plot(epochs, values, marker="o", label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("extent eta (rotation in radians)")
    ax.set_title(f"Input invariance ({results.get('invariance')})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return Path(path)
