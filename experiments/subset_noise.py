"""How noisy is the subset evidence? Each round's prior optimum over fresh subsets.

Every evidence round of ``ella train`` fits the Kronecker factors on ``marglik_subset_size``
training images drawn afresh and scales likelihood and curvature to the run's ``N`` images
(the stochastic subset evidence of Immer et al., ICML 2023). For finished runs, on their
final weights, this script refits the evidence on ``--draws`` subsets of each size ``M``
(the subsets the rounds of epochs 1, 2, ... would draw; the MC GGN's labels seeded per
draw) and once on all ``N`` images, and reports per run and ``M``:

* the spread (standard deviation over the draws) of each prior group's closed-form optimal
  log precision (:meth:`ella.marglik.LaplaceEvidence.optimal_log_prior`), and the offset of
  the draws' mean from the optimum on all ``N`` images;
* the largest change of a log precision in a round that this noise alone gives under the
  damped update of ``ella train`` at fixed weights (:func:`damped_rounds`), and how often
  it is below the convergence tolerance of :func:`ella.learner.prior_convergence`;
* the log evidence at each draw's optimum (mean and spread) and on all ``N`` images;
* the spread of the draws' common shift (the mean over the groups of each draw's offset
  from the draws' mean), the part of the noise that moves every prior alike.

With ``--subset-control`` the rounds use that control variate of the subset's curvature
(:class:`ella.choices.SubsetControl`); ``training`` reads the traces of two training passes
(augmented, no step taken) at the final weights, where in a run they come from the last
two epochs' passes at those epochs' weights.

Run by hand; the figures are in ``docs/research/0024-stratified-ggn.md`` and
``docs/research/0025-subset-control-variate.md``::

    python -m experiments.subset_noise RUN_DIR [RUN_DIR ...] [--sizes 1000 4000]
        [--draws 16] [--ggn exact] [--subset-control none|training|forward]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

from ella.choices import GGN, SubsetControl
from ella.data.transforms import augment
from ella.engine.epochs import Stream, epoch_generator
from ella.marglik.control import output_hessian_trace
from ella.rundir import read_json
from ella.train import Trainer
from ella.train.runs import TrainedRun, load_run

#: the convergence tolerance of ``ella train``'s report (ella.learner.prior_convergence)
TOLERANCE = 0.05


def damped_rounds(
    optima: torch.Tensor, step: float, rounds: int = 4000, burn_in: int = 100
) -> torch.Tensor:
    """The changes of the log precisions over ``rounds`` simulated rounds of the damped
    update, each round's optimum drawn (with replacement, seeded) from the measured ones.

    A bootstrap of the rounds at fixed weights: it keeps the draws' joint distribution over
    the groups, heavy tails included (the MC GGN's rare sampled labels), where a Gaussian
    with the draws' spread would not. For independent optima of variance ``sigma^2`` the
    update ``x_{t+1} = x_t + s (o_t - x_t)`` leaves ``x`` with variance
    ``s sigma^2 / (2 - s)`` and the change with variance ``2 s^2 sigma^2 / (2 - s)``.

    Args:
        optima: (D, G) the draws' optimal log precisions.
        step: the fraction ``s`` of the way to each round's optimum.
        rounds: simulated rounds kept, after ``burn_in`` rounds from the draws' mean.

    Returns:
        (rounds, G) each kept round's change ``s (o_t - x_t)``.
    """
    generator = torch.Generator().manual_seed(0)
    picks = torch.randint(len(optima), (burn_in + rounds,), generator=generator)
    x = optima.double().mean(dim=0)
    changes = []
    for k, pick in enumerate(picks.tolist()):
        change = step * (optima[pick].double() - x)
        x = x + change
        if k >= burn_in:
            changes.append(change)
    return torch.stack(changes)


def trainer_for(
    run: TrainedRun,
    subset_size: int | None,
    ggn: GGN | None,
    control: SubsetControl | str = SubsetControl.NONE,
) -> Trainer:
    """A trainer built as the run's was, with the run's final weights, whose evidence
    rounds draw ``subset_size`` images (``None``: all of them), with ``ggn`` if given and
    the subset's control variate ``control``."""
    control = SubsetControl.parse(control, "subset control")
    changes: dict = dict(progress=False, marglik_subset_size=subset_size, subset_control=control)
    if ggn is not None:
        changes["ggn"] = ggn
    trainer = Trainer(dataclasses.replace(run.config, **changes), tempfile.mkdtemp() + "/run")
    trainer.net.load_state_dict(run.net.state_dict())
    if control is SubsetControl.TRAINING:
        trainer.output_trace = training_pass_trace(trainer)
    return trainer


@torch.no_grad()
def training_pass_trace(trainer: Trainer) -> torch.Tensor:
    """``1 - sum p^2`` of every training image as training sees it (training mode, the
    run's augmentation), the mean of two passes without a step as ``ella train`` keeps the
    mean of its last two epochs' (:attr:`ella.train.Trainer.output_trace`): (N,)."""
    cfg = trainer.config
    images = trainer.data.train.tensors[0]
    trainer.model.train()
    passes = []
    for epoch in (cfg.epochs - 1, cfg.epochs):
        generator = epoch_generator(cfg.seed, epoch, Stream.AUGMENTATION)
        traces = []
        for x in images.split(cfg.marglik_batch_size):
            x = augment(x, cfg.augment, generator, cfg.augment_shift)
            traces.append(output_hessian_trace(trainer.model(x.to(trainer.device))).cpu())
        passes.append(torch.cat(traces))
    return torch.stack(passes).mean(dim=0)


def optimum(trainer: Trainer, draw: int) -> tuple[torch.Tensor, float]:
    """The closed-form optimal log precisions (G,) and the log evidence there, on the subset
    that the round after epoch ``draw`` would fit (the MC labels seeded by ``draw``)."""
    trainer.state.epoch = draw
    torch.manual_seed(draw)
    evidence = trainer.fit_evidence()
    best = evidence.optimal_log_prior().detach()
    with torch.no_grad():
        return best, float(evidence.log_marginal_likelihood(best))


def measure(
    run_dir: Path,
    sizes: list[int],
    draws: int,
    ggn: GGN | None = None,
    progress: bool = True,
    control: SubsetControl = SubsetControl.NONE,
) -> dict:
    """The spreads of :func:`optimum` over ``draws`` subsets of each size, and the fit on
    all images, for one run directory (see the module's docstring)."""
    results = read_json(run_dir / "results.json", "run's results")
    run = load_run(run_dir)
    full_trainer = trainer_for(run, None, ggn)
    n_train, step = full_trainer.n_train, full_trainer.config.prior_step
    names = list(full_trainer.prior.as_dict(torch.zeros(full_trainer.prior.n_groups)))
    full, full_value = optimum(full_trainer, 0)
    row: dict = {
        "run": str(run_dir),
        "dataset": full_trainer.config.dataset,
        "n_train": n_train,
        "ggn": str(full_trainer.priors.ggn),  # auto resolved
        "prior_step": step,
        "subset_control": str(control),
        "run_last_change": (results.get("prior_convergence") or {}).get("last_change"),
        "full_log_evidence": full_value,
        "sizes": [],
    }
    for size in sizes:
        trainer = trainer_for(run, size, ggn, control) if size < n_train else full_trainer
        found = [
            optimum(trainer, draw)
            for draw in tqdm(range(1, draws + 1), desc=f"M={size}", disable=not progress)
        ]
        optima = torch.stack([best for best, _ in found])
        values = torch.tensor([value for _, value in found], dtype=torch.float64)
        sigma = optima.std(dim=0)
        offset = optima.mean(dim=0) - full
        common = (optima - optima.mean(dim=0)).mean(dim=1)  # (D,) each draw's shared shift
        largest = damped_rounds(optima, step).abs().amax(dim=1)  # per simulated round
        row["sizes"].append(
            {
                "subset_size": size,
                "draws": draws,
                "sd_median": float(sigma.median()),
                "sd_max": float(sigma.max()),
                "sd_max_group": names[int(sigma.argmax())],
                "common_sd": float(common.std()),
                "offset_median": float(offset.abs().median()),
                "offset_max": float(offset.abs().max()),
                "offset_max_group": names[int(offset.abs().argmax())],
                "largest_change_median": float(largest.median()),
                "converged_fraction": float((largest < TOLERANCE).double().mean()),
                "log_evidence_mean": float(values.mean()),
                "log_evidence_sd": float(values.std()),
                "sd": dict(zip(names, sigma.tolist(), strict=True)),
                "offset": dict(zip(names, offset.tolist(), strict=True)),
            }
        )
    return row


def markdown(rows: list[dict]) -> str:
    """One table row per run and subset size."""
    lines = [
        "| run | data set | N | GGN, control | M | sd of the optimum: median / max (group); "
        "common shift "
        "| mean - all-N optimum: median / max | largest change in a round: median, "
        "rounds under the tolerance (the run's last) | log evidence: draws | all N |",
        "|---|---|---:|---|---:|---|---|---|---|---:|",
    ]
    for row in rows:
        last = row["run_last_change"]
        for size in row["sizes"]:
            lines.append(
                f"| {row['run']} | {row['dataset']} | {row['n_train']} | {row['ggn']}, "
                f"{row.get('subset_control', 'none')} "
                f"| {size['subset_size']} ({size['draws']} draws) "
                f"| {size['sd_median']:.3f} / {size['sd_max']:.3f} ({size['sd_max_group']}); "
                f"{size['common_sd']:.3f} "
                f"| {size['offset_median']:.3f} / {size['offset_max']:.3f} "
                f"| {size['largest_change_median']:.3f}, "
                f"{100 * size['converged_fraction']:.0f}% "
                f"({'-' if last is None else f'{last:.3f}'}) "
                f"| {size['log_evidence_mean']:.0f} ± {size['log_evidence_sd']:.0f} "
                f"| {row['full_log_evidence']:.0f} |"
            )
    lines.append(
        f"\nLargest change: the largest |change| of a log precision in a round of the "
        f"run's damped update at fixed weights, each round's optimum drawn from the measured "
        f"ones (:func:`damped_rounds`); rounds under the tolerance: the share of simulated "
        f"rounds whose largest change is below {TOLERANCE}, the report's convergence test."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of ella train")
    parser.add_argument(
        "--sizes", nargs="+", type=int, default=[1000], help="subset sizes M (default: 1000)"
    )
    parser.add_argument(
        "--draws", type=int, default=16, help="subsets per size, at least 2 (default: 16)"
    )
    parser.add_argument(
        "--ggn", type=GGN.parse, default=None, help="exact or mc (default: each run's own)"
    )
    parser.add_argument(
        "--subset-control",
        type=SubsetControl.parse,
        default=SubsetControl.NONE,
        help="control variate of the subset's curvature: none (default), training or forward",
    )
    args = parser.parse_args(argv)
    if args.draws < 2:
        parser.error("--draws must be at least 2 (a spread needs two draws)")
    if min(args.sizes) < 1:
        parser.error("--sizes must be positive")
    for run_dir in args.runs:  # before any work: every run must be readable
        if not (run_dir / "results.json").is_file():
            parser.error(f"no results.json in {run_dir}; give finished runs of ella train")
    rows = [
        measure(run, args.sizes, args.draws, args.ggn, control=args.subset_control)
        for run in args.runs
    ]
    text = markdown(rows)
    print(text)
    return text


if __name__ == "__main__":
    main()
