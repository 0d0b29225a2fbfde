"""Training configuration (one dataclass; the command line is generated from it)."""

from __future__ import annotations

from dataclasses import dataclass

from ella.invariance.affine import GENERATORS
from ella.io import JsonConfig
from ella.nn import PATH_NAMES

#: Network architectures ``build_model`` knows.
MODELS = ("mixer", "mlp", "cnn")
#: Input-invariance methods: none, fixed full augmentation, learned by marginal
#: likelihood (LILA), learned by Augerino's regularised loss.
INVARIANCE_METHODS = ("none", "full", "learned", "augerino")


@dataclass
class TrainConfig(JsonConfig):
    """Everything that defines a training run.

    MAP training and learned-prior (ELLA) training are the same loop; with
    ``learn_priors=False`` the evidence is never fitted and the prior
    precisions stay at ``prior_precision``.

    The hyperparameter side follows the ELLA reference (20 Adam hypersteps
    with lr 0.1 on the log precisions, cosine learning rate to 1e-6). Three
    defaults differ, so that the default run on the embedded MNIST subset
    learns something in a few minutes on 2 CPU cores (all measured on 1000
    images, 10 epochs, batch 128, MAP only, test accuracy after 10 epochs):

    * the weights use Adam with lr 1e-3: SGD lr 0.1 momentum 0.9 reached 28%
      (lr 0.3: 13%);
    * the initial prior precision is 0.01, not 1: with Adam, the prior's pull
      ``delta theta / N`` on weights that the data barely move is normalised
      to a step of size ``lr``, which erases the small-initialised FC weights
      before they learn: 34% at ``delta = 1``, 69% at ``delta = 0.01``, 70%
      without a prior. The learned precisions move away from it after burn-in;
    * the schedule is short (``epochs``, ``n_epochs_burnin``,
      ``marglik_frequency``).

    The reference's settings are ``--optimizer sgd --lr 0.1 --prior-precision 1
    --n-epochs-burnin 10 --marglik-frequency 5 --batch-size 500``.

    Learned input invariance (``invariance="learned"``) wraps the network in an
    :class:`~ella.invariance.InvariantClassifier` and learns the extents
    ``eta`` of the affine generators by the Laplace evidence in the same
    evidence steps, jointly with the priors when ``learn_priors`` is on.
    """

    # data
    dataset: str = "mnist_subset"
    data_dir: str | None = None
    train_size: int | None = 1000
    test_size: int | None = None
    augment: str = "none"
    # model
    paths: tuple[str, ...] = PATH_NAMES
    group: str = "C4"
    width: int = 2
    gconv_mode: str = "full"
    fc_mode: str = "factorized"
    model: str = "mixer"
    # learned input invariance
    invariance: str = "none"
    generators: tuple[str, ...] = GENERATORS
    invariance_samples: int = 8
    invariance_eval_samples: int = 16
    eta_init: float = 0.1
    lr_eta: float = 0.05
    augerino_reg: float = 0.01
    invariance_marglik_size: int = 1000
    # MAP optimisation
    epochs: int = 10
    batch_size: int = 128
    optimizer: str = "adam"
    lr: float = 1e-3
    lr_min: float = 1e-6
    momentum: float = 0.9
    # marginal likelihood
    learn_priors: bool = True
    prior_structure: str = "layer_path"
    prior_precision: float = 0.01
    n_epochs_burnin: int = 4
    marglik_frequency: int = 3
    n_hypersteps: int = 20
    lr_hyp: float = 0.1
    marglik_batch_size: int = 500
    backend: str = "asdl"
    hessian: str = "kron"
    ggn: str = "exact"
    # run
    seed: int = 0
    device: str = "cpu"
    progress: bool = True

    def validate(self) -> None:
        """Raise ValueError for settings that cannot work, saying which and why."""
        positive = (
            "epochs",
            "batch_size",
            "width",
            "marglik_batch_size",
            "marglik_frequency",
            "invariance_samples",
            "invariance_eval_samples",
            "invariance_marglik_size",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr", "prior_precision", "lr_hyp"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        from ella.data.transforms import AUGMENTATIONS

        if self.augment not in AUGMENTATIONS:
            raise ValueError(
                f"unknown augmentation {self.augment!r}; choose from {', '.join(AUGMENTATIONS)}"
            )
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be sgd or adam, got {self.optimizer!r}")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose from {', '.join(MODELS)}")
        if self.invariance not in INVARIANCE_METHODS:
            raise ValueError(
                f"unknown invariance method {self.invariance!r}; choose from "
                f"{', '.join(INVARIANCE_METHODS)}"
            )
        if self.invariance != "none" and self.augment != "none":
            raise ValueError("use either --augment or --invariance, not both")
        from ella.invariance.affine import generator_indices

        generator_indices(list(self.generators))
        if self.invariance == "learned" and self.hessian != "kron":
            raise ValueError("learned invariance needs --hessian kron")
        if self.n_hypersteps < 0 or self.n_epochs_burnin < 0:
            raise ValueError("n_hypersteps and n_epochs_burnin must not be negative")


#: Help text of every option of ``ella train`` (a test checks none is missing).
HELP: dict[str, str] = {
    "dataset": "data set: [variant_]base, base one of mnist_subset (embedded), mnist, "
    "fashion_mnist, cifar10, cifar10_subset; variant one of rotated, translated, scaled, c4, "
    "d4, quadrant, quadrant40 (e.g. rotated_mnist)",
    "data_dir": "directory with MNIST/raw etc.; unset: $ELLA_DATA, else ~/.cache/ella",
    "train_size": "number of training images to use (the first N)",
    "test_size": "number of test images to use (default: all)",
    "augment": "training-time augmentation per image: none, c4, d4, rotate, translate, scale",
    "paths": "paths of every layer: any of fc conv gconv",
    "group": "group the input is lifted to: trivial, C4 or D4",
    "width": "channel multiplier of the mixer",
    "gconv_mode": "GCONV path: full (group convolution) or shared (one filter per copy)",
    "fc_mode": "FC path: factorized or dense",
    "model": "network: mixer (ella's relaxed layers), or the plain baselines mlp or cnn",
    "invariance": "input invariance f(x) = E_T[g(T x)] over affine transformations: none, full "
    "(fixed full ranges), learned (extents by marginal likelihood) or augerino",
    "generators": "affine generators to use: any of " + " ".join(GENERATORS),
    "invariance_samples": "transformation samples per image in training and the evidence",
    "invariance_eval_samples": "transformation samples per image at test time",
    "eta_init": "initial extent of every generator (learned, augerino); translations in half "
    "image sizes, rotation in radians, scales and shear as log factors",
    "lr_eta": "Adam learning rate of the extents eta",
    "augerino_reg": "Augerino: weight of -||eta|| in the training loss",
    "invariance_marglik_size": "training images (the first N) in each evidence step for eta",
    "epochs": "training epochs",
    "batch_size": "minibatch size for the weights",
    "optimizer": "optimizer of the weights: adam or sgd (with --momentum)",
    "lr": "initial learning rate of the weights (cosine schedule)",
    "lr_min": "final learning rate of the cosine schedule",
    "momentum": "SGD momentum (ignored by adam)",
    "learn_priors": "learn the prior precisions by marginal likelihood (--no-learn-priors: MAP)",
    "prior_structure": "prior groups: layer_path (one per layer and path), tensor or scalar",
    "prior_precision": "initial prior precision of every group",
    "n_epochs_burnin": "epochs of MAP training before the first evidence fit",
    "marglik_frequency": "fit the evidence every this many epochs after the burn-in",
    "n_hypersteps": "Adam steps on the prior precisions per evidence fit",
    "lr_hyp": "Adam learning rate for the log prior precisions",
    "marglik_batch_size": "batch size of the evidence fit",
    "backend": "curvature backend: asdl or curvlinops",
    "hessian": "Laplace Hessian structure: kron, or full/diag for tiny models",
    "ggn": "GGN: exact (one backward pass per class) or mc (one sampled class, faster)",
    "seed": "random seed (initialisation and data order)",
    "device": "torch device, e.g. cpu or cuda",
    "progress": "show progress bars",
}

__all__ = ["HELP", "INVARIANCE_METHODS", "MODELS", "TrainConfig"]
