"""ELLA paper, Table 1's runs: digit vs (digit, quadrant) classification, FC vs CONV vs the
learned FC+CONV mixer (group ``trivial``), at each profile. ``benchmarks.table1``
reproduces the table from them; ``experiments.path_select --table 1`` selects the learned
row's paths."""

from __future__ import annotations

import argparse

from ella.train import TrainConfig
from studies.runner import ADAM_ROUNDS, MC_ROUNDS, PAPER_SCHEDULE, SMOKE

MODELS = {
    "fc_map": (("fc",), False),
    "conv_map": (("conv",), False),
    "fc_laplace": (("fc",), True),
    "conv_laplace": (("conv",), True),
    "learned": (("fc", "conv"), True),
}
TASKS = {"digit": "quadrant_mnist", "quadrant": "quadrant40_mnist"}
#: the ``cpu`` profile (why these settings: the comments in :data:`PROFILES`)
CPU = dict(
    train_size=4000, test_size=2000, width=4, norm="none", head_init="default",
    lr_scaling="none", zero_init=("fc",), **ADAM_ROUNDS, **MC_ROUNDS,
)  # fmt: skip
PROFILES = {
    "smoke": SMOKE,
    # ella train's recipe (20 epochs, shifts of up to 2 px, max downsampling, evidence
    # rounds at epochs 6-18, MC GGN) without instance norm and the head's standardisation,
    # which stop FC networks on the trivial group: chosen on a validation split of both
    # tasks (docs/research/0006-fc-rank-and-table1.md); Adam's rate per fan-in was not part
    # of that validation (pinned off); the learned mixer's FC path starting at zero
    # validated better on both tasks (docs/research/0011-fc-path-starts-at-zero.md)
    "cpu": CPU,
    # the same with four times the epochs, chosen over 20 on the validation split of both
    # tasks (docs/research/0030-table1-results.md)
    "cpu_80": {**CPU, "epochs": 80},
    "paper": {**PAPER_SCHEDULE, "width": 8},
}  # fmt: skip


def task_config(task: str, model: str, profile: dict, args: argparse.Namespace) -> TrainConfig:
    """One run of the table: ``model`` (a key of :data:`MODELS`) on ``task`` (a key of
    :data:`TASKS`) at ``profile`` (``args``: data directory, seed and device)."""
    paths, learn = MODELS[model]
    return TrainConfig(
        dataset=TASKS[task], data_dir=args.data_dir, group="trivial", paths=paths,
        learn_priors=learn, seed=args.seed, device=args.device, progress=False, **profile,
    )  # fmt: skip


__all__ = ["CPU", "MODELS", "PROFILES", "TASKS", "task_config"]
