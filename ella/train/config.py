"""Training configuration (one dataclass; the command line is generated from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ella.choices import (
    DEFAULT_GROUP,
    Augmentation,
    CudaGraph,
    Downsampling,
    FCMode,
    GConvMode,
    GConvRate,
    Generator,
    GroupPooling,
    HeadInit,
    HessianStructure,
    InvarianceMethod,
    LayerGroup,
    LRScaling,
    ModelName,
    Normalisation,
    PathName,
    Precision,
    PriorMean,
    PriorUpdate,
    ReportedState,
    SubsetControl,
)
from ella.data.datasets import image_side
from ella.data.registry import dataset_help
from ella.engine.graphs import use_cuda_graph
from ella.engine.recipe import LOOP_CONTROL
from ella.engine.schedule import SCHEDULE_HELP, ScheduleConfig
from ella.errors import ConfigError
from ella.models.build import check_mixer_options
from ella.options import option
from ella.rundir import SELECT_EPOCHS
from ella.runtime.system import check_device_name

#: Training images (the first) on which ``--head-init data`` standardises a mixer's head.
HEAD_INIT_IMAGES = 512
#: Network architectures ``build_model`` knows.
MODELS = ModelName.values()
#: Input-invariance methods: none, fixed full augmentation, learned by marginal
#: likelihood (LILA), learned by Augerino's regularised loss.
INVARIANCE_METHODS = InvarianceMethod.values()


@dataclass
class TrainConfig(ScheduleConfig):
    """Everything that defines a training run of ``ella train``.

    MAP training and learned-prior (ELLA) training are the same loop; with
    ``learn_priors=False`` the evidence is never fitted and the prior precisions stay at
    ``prior_precision``. Learned input invariance (``invariance="learned"``) wraps the
    network in an :class:`~ella.invariance.InvariantClassifier` and learns the extents
    ``eta`` of the affine generators by the Laplace evidence in the same rounds, jointly
    with the priors when ``learn_priors`` is on.

    The defaults are the mixer's recipe, chosen on validation splits so that the default
    run trains on the embedded MNIST subset on a CPU; the options it sets otherwise than
    :class:`~ella.engine.schedule.ScheduleConfig` (:func:`ella.fit`'s) are declared here.
    Why each default is what it is, with its record: the training guide's defaults table,
    whose default column is generated from this class (``tools/defaults_table.py``). The
    reference's optimiser and schedule are ``--optimizer sgd --lr 0.1 --prior-precision 1
    --n-epochs-burnin 10 --marglik-frequency 5 --batch-size 500 --prior-update adam``.

    Every option is checked when the configuration is built (choices, ranges,
    finiteness; :class:`~ella.options.Config`); ``data_dir``, ``device``, ``compile``,
    ``cuda_graph`` and ``progress`` do not define the run and may change on ``--resume``.
    """

    COMMAND: ClassVar[str | None] = "ella train"

    # data
    dataset: str = "mnist_subset"
    data_dir: str | None = option(None, defines_run=False, path=True)
    train_size: int | None = option(3000, minimum=1)
    test_size: int | None = option(None, minimum=1)
    validation_size: int = option(0, minimum=0)
    augment: Augmentation = Augmentation.TRANSLATE
    augment_shift: int = option(2, minimum=1)
    # model
    paths: tuple[PathName, ...] = (PathName.FC, PathName.CONV, PathName.GCONV)
    group: LayerGroup = DEFAULT_GROUP
    width: int = option(2, minimum=1)
    gconv_mode: GConvMode = GConvMode.FULL
    fc_mode: FCMode = FCMode.FACTORIZED
    fc_rank: int = option(1, minimum=1)
    # the FC path starts at zero: the network starts as its convolutions
    zero_init: tuple[PathName, ...] = option((PathName.FC,), nargs="*")
    norm: Normalisation = Normalisation.INSTANCE
    downsample: Downsampling = Downsampling.MAX
    pool: GroupPooling = GroupPooling.MAX
    model: ModelName = ModelName.MIXER
    head_init: HeadInit = HeadInit.DATA
    # learned input invariance
    invariance: InvarianceMethod = InvarianceMethod.NONE
    generators: tuple[Generator, ...] = tuple(Generator)
    invariance_samples: int = option(8, minimum=1)
    invariance_eval_samples: int = option(16, minimum=1)
    eta_init: float = option(0.1, minimum=0)
    lr_eta: float = option(0.05, greater_than=0)
    augerino_reg: float = option(0.01, minimum=0)
    invariance_marglik_size: int = option(1000, minimum=1)
    # MAP optimisation (epochs, optimiser and the evidence schedule: ScheduleConfig)
    batch_size: int = option(128, minimum=1)
    # the evidence rounds (marglik_subset_size, ...: ScheduleConfig), the subset's curvature
    # scaled by the traces of the training passes, free (the forward control costs a pass)
    subset_control: SubsetControl = LOOP_CONTROL
    # the mixer's recipe where it differs from ella.fit's defaults (ScheduleConfig)
    epochs: int = option(20, minimum=1)
    lr: float = option(3e-3, greater_than=0)
    # fan_in with Adam, none with SGD
    lr_scaling: LRScaling = LRScaling.AUTO
    # group_order with Adam, same with SGD
    gconv_lr: GConvRate = GConvRate.AUTO
    report_state: ReportedState = ReportedState.FINAL
    # after training: greedy selection of the paths by the evidence (ella.selection)
    select_paths: bool = option(False, defines_run=False)
    select_epochs: int = option(SELECT_EPOCHS, minimum=1, defines_run=False)
    # run
    device: str = option("cpu", defines_run=False)
    precision: Precision = Precision.FP32
    compile: bool = option(False, defines_run=False)
    # captured where nothing rules it out (ella.engine.graphs.eager_reason): a CUDA device
    cuda_graph: CudaGraph = option(CudaGraph.AUTO, defines_run=False)

    def prior_update_rule(self) -> PriorUpdate:
        """``auto`` resolved: ``adam`` when the input invariance is learned as well (the
        closed-form optimum covers the network's priors only), else as for any schedule."""
        if self.prior_update == PriorUpdate.AUTO and self.invariance == InvarianceMethod.LEARNED:
            return PriorUpdate.ADAM
        return super().prior_update_rule()

    def steps_priors_by_adam(self) -> bool:
        """As for any schedule; and an input-invariant model's rounds take Adam steps on
        its learned priors whatever the update (through its differentiable evidence)."""
        invariant_rounds = self.learn_priors and self.invariance != InvarianceMethod.NONE
        return super().steps_priors_by_adam() or bool(invariant_rounds)

    def learned_by_evidence(self) -> dict[str, str]:
        """As for any schedule (the prior precisions, with ``learn_priors``), and the
        extents of a learned input invariance (``--invariance learned``)."""
        learned = super().learned_by_evidence()
        if self.invariance == InvarianceMethod.LEARNED:
            learned["eta_init"] = "the invariance's extents eta"
        return learned

    def evidence_settings(self) -> dict[str, object]:
        """The schedule's settings and the rounds' subset of the training images, which
        ``ella train`` knows before it starts (``train_size``; ``None``: all of them)."""
        return {
            **super().evidence_settings(),
            "subset_size": self.marglik_subset_size,
            "n_data": self.train_size,
        }

    def check(self) -> None:
        """Cross-option checks (choices and ranges are checked by :class:`Config`)."""
        super().check()

        side = image_side(self.dataset)
        if self.augment_shift > side // 2:
            raise ConfigError(
                f"--augment-shift {self.augment_shift} moves a {side}x{side} image of "
                f"{self.dataset} out of view; use at most {side // 2} (half the image)"
            )
        device = check_device_name(self.device)
        if self.cuda_graph == CudaGraph.ON:  # what rules a capture out before the run starts
            use_cuda_graph(
                self.cuda_graph,
                device,
                compiled=self.compile,
                invariant=self.invariance != InvarianceMethod.NONE,
            )
        if not self.paths:
            raise ConfigError("paths must name at least one of fc, conv, gconv, residual")
        check_mixer_options(self)
        if len(set(self.zero_init)) != len(self.zero_init):
            raise ConfigError(f"--zero-init must not repeat a path, got {' '.join(self.zero_init)}")
        if self.train_size is not None and self.train_size < 2:
            raise ConfigError(
                f"--train-size {self.train_size}: a run needs at least 2 training images; "
                "give --train-size 2 or more"
            )
        if self.train_size is not None and self.validation_size > self.train_size - 2:
            raise ConfigError(
                f"--validation-size {self.validation_size} leaves "
                f"{max(self.train_size - self.validation_size, 0)} training images of "
                f"--train-size {self.train_size}; leave at least 2 (use a validation size of "
                f"at most {max(self.train_size - 2, 0)})"
            )
        if not self.generators:
            raise ConfigError("generators must name at least one generator")
        if self.invariance != InvarianceMethod.NONE and self.augment != Augmentation.NONE:
            raise ConfigError(
                f"--invariance {self.invariance} learns or fixes the invariance that "
                f"--augment {self.augment} would impose by training-time augmentation "
                "(ella train's default is --augment translate): add --augment none"
            )
        if self.invariance == InvarianceMethod.LEARNED and self.prior_update == PriorUpdate.OPTIMUM:
            raise ConfigError(
                "--prior-update optimum is for the network's priors alone; learned "
                "invariance moves eta and the priors together with --prior-update adam"
            )
        if self.invariance == InvarianceMethod.LEARNED and self.hessian != HessianStructure.KRON:
            raise ConfigError("learned invariance needs --hessian kron")
        if self.select_paths:
            self._check_selectable()

    def _check_selectable(self) -> None:
        """What ``--select-paths`` needs (:func:`ella.selection.check_selectable` for a run)."""
        if not self.learn_priors:
            raise ConfigError("--select-paths needs learned priors; drop --no-learn-priors")
        if self.prior_mean != PriorMean.ZERO:
            raise ConfigError(
                "--select-paths sets a path's weights to zero, and --prior-mean init centres "
                "the prior at the initial weights: use --prior-mean zero"
            )
        if self.model != ModelName.MIXER or len(self.paths) < 2:
            raise ConfigError(
                "--select-paths chooses among the paths of the mixer's layers: give --model "
                f"mixer and two or more --paths (got --model {self.model} --paths "
                f"{' '.join(self.paths)})"
            )
        if self.invariance != InvarianceMethod.NONE:
            raise ConfigError("--select-paths is for networks without --invariance")


def _dataset_option_help() -> str:
    """``--dataset``'s help: the data sets registered now (:func:`dataset_help`)."""
    return f"data set: {dataset_help()}"


#: Help text of every option of ``ella train`` (a test checks none is missing).
HELP: dict[str, str] = {
    **SCHEDULE_HELP,
    "dataset": _dataset_option_help(),
    "data_dir": "directory with MNIST/raw etc.; unset: $ELLA_DATA, else ~/.cache/ella (stored "
    "as an absolute path; may change on --resume)",
    "train_size": "number of training images to use (the first N)",
    "test_size": "number of test images to use (default: all)",
    "validation_size": "hold out the last V of the training images (of the first "
    "train_size) as a validation set: the network trains on the others, and every epoch "
    "reports validation accuracy and NLL (for choosing settings without the test set); 0: none",
    "augment": "training-time augmentation per image (the test set is never augmented)",
    "augment_shift": "--augment translate: largest shift in pixels along each axis",
    "paths": "paths of every layer (one or more)",
    "group": "group the input is lifted to (exact pixel symmetries only; interpolated C<N> "
    "groups are for augmentation and metrics)",
    "width": "channel multiplier of the mixer",
    "gconv_mode": "GCONV path: full (regular group convolution) or shared (one filter per copy)",
    "norm": "mixer: instance normalises every layer before its ReLU (per image and channel "
    "over group copies and positions; keeps the symmetry, trains CONV/GCONV paths faster)",
    "downsample": "mixer: how the stride-2 CONV and GCONV paths halve their output: "
    "polyphase (per image, exactly shift and group equivariant) or max (2x2 maximum; exactly "
    "group equivariant, locally shift invariant)",
    "fc_mode": "FC path: factorized (ELLA's V U form) or dense (small sizes only)",
    "pool": "mixer: max or mean over the group copies before the head (a GCONV-only mixer "
    "is then exactly invariant), or none (the head sees every copy and may break the "
    "symmetry)",
    "zero_init": "mixer: paths whose last stage starts at zero in mixed layers, so the network "
    "begins as its other paths and the data grows these (give none for the random start of "
    "every path)",
    "fc_rank": "factorised FC path: projections of the input per pair of input and output "
    "channels (1: ELLA's V U form; more lets a one-channel input, e.g. the trivial group's "
    "first layer, reach each output channel as more than one number)",
    "head_init": "mixer: data standardises the pooled features entering the head on the "
    f"first {HEAD_INIT_IMAGES} training images at initialisation (trains faster), default "
    "keeps torch's initialisation only",
    "model": "network: mixer (ella's relaxed layers), or the plain baselines mlp or cnn",
    "invariance": "input invariance f(x) = E_T[g(T x)] over affine transformations: none, full "
    "(fixed full ranges), learned (extents by marginal likelihood) or augerino",
    "generators": "affine generators to use (one or more)",
    "invariance_samples": "transformation samples per image in training and the evidence",
    "invariance_eval_samples": "transformation samples per image at test time",
    "eta_init": "initial extent of every generator (learned, augerino); translations in half "
    "image sizes, rotation in radians, scales and shear as log factors",
    "lr_eta": "Adam learning rate of the extents eta",
    "augerino_reg": "Augerino: weight of -||eta|| in the training loss",
    "invariance_marglik_size": "training images (the first N) in each evidence step for eta",
    "batch_size": "minibatch size for the weights",
    "device": "torch device, e.g. cpu or cuda (may change on --resume)",
    "precision": "arithmetic of the training steps: fp32, tf32 (float32 tensors, TF32 matrix "
    "units on a GPU that has them) or bf16 (autocast to bfloat16 where it is safe); the "
    "evidence fit, its log determinants and the test metrics stay in float32 or float64",
    "compile": "compile the model's training forward and backward with torch.compile (falls "
    "back to eager execution with a message where compilation fails; may change on --resume)",
    "cuda_graph": "run each training step (forward, backward, prior term, optimiser step) as "
    "one captured CUDA graph: auto (on a CUDA device unless --compile, torchrun or "
    "--invariance rules it out, saying why), on (refused where ruled out) or off; may change "
    "on --resume",
    "select_paths": "after training, select the paths by the evidence, greedily: drop each "
    "path from every layer, train on for --select-epochs, drop the one whose removal raises "
    "the Laplace evidence most, repeat until none does (ella select RUN; "
    "writes path_selection.json and the selected network, path_selection.pt)",
    "select_epochs": "--select-paths: epochs of training on per candidate",
    "report_state": "learned priors: which weights the run reports and saves as its model: "
    "best_evidence (after the evidence round of highest log marginal likelihood) or final "
    "(after the last epoch)",
}


def help_texts() -> dict[str, str]:
    """:data:`HELP` with ``dataset`` naming the data sets registered now (a data set
    registered after this module's import is named too)."""
    return {**HELP, "dataset": _dataset_option_help()}


__all__ = ["HEAD_INIT_IMAGES", "HELP", "INVARIANCE_METHODS", "MODELS", "TrainConfig", "help_texts"]
