"""Ensemble training configuration (a dataclass; ``ella ensemble`` options come from it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ella.io import JsonConfig

#: particle methods: deep ensembles (no repulsion) and the three repulsive ensembles
METHODS = ("de", "weight_rde", "function_rde", "forde")
#: data augmentation by the group: none, the whole orbit of every image, or one sampled element
AUGMENTATIONS = ("none", "orbit", "sampled")
#: FoRDE lengthscales: identity, the training data's PCA, or the alpha-mix of both
LENGTHSCALES = ("identity", "pca", "mix")


@dataclass
class EnsembleConfig(JsonConfig):
    """Everything that defines an ensemble training run.

    Members ``i = 0 .. members-1`` are initialised with seed ``init_seed + i``
    (``init_seed`` defaults to ``seed``); all members see the same minibatches,
    shuffled and augmented with generators seeded by ``seed`` (FoRDE's
    input-gradient kernel compares members on the same inputs). With
    ``method="de"`` the members do not interact, so member ``i`` is exactly
    the model a single run with ``members=1, init_seed=init_seed+i`` trains.

    Defaults give a deep ensemble of five small plain CNNs that trains on
    1000 images of the embedded MNIST subset in about two minutes on one CPU
    thread. The papers' settings are in
    ``benchmarks/osp.py`` and ``benchmarks/fordes.py`` (``paper`` profiles).
    """

    # data
    dataset: str = "mnist_subset"
    data_dir: str | None = None
    train_size: int | None = 1000
    test_size: int | None = None
    augment: str = "none"
    augment_group: str = "C4"
    # model (use the Python API, EnsembleTrainer(model_fn=...), for any other nn.Module)
    model: str = "cnn"
    paths: tuple[str, ...] = ("gconv",)
    group: str = "C4"
    width: int = 2
    # ensemble
    members: int = 5
    method: str = "de"
    repulsion_scale: float | None = None
    lengthscales: str = "identity"
    alpha: float = 0.5
    vectorize: bool = True
    # optimisation
    epochs: int = 10
    batch_size: int = 128
    optimizer: str = "adam"
    lr: float = 1e-3
    lr_min: float = 1e-6
    momentum: float = 0.9
    weight_decay: float = 0.0
    # evaluation
    corruption_severities: tuple[int, ...] = field(default=(1, 3, 5), metadata={"nargs": "*"})
    osp_group: str | None = None
    # run
    seed: int = 0
    init_seed: int | None = None
    device: str = "cpu"
    progress: bool = True

    @property
    def member_seeds(self) -> list[int]:
        """Initialisation seed of each member."""
        first = self.seed if self.init_seed is None else self.init_seed
        return [first + i for i in range(self.members)]

    def validate(self) -> None:
        """Raise ValueError for settings that cannot work, saying which and why."""
        from ella.groups import get_group
        from ella.models import BASELINE_MODELS

        for name in ("epochs", "batch_size", "width", "members"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must not be negative, got {self.weight_decay}")
        choices = {
            "method": METHODS,
            "augment": AUGMENTATIONS,
            "lengthscales": LENGTHSCALES,
            "optimizer": ("adam", "sgd"),
            "model": ("mixer", *BASELINE_MODELS),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"unknown {name} {getattr(self, name)!r}; choose from {', '.join(allowed)}"
                )
        if self.method != "de" and self.members < 2:
            raise ValueError(f"method {self.method} repels members and needs members >= 2")
        if self.repulsion_scale is not None and self.repulsion_scale < 0:
            raise ValueError(f"repulsion_scale must not be negative, got {self.repulsion_scale}")
        if not 0 <= self.alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        get_group(self.augment_group)
        if self.osp_group is not None:
            get_group(self.osp_group)
        from ella.data.corruptions import SEVERITIES

        bad = [s for s in self.corruption_severities if s not in SEVERITIES]
        if bad:
            raise ValueError(f"corruption severities must be in {SEVERITIES}, got {bad}")


#: Help text of every option of ``ella ensemble`` (a test checks none is missing).
HELP: dict[str, str] = {
    "dataset": "data set: [variant_]base, e.g. mnist_subset, fashion_mnist, cifar10_subset, "
    "rotated_mnist",
    "data_dir": "directory with MNIST/raw etc.; unset: $ELLA_DATA, else ~/.cache/ella",
    "train_size": "number of training images to use (the first N)",
    "test_size": "number of test images to use (default: all)",
    "augment": "data augmentation by --augment-group: none, orbit (every image with all |G| "
    "transforms) or sampled (one random element per image and step)",
    "augment_group": "group of the augmentation: C4, D4 (exact) or C<N> (interpolated, e.g. C8)",
    "model": "member network: mixer (ella's relaxed layers; --paths, --group) or the plain "
    "baselines cnn or mlp (--width)",
    "paths": "paths of every mixer layer: any of fc conv gconv (gconv only: exactly invariant)",
    "group": "group the mixer lifts to: trivial, C4 or D4",
    "width": "channel multiplier (cnn: 8w and 16w channels; mixer: w x (1, 2, 2, 4, 4, 8, 8, 16))",
    "members": "number of ensemble members M",
    "method": "de (deep ensemble), weight_rde, function_rde or forde (input-gradient repulsion)",
    "repulsion_scale": "weight of the log kernel density relative to the mean training loss; "
    "unset: 1/batch_size as in the FoRDE reference code (1/N is exact WGD on the posterior)",
    "lengthscales": "FoRDE kernel lengthscales: identity, pca (data eigenvalues) or mix "
    "((1-alpha) I + alpha Lambda)",
    "alpha": "mixing weight of --lengthscales mix",
    "vectorize": "run members with torch.func.vmap (--no-vectorize: a loop, same results)",
    "epochs": "training epochs",
    "batch_size": "minibatch size (before orbit augmentation multiplies it by |G|)",
    "optimizer": "adam or sgd (with --momentum)",
    "lr": "initial learning rate (cosine schedule)",
    "lr_min": "final learning rate of the cosine schedule",
    "momentum": "SGD momentum (ignored by adam)",
    "weight_decay": "Gaussian prior precision / N (an L2 term on every member)",
    "corruption_severities": "severities (1-5) of the corrupted test sets in the evaluation "
    "(none given: no corrupted evaluation)",
    "osp_group": "also report orbit-same-predictions and orbit KL on the test set for this "
    "group (e.g. C4, C8)",
    "seed": "seed of the data order and augmentation (and of member 0 unless --init-seed)",
    "init_seed": "member i is initialised with seed init_seed + i (default: --seed)",
    "device": "torch device, e.g. cpu or cuda",
    "progress": "show progress bars",
}

__all__ = ["AUGMENTATIONS", "HELP", "LENGTHSCALES", "METHODS", "EnsembleConfig"]
