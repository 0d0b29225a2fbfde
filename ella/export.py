"""What a learned run exports: its network without the paths whose prior switched them off.

A relaxed layer's path is switched off when its learned prior variance is below
``threshold`` times the largest variance among the layer's paths: its weights are then
held near zero by a prior the others' do not feel. Within a layer only these ratios carry
meaning (with instance normalisation the layer's output does not depend on a common scale
of its paths). On the residual parameterisation (``--paths gconv residual``) a layer whose
residual is switched off is exported exactly equivariant.

A relaxed layer adds its ``P`` paths and divides by ``sqrt(P)``; with ``P'`` paths kept,
each kept path's last stage is multiplied by ``sqrt(P' / P)``, so that the exported network
computes exactly what the run's network computes with the dropped paths' weights at zero.

    ella export RUN [--threshold 0.01] [--out FILE]
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ella.choices import InvarianceMethod, PriorMean
from ella.errors import CheckpointError, ConfigError, RunDirectoryError, error_summary
from ella.io import load_state, load_torch, save_torch
from ella.marglik.effective import split_name, switched_off_paths
from ella.nn import RelaxedLayer
from ella.rundir import CONFIG, EXPORT_THRESHOLD, EXPORTED, RESULTS, RESULTS_FIX, read_json
from ella.schemas import EXPORTED_FILE, RESULTS_FILE, check
from ella.train.loop import evaluate
from ella.train.runs import TrainedRun, load_run, refuse_unless_learned

__all__ = [
    "DEFAULT_THRESHOLD",
    "EXPORTED",
    "Export",
    "export_run",
    "load_exported",
    "save_export",
    "switched_off",
    "without_paths",
]

#: a path is off below this fraction of the largest prior variance of its layer's paths
DEFAULT_THRESHOLD = EXPORT_THRESHOLD


def switched_off(variances: Mapping[str, float], threshold: float) -> dict[str, list[str]]:
    """The paths of each relaxed layer whose prior variance is below ``threshold`` times the
    layer's largest: ``{"layer3": ["residual"], ...}`` (layers with none left out).

    Args:
        variances: prior variance per group, ``{"layer3.gconv": 0.8, ...}`` (the
            ``prior_variance`` of a run's ``results.json``); groups of other modules are
            ignored.
        threshold: in (0, 1).
    """
    if not 0 < threshold < 1:
        raise ConfigError(f"--threshold must be in (0, 1), got {threshold}")
    layers: dict[str, dict[str, float]] = {}
    for group, variance in variances.items():
        layer, path = split_name(group)
        if path is not None:
            layers.setdefault(layer, {})[path] = variance
    off = {layer: switched_off_paths(paths, threshold) for layer, paths in layers.items()}
    return {layer: paths for layer, paths in off.items() if paths}


def without_paths(net: nn.Module, drop: Mapping[str, list[str]]) -> nn.Module:
    """A copy of ``net`` whose relaxed layers lack the paths ``drop`` names, computing what
    ``net`` computes with those paths' weights at zero (module docstring).

    Raises:
        ConfigError: a layer name that is no relaxed layer of ``net``, or a path it lacks.
    """
    net = copy.deepcopy(net)
    layers = {name: m for name, m in net.named_modules() if isinstance(m, RelaxedLayer)}
    for name, paths in drop.items():
        layer = layers.get(name)
        if layer is None:
            raise ConfigError(f"{name} is not a relaxed layer of this network ({list(layers)})")
        missing = [p for p in paths if p not in layer.paths]
        if missing:
            raise ConfigError(f"{name} has paths {layer.path_names}, not {missing}")
        kept = [p for p in layer.path_names if p not in paths]
        factor = math.sqrt(len(kept) / len(layer.path_names))
        with torch.no_grad():
            for p in kept:
                for param in layer.paths[p].output_parameters():
                    param.mul_(factor)
        for p in paths:
            del layer.paths[p]
    return net


@dataclass
class Export:
    """An exported network and how it compares with the run's.

    Attributes:
        net: the run's network without the switched-off paths (eval mode).
        dropped: the paths dropped per relaxed layer.
        threshold: the fraction of a layer's largest prior variance below which a path was off.
        rows: ``{"full": {...}, "exported": {...}}``, each with ``test_accuracy``,
            ``test_nll``, ``parameters`` and ``forward_ms`` (median of five forward passes
            of a test batch, one thread of this machine).
    """

    net: nn.Module
    dropped: dict[str, list[str]]
    threshold: float
    rows: dict[str, dict[str, float]]

    def format(self) -> str:
        """The printed comparison: the paths switched off, then the run's network against
        the exported one."""
        dropped = "; ".join(f"{layer}: {', '.join(p)}" for layer, p in self.dropped.items())
        lines = [
            f"paths switched off (prior variance below {self.threshold:g} of the layer's "
            f"largest): {dropped or 'none'}",
            f"{'network':<10}{'test acc %':>11}{'test NLL':>10}{'parameters':>12}"
            f"{'forward ms':>12}",
        ]
        for name, r in self.rows.items():
            lines.append(
                f"{name:<10}{100 * r['test_accuracy']:>11.2f}{r['test_nll']:>10.4f}"
                f"{r['parameters']:>12d}{r['forward_ms']:>12.2f}"
            )
        return "\n".join(lines)


def _measure(net: nn.Module, run: TrainedRun) -> dict[str, float]:
    metrics = evaluate(net, run.data.test)
    x = run.data.test.tensors[0][:128]
    times = []
    with torch.no_grad():
        net(x)
        for _ in range(5):
            start = time.perf_counter()
            net(x)
            times.append(1000 * (time.perf_counter() - start))
    return {
        "test_accuracy": metrics["accuracy"],
        "test_nll": metrics["nll"],
        "parameters": sum(p.numel() for p in net.parameters()),
        "forward_ms": statistics.median(times),
    }


def _learned_run(run_dir: Path, data_dir: str | Path | None) -> tuple[TrainedRun, dict]:
    results_path = run_dir / RESULTS
    if not results_path.is_file():
        raise RunDirectoryError(f"{run_dir} has no results.json: export a finished run")
    results = read_json(results_path, "run's results", RESULTS_FILE, RESULTS_FIX)
    config = read_json(run_dir / CONFIG, "run's configuration")
    learn, mean = config.get("learn_priors", True), config.get("prior_mean", PriorMean.ZERO)
    refuse_unless_learned(run_dir, learn, mean, "export")
    if config.get("invariance", InvarianceMethod.NONE) != InvarianceMethod.NONE:
        raise ConfigError(f"{run_dir} learns input invariance; export a run with --invariance none")
    return load_run(run_dir, data_dir), results


def export_run(
    run_dir: str | Path,
    threshold: float = DEFAULT_THRESHOLD,
    data_dir: str | Path | None = None,
) -> Export:
    """Export a finished ``ella train`` run with learned priors: its network without the
    paths :func:`switched_off` finds in its ``results.json``, with the test accuracy, NLL,
    parameter count and forward time of both networks."""
    run_dir = Path(run_dir)
    run, results = _learned_run(run_dir, data_dir)
    dropped = switched_off(results["prior_variance"], threshold)
    net = without_paths(run.net, dropped).eval()
    rows = {"full": _measure(run.net, run), "exported": _measure(net, run)}
    return Export(net=net, dropped=dropped, threshold=threshold, rows=rows)


def save_export(export: Export, path: str | Path) -> Path:
    """Write the exported weights and the dropped paths (loadable with ``weights_only``);
    an existing file is refused."""
    path = Path(path)
    if path.exists():
        raise RunDirectoryError(f"{path} exists; choose another --out (nothing was written)")
    save_torch(
        {
            "dropped": export.dropped,
            "threshold": export.threshold,
            "model": export.net.state_dict(),
        },  # fmt: skip
        path,
    )
    return path


def load_exported(
    run_dir: str | Path, path: str | Path | None = None, data_dir: str | Path | None = None
) -> nn.Module:
    """The exported network of ``run_dir`` (written by ``ella export``) in eval mode."""
    run_dir = Path(run_dir)
    path = Path(path) if path is not None else run_dir / EXPORTED
    fix = f"export the run again (ella export {run_dir} --out FILE)"
    saved = check(load_torch(path, fix=fix), EXPORTED_FILE, path, fix)
    run = load_run(run_dir, data_dir)
    try:
        net = without_paths(run.net, saved["dropped"])
        load_state(net, saved["model"])
    except (ConfigError, KeyError, TypeError, RuntimeError) as err:
        raise CheckpointError(
            f"{path} is not an export of {run_dir}'s network ({error_summary(err)}); {fix}"
        ) from None
    return net.eval()
