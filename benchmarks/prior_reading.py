"""What do the evidence-optimal priors read: the training, or the initialisation?

For finished ``ella train`` run directories, on their reported weights:

* how far each layer's paths moved from their initial weights (the run's seed rebuilds
  them): ``||theta||^2 / ||theta_0||^2`` and ``||theta - theta_0||^2 / ||theta_0||^2``;
* the mean FC/CONV/GCONV shares at the evidence's closed-form optimum
  (:meth:`ella.marglik.LaplaceEvidence.optimal_log_prior`) with ella's zero-mean prior,
  and with the prior centred at the initial weights (the scatter term
  ``delta ||theta - theta_0||^2``: the prior mean of ``--prior-mean init``), from the same
  Kronecker factors;

and, with ``--at-init DATASET``, the optimum's shares of the untrained network, with the
true and with shuffled labels.

Run by hand (issue 13); the figures are in ``benchmarks/results/recipe.md``::

    python -m benchmarks.prior_reading RUN_DIR [RUN_DIR ...] [--at-init mnist_subset]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector

from ella.choices import PathName, PriorMode
from ella.marglik import PriorStructure
from ella.report import effective_parameter_report
from ella.train import TrainConfig, Trainer
from ella.train.runs import load_run

PATHS = tuple(PathName)


def mean_shares(report: dict) -> str:
    """``fc/conv/gconv`` mean shares in percent over the relaxed layers."""
    rows = report["layers"]
    return "/".join(f"{sum(r[p] for r in rows) / len(rows):.0f}" for p in PATHS)


def layer_shares(report: dict) -> str:
    return ", ".join(
        f"{r['layer']} " + "/".join(f"{r[p]:.0f}" for p in PATHS) for r in report["layers"]
    )


def movement(trainer: Trainer, initial: list[torch.Tensor]) -> dict[tuple[str, str], tuple]:
    """Per (layer, path) prior group: ``||theta||^2 / ||theta_0||^2`` and
    ``||theta - theta_0||^2 / ||theta_0||^2``."""
    groups = PriorStructure(trainer.net, PriorMode.LAYER_PATH)
    params = [p.detach() for p in trainer.net.parameters() if p.requires_grad]
    per_tensor = torch.tensor(
        [
            [p.square().sum(), p0.square().sum(), (p - p0).square().sum()]
            for p, p0 in zip(params, initial, strict=True)
        ],
        dtype=torch.float64,
    )
    sums = torch.zeros(groups.n_groups, 3, dtype=torch.float64).index_add_(
        0, groups.index, per_tensor
    )
    result = {}
    for name, (norm, norm0, moved) in zip(groups.names, sums.tolist(), strict=True):
        layer, _, path = name.rpartition(".")
        if path in PATHS:  # a relaxed layer's path, not a head or a user layer
            result[layer, path] = (norm / norm0, moved / norm0)
    return result


def optimum_report(trainer: Trainer) -> dict:
    """The effective-parameter report at the evidence's closed-form optimum, for the prior
    mean of ``trainer.priors`` (the MC GGN's labels seeded, so that every call fits the
    same Kronecker factors at the same weights)."""
    torch.manual_seed(trainer.config.seed)
    evidence = trainer.fit_evidence()
    return effective_parameter_report(trainer.net, evidence, evidence.optimal_log_prior().exp())


def trainer_at_init(config: TrainConfig) -> tuple[Trainer, list[torch.Tensor]]:
    """A trainer built as the run was (same seed: the same initial weights), and those weights."""
    trainer = Trainer(dataclasses.replace(config, progress=False), tempfile.mkdtemp() + "/run")
    trainer.state.epoch = config.epochs  # the evidence subset of the last epoch
    return trainer, [p.detach().clone() for p in trainer.net.parameters() if p.requires_grad]


def read_run(run_dir: Path) -> list[str]:
    run = load_run(run_dir)
    trainer, initial = trainer_at_init(run.config)
    trainer.net.load_state_dict(run.model.state_dict())
    trainer.priors.prior_mean = None  # zero, whatever the run trained with
    zero_mean = optimum_report(trainer)
    trainer.priors.prior_mean = parameters_to_vector(initial)  # as --prior-mean init would
    centred = optimum_report(trainer)
    lines = [
        f"## {run_dir}",
        "",
        f"- optimum, zero-mean prior: mean shares {mean_shares(zero_mean)} "
        f"({layer_shares(zero_mean)})",
        f"- optimum, prior centred at the initial weights: mean shares {mean_shares(centred)} "
        f"({layer_shares(centred)})",
        "",
        "| layer | path | ‖θ‖²/‖θ₀‖² | ‖θ−θ₀‖²/‖θ₀‖² |",
        "|---|---|---:|---:|",
    ]
    for (layer, path), (norm, moved) in sorted(movement(trainer, initial).items()):
        lines.append(f"| {layer} | {path} | {norm:.3f} | {moved:.3f} |")
    return [*lines, ""]


def read_init(dataset: str, seed: int) -> list[str]:
    lines = [f"## {dataset}, untrained (seed {seed})", ""]
    for shuffled in (False, True):
        config = TrainConfig(dataset=dataset, validation_size=500, seed=seed)
        trainer, _ = trainer_at_init(config)
        if shuffled:
            x, y = trainer.data.train.tensors
            order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 1))
            trainer.data.train.tensors = (x, y[order])
        zero_mean = optimum_report(trainer)
        label = "shuffled labels" if shuffled else "true labels"
        lines.append(f"- {label}: mean shares {mean_shares(zero_mean)} ({layer_shares(zero_mean)})")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run directories of ella train")
    parser.add_argument("--at-init", action="append", default=[], metavar="DATASET")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.runs and not args.at_init:
        parser.error("give run directories, --at-init DATASET, or both")
    lines = []
    for dataset in args.at_init:
        lines += read_init(dataset, args.seed)
    for run_dir in args.runs:
        lines += read_run(run_dir)
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
