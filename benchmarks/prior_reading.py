"""What do the evidence-optimal priors read: the training, or the initialisation?

For finished ``ella train`` run directories, on their reported weights:

* how far each layer's paths moved from their initial weights (the run's seed rebuilds
  them): ``||theta||^2 / ||theta_0||^2`` and ``||theta - theta_0||^2 / ||theta_0||^2``;
* the mean FC/CONV/GCONV shares at the evidence's closed-form optimum
  (:meth:`ella.marglik.LaplaceEvidence.optimal_log_prior`) with ella's zero-mean prior,
  and with the prior centred at the initial weights (the scatter term
  ``delta ||theta - theta_0||^2``, as laplace-torch's ``prior_mean`` would give);

and, with ``--at-init DATASET``, the optimum's shares of the untrained network, with the
true and with shuffled labels.

Run by hand (issue 13); the figures are in ``benchmarks/results/recipe.md``::

    python -m benchmarks.prior_reading RUN_DIR [RUN_DIR ...] [--at-init mnist_subset]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

from ella.report import effective_parameter_report
from ella.train import TrainConfig, Trainer
from ella.train.runs import load_run

PATHS = ("fc", "gconv", "conv")  # "gconv" before "conv": a GCONV tensor's name holds both


def mean_shares(report: dict) -> str:
    """``fc/conv/gconv`` mean shares in percent over the relaxed layers."""
    rows = report["layers"]
    return "/".join(f"{sum(r[p] for r in rows) / len(rows):.0f}" for p in ("fc", "conv", "gconv"))


def layer_shares(report: dict) -> str:
    return ", ".join(
        f"{r['layer']} {r['fc']:.0f}/{r['conv']:.0f}/{r['gconv']:.0f}" for r in report["layers"]
    )


def movement(trainer: Trainer, initial: list[torch.Tensor]) -> dict[tuple[str, str], tuple]:
    """Per (layer, path): ``||theta||^2 / ||theta_0||^2`` and
    ``||theta - theta_0||^2 / ||theta_0||^2``."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for (name, p), p0 in zip(trainer.net.named_parameters(), initial, strict=True):
        parts = name.split(".")
        path = next((x for x in PATHS if x in parts), None)
        if path is None or "paths" not in parts:
            continue
        s = sums[parts[0], path]
        s[0] += float(p.detach().pow(2).sum())
        s[1] += float(p0.pow(2).sum())
        s[2] += float((p.detach() - p0).pow(2).sum())
    return {key: (n / n0, d / n0) for key, (n, n0, d) in sums.items()}


def optimum_shares(trainer: Trainer, initial: list[torch.Tensor]) -> tuple[dict, dict]:
    """The effective-parameter reports at the evidence's optimum with the zero-mean prior and
    with the prior centred at ``initial`` (same Kronecker factors, same weights)."""
    evidence = trainer.fit_evidence()
    terms = evidence._terms  # the fast Kronecker terms: eigenvalues and squared norms
    params = [p.detach() for p in trainer.net.parameters() if p.requires_grad]
    if [p.numel() for p in params] != [int(n) for n in terms.numels.tolist()]:
        raise RuntimeError("the evidence's tensors are not the network's parameters in order")
    zero_mean = effective_parameter_report(
        trainer.net, evidence, evidence.optimal_log_prior().exp()
    )
    squared = torch.stack([(p - p0).pow(2).sum() for p, p0 in zip(params, initial, strict=True)])
    terms.squared_norms = squared.to(terms.squared_norms)
    centred = effective_parameter_report(trainer.net, evidence, evidence.optimal_log_prior().exp())
    return zero_mean, centred


def trainer_at_init(config: TrainConfig) -> tuple[Trainer, list[torch.Tensor]]:
    """A trainer built as the run was (same seed: the same initial weights), and those weights."""
    trainer = Trainer(dataclasses.replace(config, progress=False), tempfile.mkdtemp() + "/run")
    trainer.state.epoch = config.epochs  # the evidence subset of the last epoch
    return trainer, [p.detach().clone() for p in trainer.net.parameters()]


def read_run(run_dir: Path) -> list[str]:
    run = load_run(run_dir)
    trainer, initial = trainer_at_init(run.config)
    trainer.net.load_state_dict(run.model.state_dict())
    zero_mean, centred = optimum_shares(trainer, initial)
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
        trainer, initial = trainer_at_init(config)
        if shuffled:
            x, y = trainer.data.train.tensors
            order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 1))
            trainer.data.train.tensors = (x, y[order])
        zero_mean, _ = optimum_shares(trainer, initial)
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
