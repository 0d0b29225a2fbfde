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

Run by hand; the figures are in ``docs/research/0003-priors-read-the-initialisation.md``::

    python -m experiments.prior_reading RUN_DIR [RUN_DIR ...] [--at-init mnist_subset]
        [--all-images]

Each reading also gives the log evidence at the optimum and its three terms (log
likelihood, and the Occam factor's ``-1/2 log det`` and ``-1/2 scatter``), which compare
runs of different models on the same data (model selection by the evidence).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch
from torch.nn.utils import parameters_to_vector

from ella.choices import PriorMode
from ella.learner.report import effective_parameter_report
from ella.marglik import PriorStructure
from ella.nn import PATH_NAMES
from ella.train import TrainConfig, Trainer
from ella.train.runs import load_run
from studies.runner import RANDOM_START

PATHS = PATH_NAMES  # the relaxed layers of the runs read have these paths


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
    same Kronecker factors at the same weights), with the log evidence there and its terms
    under ``"evidence"``."""
    torch.manual_seed(trainer.config.seed)
    evidence = trainer.fit_evidence()
    optimum = evidence.optimal_log_prior()
    report = effective_parameter_report(trainer.net, evidence, optimum.exp())
    with torch.no_grad():
        report["evidence"] = {k: float(v) for k, v in evidence.terms(optimum).items()}
    return report


def evidence_line(report: dict) -> str:
    """``log evidence E (log lik L, -log det / 2 D, -scatter / 2 S; P effective)``."""
    terms = report["evidence"]
    effective = sum(row["total_effective"] for row in report["layers"])
    return (
        f"log evidence {sum(terms.values()):.1f} (log lik {terms['log_likelihood']:.1f}, "
        f"-log det / 2 {terms['log_det']:.1f}, -scatter / 2 {terms['scatter']:.1f}; "
        f"{effective:.0f} effective parameters in the relaxed layers)"
    )


def trainer_at_init(
    config: TrainConfig, all_images: bool = False
) -> tuple[Trainer, list[torch.Tensor]]:
    """A trainer built as the run was (same seed: the same initial weights), and those weights;
    with ``all_images`` its evidence is fitted on every training image instead of the run's
    subset."""
    changes = dict(progress=False) | (dict(marglik_subset_size=None) if all_images else {})
    trainer = Trainer(dataclasses.replace(config, **changes), tempfile.mkdtemp() + "/run")
    trainer.state.epoch = config.epochs  # the evidence subset of the last epoch
    return trainer, [p.detach().clone() for p in trainer.net.parameters() if p.requires_grad]


def read_run(run_dir: Path, all_images: bool = False) -> list[str]:
    run = load_run(run_dir)
    trainer, initial = trainer_at_init(run.config, all_images)
    trainer.net.load_state_dict(run.model.state_dict())
    trainer.priors.state.prior_mean = None  # zero, whatever the run trained with
    zero_mean = optimum_report(trainer)
    trainer.priors.state.prior_mean = parameters_to_vector(initial)  # as --prior-mean init would
    centred = optimum_report(trainer)
    lines = [
        f"## {run_dir}",
        "",
        f"- optimum, zero-mean prior: mean shares {mean_shares(zero_mean)} "
        f"({layer_shares(zero_mean)})",
        f"  - {evidence_line(zero_mean)}",
        f"- optimum, prior centred at the initial weights: mean shares {mean_shares(centred)} "
        f"({layer_shares(centred)})",
        f"  - {evidence_line(centred)}",
        f"- evidence fitted on {'all training images' if all_images else 'the evidence subset'}",
        "",
        "| layer | path | ‖θ‖²/‖θ₀‖² | ‖θ−θ₀‖²/‖θ₀‖² |",
        "|---|---|---:|---:|",
    ]
    for (layer, path), (norm, moved) in sorted(movement(trainer, initial).items()):
        lines.append(f"| {layer} | {path} | {norm:.3f} | {moved:.3g} |")
    return [*lines, ""]


def read_init(dataset: str, seed: int) -> list[str]:
    lines = [f"## {dataset}, untrained (seed {seed})", ""]
    for shuffled in (False, True):
        # the initialisation its results file read: every path at its random start
        config = TrainConfig(dataset=dataset, validation_size=500, seed=seed, **RANDOM_START)
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
    parser.add_argument(
        "--all-images",
        action="store_true",
        help="fit each run's evidence on all its training images (default: the run's "
        "evidence subset of its last epoch)",
    )
    args = parser.parse_args(argv)
    if not args.runs and not args.at_init:
        parser.error("give run directories, --at-init DATASET, or both")
    lines = []
    for dataset in args.at_init:
        lines += read_init(dataset, args.seed)
    for run_dir in args.runs:
        lines += read_run(run_dir, args.all_images)
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
