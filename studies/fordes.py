"""FoRDE's comparison's runs (Trinh et al., ICLR 2024): five ensembles of the same plain CNN,
the same initialisations and minibatches, differing only in the particle update, on its
data sets at each profile, and what is measured of a trained one. ``benchmarks.fordes``
reproduces the comparison from them; ``experiments.repulsion`` measures the repulsive
methods' gradients and trains them at stronger repulsion."""

from __future__ import annotations

import argparse
import itertools

import torch

from ella.data.datasets import standardisation
from ella.ensembles import (
    EnsembleConfig,
    EnsembleTrainer,
    corrupted_metrics,
    evaluate_ensemble,
    member_log_probs,
)

METHODS = {  # method name -> (ensemble method, FoRDE lengthscales)
    "de": ("de", "identity"),
    "weight_rde": ("weight_rde", "identity"),
    "function_rde": ("function_rde", "identity"),
    "forde_identity": ("forde", "identity"),
    "forde_pca": ("forde", "pca"),
}
DATASETS = ("fashion_mnist", "cifar10_subset")
PROFILES = {
    "smoke": dict(train_size=64, test_size=32, epochs=1, members=2, width=1, batch_size=32,
                  optimizer="adam", lr=3e-3, weight_decay=5e-4, severities=(1, 5)),
    "cpu": dict(train_size=2000, test_size=1000, epochs=10, members=4, width=1, batch_size=64,
                optimizer="adam", lr=3e-3, weight_decay=5e-4, severities=(1, 3, 5)),
    "paper": dict(train_size=None, test_size=None, epochs=300, members=10, width=8,
                  batch_size=128, optimizer="sgd", lr=0.1, weight_decay=5e-4,
                  severities=(1, 2, 3, 4, 5)),
}  # fmt: skip


def build_runs(args: argparse.Namespace, profile: dict) -> list[tuple[dict, EnsembleConfig]]:
    """One ensemble per data set and method of ``args`` (``datasets``, ``methods``) at
    ``profile``, labelled by both (``args``: data directory, seed and device)."""
    runs = []
    for dataset, name in itertools.product(args.datasets, args.methods):
        method, lengthscales = METHODS[name]
        test_size = profile["test_size"]
        if dataset.startswith("cifar10_subset") and (test_size or 761) > 761:
            test_size = None  # the offline subset has 761 test images: use them all
        config = EnsembleConfig(
            dataset=dataset, data_dir=args.data_dir, train_size=profile["train_size"],
            test_size=test_size, model="cnn", width=profile["width"],
            members=profile["members"], method=method, lengthscales=lengthscales,
            epochs=profile["epochs"], batch_size=profile["batch_size"],
            optimizer=profile["optimizer"], lr=profile["lr"],
            weight_decay=profile["weight_decay"],
            corruption_severities=tuple(profile["severities"]), seed=args.seed, progress=False,
            device=args.device,
        )  # fmt: skip
        runs.append(({"dataset": dataset, "method": name}, config))
    return runs


def disagreement(log_probs: torch.Tensor) -> float:
    """Mean over member pairs of the fraction of inputs where their predicted classes differ."""
    labels = log_probs.argmax(-1)  # (M, N)
    pairs = list(itertools.combinations(range(len(labels)), 2))
    if not pairs:
        return 0.0
    return float(sum((labels[i] != labels[j]).double().mean() for i, j in pairs) / len(pairs))


def measure(labels: dict, trainer: EnsembleTrainer) -> dict:
    """A trained ensemble's row: accuracy, NLL and ECE on the clean and the corrupted test
    sets, its members' accuracy and disagreement, and its sizes."""
    x, y = trainer.data.test.tensors
    clean = evaluate_ensemble(trainer.ensemble, x, y)
    severities = tuple(trainer.config.corruption_severities)
    stats = standardisation(trainer.data.name)
    corrupted = corrupted_metrics(
        trainer.ensemble, x, y, stats, severities, seed=trainer.config.seed
    )
    return {
        "accuracy": clean["accuracy"],
        "nll": clean["nll"],
        "ece": clean["ece"],
        "corrupted_accuracy": corrupted["accuracy"],
        "corrupted_nll": corrupted["nll"],
        "corrupted_ece": corrupted["ece"],
        "member_accuracy": clean["member_accuracy"],
        "disagreement": disagreement(member_log_probs(trainer.ensemble, x)),
        "corrupted_by_type": {
            name: sum(m["accuracy"] for m in by_sev.values()) / len(by_sev)
            for name, by_sev in corrupted["by_corruption"].items()
        },
        "train_size": trainer.n_train,
        "test_size": len(y),
        "members": len(trainer.ensemble),
    }


__all__ = ["DATASETS", "METHODS", "PROFILES", "build_runs", "disagreement", "measure"]
