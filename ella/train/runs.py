"""Reading a finished run directory back: its configuration, trained model and data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ella.choices import PriorMean
from ella.data import ImageData
from ella.errors import CheckpointError, ConfigError, RunDirectoryError
from ella.io import load_state, load_torch
from ella.rundir import (
    CHECKPOINT,
    CONFIG,
    RESULTS,
    config_differences,
    invalid_config,
    read_json,
    saved_run_dict,
)
from ella.train.config import TrainConfig
from ella.train.loop import Trainer


@dataclass
class TrainedRun:
    """A run written by :func:`ella.train.train`, loaded for analysis.

    Attributes:
        config: the run's configuration.
        model: the trained classifier in eval mode, with the weights of
            ``state`` (with ``--invariance`` other than ``none``, the
            :class:`~ella.invariance.InvariantClassifier` around ``net``).
        net: the network itself (the mixer whose layers carry the priors).
        state: the state ``results.json`` reports: ``"final"``, or
            ``"best_evidence"`` for a learned run with ``--report-state best_evidence``.
        data: the run's data set (same name, sizes and seeds as in training).
    """

    config: TrainConfig
    model: nn.Module
    net: nn.Module
    state: str
    data: ImageData


def load_run(run_dir: str | Path, data_dir: str | Path | None = None) -> TrainedRun:
    """Load the configuration, the reported weights and the data of a run directory.

    Args:
        run_dir: a directory written by ``ella train`` (config.json, checkpoint.pt).
        data_dir: where the data files are, if not where the run found them.

    Raises:
        RunDirectoryError: naming the missing file, or an ensemble run.
        CheckpointError: a corrupt configuration or checkpoint, or files of the run that
            disagree on its configuration (:func:`check_files_agree`).
    """
    run_dir = Path(run_dir)
    for name in (CONFIG, CHECKPOINT):
        if not (run_dir / name).is_file():
            raise RunDirectoryError(f"no {name} in {run_dir}; is it a run directory of ella train?")
    path = run_dir / CONFIG
    saved = read_json(path, "run's configuration")
    if "members" in saved:
        raise RunDirectoryError(f"{run_dir} is an ensemble run; this needs a run of ella train")
    try:
        config = TrainConfig.from_dict(saved)
    except ConfigError as err:
        raise invalid_config(path, err) from None
    # analysis runs on the CPU from wherever the data now is
    config = dataclasses.replace(config, device="cpu", progress=False)
    if data_dir is not None:
        config = dataclasses.replace(config, data_dir=str(data_dir))
    checkpoint = load_torch(run_dir / CHECKPOINT)  # before any work: refuses a corrupt file
    check_files_agree(run_dir, config, checkpoint)
    trainer = Trainer(config, run_dir)  # builds data and model as training did (seeds torch)
    try:
        best = checkpoint["state"].get("best")  # None unless --report-state best_evidence
        load_state(trainer.model, best["model"] if best is not None else checkpoint["model"])
    except (KeyError, TypeError, AttributeError, RuntimeError) as err:
        raise CheckpointError(
            f"{run_dir / CHECKPOINT} does not hold this run's weights ({err})"
        ) from None
    return TrainedRun(
        config=config,
        model=trainer.model.eval(),
        net=trainer.net.eval(),
        state="best_evidence" if best is not None else "final",
        data=trainer.data,
    )


def check_files_agree(run_dir: Path, config: TrainConfig, checkpoint: object) -> None:
    """Refuse a run directory whose ``config.json`` (read as ``config``) defines another run
    than the configuration saved in its checkpoint, or in its ``results.json``: the
    network rebuilt from ``config.json`` would not be the one those files describe.

    Raises:
        CheckpointError: naming the files, each option that differs with both values, and
            the fix.
    """
    saved = checkpoint.get("config") if isinstance(checkpoint, dict) else None
    if not isinstance(saved, dict):
        raise CheckpointError(
            f"{run_dir / CHECKPOINT} is not a checkpoint of ella (it has no configuration); "
            "restore it from a copy"
        )
    others = {CHECKPOINT: saved}
    results_path = run_dir / RESULTS
    if results_path.is_file():
        results = read_json(results_path, "run's results")
        if isinstance(results.get("config"), dict):
            others[RESULTS] = results["config"]
    want = config.run_dict()
    for name, other in others.items():
        changed = config_differences(other, config)
        if not changed:
            continue
        theirs = saved_run_dict(other, TrainConfig)
        values = "; ".join(
            f"{key}: {want[key]!r} in {CONFIG}, {theirs[key]!r} in {name}" for key in changed
        )
        raise CheckpointError(
            f"{run_dir}: {CONFIG} and {name} describe different runs ({values}); the "
            f"network rebuilt from {CONFIG} would not be the one {name} describes. Restore "
            f"{CONFIG} from a copy ({name} holds the configuration its run used)"
        )


def refuse_unless_learned(
    run_dir: str | Path, learn_priors: bool, prior_mean: str, command: str
) -> None:
    """Refuse, for ``ella COMMAND`` (``select``, ``export``), a MAP run and a run whose
    prior is not centred at zero: both set dropped paths' weights to zero."""
    if not learn_priors:
        raise RunDirectoryError(
            f"{run_dir} is a MAP run (--no-learn-priors): ella {command} needs a run with "
            "learned priors"
        )
    if prior_mean != PriorMean.ZERO:
        raise ConfigError(
            "dropping a path sets its weights to zero, and this run's prior is centred at "
            f"its initial weights (--prior-mean init): {command} on a run trained with "
            "--prior-mean zero"
        )
