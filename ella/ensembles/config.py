"""Ensemble training configuration (a dataclass; ``ella ensemble`` options come from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ella.choices import (
    DEFAULT_GROUP,
    Downsampling,
    EnsembleMethod,
    FCMode,
    GConvMode,
    GroupAugmentation,
    GroupPooling,
    LayerGroup,
    Lengthscales,
    ModelName,
    Normalisation,
    PathName,
)
from ella.data.corruptions import SEVERITIES
from ella.data.datasets import parse_name
from ella.engine.schedule import OPTIMIZER_HELP, OptimizerConfig
from ella.errors import ConfigError
from ella.groups import get_group
from ella.models.build import check_mixer_options
from ella.options import MAX_SEED, option
from ella.runtime.system import check_device_name

#: particle methods: deep ensembles (no repulsion) and the three repulsive ensembles
METHODS = EnsembleMethod.values()
#: data augmentation by the group: none, the whole orbit of every image, or one sampled element
AUGMENTATIONS = GroupAugmentation.values()
#: FoRDE lengthscales: identity, the training data's PCA, or the alpha-mix of both
LENGTHSCALES = Lengthscales.values()


@dataclass
class EnsembleConfig(OptimizerConfig):
    """Everything that defines an ensemble training run.

    Members ``i = 0 .. members-1`` are initialised with seed ``init_seed + i``
    (``init_seed`` defaults to ``seed``); all members see the same minibatches,
    shuffled and augmented with generators seeded by ``seed`` (FoRDE's
    input-gradient kernel compares members on the same inputs). With
    ``method="de"`` the members do not interact, so member ``i`` is exactly
    the model a single run with ``members=1, init_seed=init_seed+i`` trains.

    Defaults give a deep ensemble (``method``) of ``members`` small plain CNNs
    (``model``) on the first ``train_size`` images of the embedded MNIST subset, small
    enough to train on one CPU thread. The papers' settings are in
    ``benchmarks/osp.py`` and ``benchmarks/fordes.py`` (``paper`` profiles).
    """

    COMMAND: ClassVar[str | None] = "ella ensemble"

    # data
    dataset: str = "mnist_subset"
    data_dir: str | None = option(None, defines_run=False, path=True)
    train_size: int | None = option(1000, minimum=1)
    test_size: int | None = option(None, minimum=1)
    augment: GroupAugmentation = GroupAugmentation.NONE
    augment_group: str = "C4"
    # model (use the Python API, EnsembleTrainer(model_fn=...), for any other nn.Module)
    model: ModelName = ModelName.CNN
    paths: tuple[PathName, ...] = (PathName.GCONV,)
    group: LayerGroup = DEFAULT_GROUP
    width: int = option(2, minimum=1)
    gconv_mode: GConvMode = GConvMode.FULL
    fc_mode: FCMode = FCMode.FACTORIZED
    fc_rank: int = option(1, minimum=1)
    zero_init: tuple[PathName, ...] = option((), nargs="*")
    norm: Normalisation = Normalisation.NONE
    downsample: Downsampling = Downsampling.POLYPHASE
    pool: GroupPooling = GroupPooling.MAX
    # ensemble
    members: int = option(5, minimum=1)
    method: EnsembleMethod = EnsembleMethod.DE
    repulsion_scale: float | None = option(None, minimum=0)
    lengthscales: Lengthscales = Lengthscales.IDENTITY
    alpha: float = option(0.5, minimum=0, maximum=1)
    vectorize: bool = True
    # optimisation (epochs, optimizer, lr, lr_min, momentum: OptimizerConfig)
    batch_size: int = option(128, minimum=1)
    weight_decay: float = option(0.0, minimum=0)
    # evaluation
    corruption_severities: tuple[int, ...] = option((1, 3, 5), nargs="*")
    osp_group: str | None = None
    # run (seed, progress: OptimizerConfig)
    init_seed: int | None = option(None, minimum=0, maximum=MAX_SEED)
    device: str = option("cpu", defines_run=False)

    @property
    def member_seeds(self) -> list[int]:
        """Initialisation seed of each member."""
        first = self.seed if self.init_seed is None else self.init_seed
        return [first + i for i in range(self.members)]

    def check(self) -> None:
        """Cross-option checks (choices and ranges are checked by :class:`Config`)."""
        check_mixer_options(self)
        if self.member_seeds[-1] > MAX_SEED:
            raise ConfigError(
                f"the last member's seed, {self.member_seeds[-1]}, is above {MAX_SEED}: give "
                f"--init-seed (or --seed) of at most {MAX_SEED - self.members + 1}"
            )

        super().check()
        parse_name(self.dataset)
        check_device_name(self.device)
        if not self.paths:
            raise ConfigError("paths must name at least one of fc, conv, gconv")
        if self.method != EnsembleMethod.DE and self.members < 2:
            raise ConfigError(f"method {self.method} repels members and needs members >= 2")
        for name in ("augment_group", "osp_group"):
            if getattr(self, name) is not None:
                try:
                    get_group(getattr(self, name))
                except ValueError as err:
                    raise ConfigError(f"{name}: {err}") from None
        bad = [s for s in self.corruption_severities if s not in SEVERITIES]
        if bad:
            raise ConfigError(f"corruption severities must be in {SEVERITIES}, got {bad}")


#: Help text of every option of ``ella ensemble`` (a test checks none is missing).
HELP: dict[str, str] = {
    "dataset": "data set: [variant_]base, e.g. mnist_subset, fashion_mnist, cifar10_subset, "
    "rotated_mnist",
    "data_dir": "directory with MNIST/raw etc.; unset: $ELLA_DATA, else ~/.cache/ella",
    "train_size": "number of training images to use (the first N)",
    "test_size": "number of test images to use (default: all)",
    "augment": "data augmentation by --augment-group: orbit (every image with all |G| "
    "transforms) or sampled (one random element per image and step)",
    "augment_group": "group of the augmentation: C4, D4 (exact) or C<N> (interpolated, e.g. C8)",
    "model": "member network: mixer (ella's relaxed layers; --paths, --group) or the plain "
    "baselines cnn or mlp (--width)",
    "paths": "paths of every mixer layer (gconv only: exactly invariant)",
    "group": "group the mixer lifts to (exact pixel symmetries only)",
    "width": "channel multiplier (cnn: 8w and 16w channels; mixer: w x (1, 2, 2, 4, 4, 8, 8, 16))",
    "gconv_mode": "mixer GCONV path: full (regular group convolution) or shared (one filter "
    "per copy)",
    "norm": "mixer: instance normalises every layer before its ReLU (per image and channel "
    "over group copies and positions; keeps the symmetry, trains CONV/GCONV paths faster)",
    "downsample": "mixer: how the stride-2 CONV and GCONV paths halve their output: "
    "polyphase (per image, exactly shift and group equivariant) or max (2x2 maximum; exactly "
    "group equivariant, locally shift invariant)",
    "fc_mode": "mixer FC path: factorized (ELLA's V U form) or dense (small sizes only)",
    "zero_init": "mixer: paths whose last stage starts at zero in mixed layers",
    "pool": "mixer: max or mean over the group copies before the head, or none (the head "
    "sees every copy)",
    "fc_rank": "mixer FC path: projections per pair of channels of the factorised form (1: ELLA's)",
    "members": "number of ensemble members M",
    "method": "de (deep ensemble), weight_rde, function_rde or forde (input-gradient repulsion)",
    "repulsion_scale": "weight of the log kernel density relative to the mean training loss; "
    "unset: 1/batch_size as in the FoRDE reference code (1/N is exact WGD on the posterior)",
    "lengthscales": "FoRDE kernel lengthscales: identity, pca (data eigenvalues) or mix "
    "((1-alpha) I + alpha Lambda)",
    "alpha": "mixing weight of --lengthscales mix",
    "vectorize": "run members with torch.func.vmap (--no-vectorize: a loop, same results)",
    **OPTIMIZER_HELP,
    "batch_size": "minibatch size (before orbit augmentation multiplies it by |G|)",
    "weight_decay": "Gaussian prior precision / N (an L2 term on every member)",
    "corruption_severities": "severities (1-5) of the corrupted test sets in the evaluation "
    "(none given: no corrupted evaluation)",
    "osp_group": "also report orbit-same-predictions and orbit KL on the test set for this "
    "group (e.g. C4, C8)",
    "seed": "seed of the data order and augmentation (and of member 0 unless --init-seed)",
    "init_seed": "member i is initialised with seed init_seed + i (default: --seed)",
    "device": "torch device, e.g. cpu or cuda (may change on --resume)",
}

__all__ = ["AUGMENTATIONS", "HELP", "LENGTHSCALES", "METHODS", "EnsembleConfig"]
