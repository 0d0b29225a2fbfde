"""The harness shared by the benchmark scripts and the experiments (``experiments/``):
running a list of ensemble configurations, resuming an interrupted one (``osp``, ``fordes``
and ``experiments.repulsion``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.runner import run_with_partial
from ella.ensembles import EnsembleConfig, EnsembleTrainer

Measure = Callable[[dict, EnsembleTrainer], dict]


def run_ensembles(
    runs: list[tuple[dict, EnsembleConfig]],
    measure: Measure,
    desc: str,
    partial: Path | None = None,
) -> list[dict]:
    """Train every configuration and ``measure(labels, trainer)`` it; one row per run,
    resuming from ``partial`` (see :func:`benchmarks.runner.run_with_partial`)."""

    def run_one(labels: dict, config: EnsembleConfig) -> dict:
        start = time.perf_counter()
        trainer = EnsembleTrainer(config)
        trainer.run(evaluate=False)
        return {**labels, **measure(labels, trainer), "seconds": time.perf_counter() - start}

    return run_with_partial(runs, run_one, desc, partial)


__all__ = ["Measure", "run_ensembles"]
