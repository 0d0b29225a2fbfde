"""``ella ensemble``: train an ensemble (deep, repulsive or FoRDE) and evaluate it."""

from __future__ import annotations

import argparse

from ella import distributed
from ella.commandline import (
    DefaultsHelpFormatter,
    add_config_options,
    add_run_options,
    reports_errors,
    run_claimed,
)
from ella.ensembles.config import HELP, EnsembleConfig

__all__ = ["add_ensemble_parser", "cmd_ensemble", "format_results"]


def format_results(results: dict) -> str:
    """A short table of a finished ensemble run's ``results.json``."""
    t = results["test"]
    epochs, members = results["epochs"], results["members"]
    lines = [
        f"{results['method']} ensemble of {members} member{'' if members == 1 else 's'} "
        f"({results['parameters_per_member']:,} parameters each), trained on "
        f"{results['train_size']} images for {epochs} epoch{'' if epochs == 1 else 's'} "
        f"in {results['train_time_s']:.0f} s",
        f"test ({results['test_size']} images): accuracy {100 * t['accuracy']:.2f}%  "
        f"NLL {t['nll']:.4f}  ECE {t['ece']:.4f}  (members alone: accuracy "
        f"{100 * t['member_accuracy']:.2f}%, NLL {t['member_nll']:.4f})",
    ]
    if "corrupted" in results:
        c = results["corrupted"]
        sev = results["config"]["corruption_severities"]
        lines.append(
            f"corrupted (8 corruptions x severities {sev}): accuracy {100 * c['accuracy']:.2f}%  "
            f"NLL {c['nll']:.4f}  ECE {c['ece']:.4f}"
        )
        for name, by_severity in c["by_corruption"].items():
            cells = "  ".join(f"s{s}: {100 * m['accuracy']:5.1f}%" for s, m in by_severity.items())
            lines.append(f"  {name:<15} {cells}")
    if "orbit" in results:
        o = results["orbit"]
        lines.append(
            f"orbit over {results['config']['osp_group']} (|G| = {o['group_order']}): "
            f"OSP {o['osp']:.2f} +- {o['osp_std']:.2f} (members alone {o['member_osp']:.2f}), "
            f"orbit symmetric KL {o['orbit_kl']:.4f} (members alone {o['member_orbit_kl']:.4f})"
        )
    return "\n".join(lines)


@reports_errors
def cmd_ensemble(args: argparse.Namespace) -> int:
    """Train and evaluate an ensemble as configured by the options."""
    from ella.ensembles.trainer import EnsembleTrainer

    world = distributed.start()  # several processes under torchrun, else this one
    claimed = run_claimed(args, EnsembleConfig, "ensemble", world, EnsembleTrainer)
    with claimed as (out, _, results):
        if not world.is_main:
            return 0
        print(format_results(results))
        print(f"run directory: {out} (results.json, metrics.jsonl, checkpoint.pt)")
    return 0


def add_ensemble_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``ella ensemble`` (options generated from :class:`EnsembleConfig`)."""
    parser = sub.add_parser(
        "ensemble",
        help="train and evaluate a deep / repulsive / FoRDE ensemble",
        description="Train M members together (vectorised with torch.func), optionally with "
        "data augmentation by a group and a repulsion between members (weight-space, "
        "function-space or input-gradient RDE, as Wasserstein gradient descent), then report "
        "test accuracy, NLL and ECE, the same on corrupted test images, and (--osp-group) "
        "orbit-same-predictions.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_run_options(parser, "ensemble")
    add_config_options(parser, EnsembleConfig, HELP)
    parser.set_defaults(func=cmd_ensemble)
    return parser
