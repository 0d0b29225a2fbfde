"""Running a list of ensemble configurations with partial-result resume (shared by osp/fordes)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from ella.ensembles import EnsembleConfig, EnsembleTrainer
from ella.io import save_json

Measure = Callable[[dict, EnsembleTrainer], dict]


def run_ensembles(
    runs: list[tuple[dict, EnsembleConfig]],
    measure: Measure,
    desc: str,
    partial: Path | None = None,
) -> list[dict]:
    """Train every configuration and ``measure(labels, trainer)`` it; one row per run.

    With ``partial``, each finished row is saved there at once (atomically) and rows
    already saved for the same labels and configuration are reused, so an
    interrupted benchmark continues where it stopped.
    """
    done = {}
    if partial is not None and partial.is_file():
        for row in json.loads(partial.read_text()):
            done[json.dumps([row["labels"], row["config"]], sort_keys=True)] = row["row"]
    saved, rows = [], []
    bar = tqdm(runs, desc=desc)
    for labels, config in bar:
        bar.set_postfix(labels)
        key = json.dumps([labels, config.to_dict()], sort_keys=True)
        if key not in done:
            start = time.perf_counter()
            trainer = EnsembleTrainer(config)
            trainer.run(evaluate=False)
            done[key] = {**labels, **measure(labels, trainer)}
            done[key]["seconds"] = time.perf_counter() - start
        rows.append(done[key])
        saved.append({"labels": labels, "config": config.to_dict(), "row": done[key]})
        if partial is not None:
            save_json(saved, partial)
    return rows
