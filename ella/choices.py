"""Every choice-valued option of ella, typed once.

The configurations, the command line (``choices=``), the library's own checks
and the help texts all take their lists from these enums. Members compare
equal to their strings, so ``Backend.ASDL == "asdl"``; see
:class:`ella.options.Choice`.
"""

from __future__ import annotations

from ella.options import Choice

__all__ = [
    "DEFAULT_GROUP",
    "Augmentation",
    "Backend",
    "CudaGraph",
    "Downsampling",
    "EnsembleMethod",
    "FCMode",
    "GConvMode",
    "GConvRate",
    "GGN",
    "Generator",
    "GroupAugmentation",
    "GroupPooling",
    "HeadInit",
    "HessianStructure",
    "InvarianceMethod",
    "LayerGroup",
    "Likelihood",
    "Lengthscales",
    "LRScaling",
    "ModelName",
    "Optimizer",
    "Precision",
    "PathName",
    "PriorMean",
    "PriorMode",
    "ReportedState",
    "SubsetControl",
]


class Optimizer(Choice):
    """Optimiser of the weights."""

    ADAM = "adam"
    SGD = "sgd"


class LRScaling(Choice):
    """Learning rate of each weight tensor relative to ``--lr`` (``fan_in``: Adam only).

    ``none``: every tensor at ``lr``.
    ``fan_in``: a weight tensor with fan-in ``n`` (its input features times its
    kernel's positions) above :data:`ella.engine.schedule.FAN_IN_REFERENCE` learns
    at ``lr * FAN_IN_REFERENCE / n``; biases and smaller tensors at ``lr``. Adam
    moves every weight by about ``lr`` per step whatever its gradient, so a
    unit's output moves by about ``lr`` times its fan-in: an FC path's pixel map
    (fan-in 784 at 28x28) would change its output ``784 / (9 C)`` times as fast as a
    3x3 convolution's filter over ``C`` input channels. The rule is the maximal-update
    parametrisation's for Adam's hidden weights (Yang et al., "Tensor Programs V", 2022).
    ``fan_in_fc``: ``fan_in`` for the tensors of the FC paths
    (:class:`~ella.nn.FCPath`) only, every other tensor at ``lr``: the per-pixel
    maps get the step their fan-in calls for, while the shared CONV and GCONV
    filters keep the full rate.
    ``auto``: ``fan_in`` with Adam, ``none`` with SGD (the default of
    ``TrainConfig.lr_scaling``).
    """

    NONE = "none"
    FAN_IN = "fan_in"
    FAN_IN_FC = "fan_in_fc"
    AUTO = "auto"


class GConvRate(Choice):
    """Learning rate of the GCONV paths' tensors, on top of ``--lr-scaling`` (Adam only).

    ``same``: the rate ``--lr-scaling`` gives every tensor.
    ``group_order``: ``|G|`` times it. A GCONV weight serves all ``|G|`` group copies (a
    full path's block ``W_k`` appears in ``|G|`` blocks of the layer's lifted filter,
    :meth:`~ella.nn.GConvPath.lifted_filter`; a shared path applies one filter to every
    copy), a CONV weight one block. Adam moves every weight by about ``lr`` per step
    whatever its gradient, so the CONV path, with ``|G|`` times the weights, grows the
    equivariant part of a layer's filter as fast as the GCONV path, where SGD's summed
    gradient moves a tied weight ``|G|`` times as fast.
    ``auto``: ``group_order`` with Adam, ``same`` with SGD (the default of
    ``TrainConfig.gconv_lr``).
    """

    SAME = "same"
    GROUP_ORDER = "group_order"
    AUTO = "auto"


class ModelName(Choice):
    """Network architectures: ella's relaxed mixer or a plain baseline."""

    MIXER = "mixer"
    MLP = "mlp"
    CNN = "cnn"


class PathName(Choice):
    """Paths of a relaxed layer."""

    FC = "fc"
    CONV = "conv"
    GCONV = "gconv"
    #: the CONV residual: a convolution with its group-equivariant part removed
    #: (:class:`~ella.nn.ResidualConvPath`); with ``gconv`` it spans what ``conv`` does
    RESIDUAL = "residual"


class LayerGroup(Choice):
    """Groups ella's layers lift to: the exact pixel symmetries of a square image.

    Interpolated rotation groups (``C8``, ``C16``...) are not exact on pixels and
    are refused for layers; they serve augmentation and the symmetry metrics.
    """

    TRIVIAL = "trivial"
    C4 = "C4"
    D4 = "D4"

    @classmethod
    def _missing_(cls, value):  # names are case-insensitive, as in ella.groups.get_group
        if isinstance(value, str):
            for member in cls:
                if member.value.lower() == value.lower():
                    return member
        return None


#: the group a layer lifts to where none is named: the four rotations by quarter turns
DEFAULT_GROUP = LayerGroup.C4


class GConvMode(Choice):
    """GCONV path: a regular group convolution, or one shared filter per group copy."""

    FULL = "full"
    SHARED = "shared"


class GroupPooling(Choice):
    """How a mixer removes the group axis before its head.

    ``max`` / ``mean``: over the group copies, so everything after the pool sees
    an invariant tensor (a GCONV-only mixer's logits are exactly invariant, and a
    C4-invariant classifier cannot tell a 6 from a 9 turned upside down).
    ``none``: the copies stay apart (``|G| C`` features), so the body is
    equivariant and the head is free to break the symmetry; the logits are then
    not invariant, whatever the paths.
    """

    MAX = "max"
    MEAN = "mean"
    NONE = "none"


class Normalisation(Choice):
    """What a relaxed layer does between its summed paths and the ReLU.

    ``instance``: per example and channel, subtract the mean and divide by the
    standard deviation over (group copies, H, W); parameter free, exactly
    equivariant, and each example on its own (so KFAC applies).
    """

    NONE = "none"
    INSTANCE = "instance"


class Downsampling(Choice):
    """How a stride-2 CONV or GCONV path halves its full-resolution output.

    ``polyphase``: keep, per example, the polyphase component with the largest
    absolute value (adaptive polyphase sampling, Chaman & Dokmanic, CVPR 2021):
    exactly equivariant to circular shifts and to the group.
    ``max``: the maximum of every 2x2 block. Exactly equivariant to the
    rotations and flips of C4/D4 (an even-sized grid's 2x2 blocks map onto
    each other), approximately to shifts, and locally shift invariant, which is
    why small CNNs generalise better with it. The FC path maps straight to the
    smaller size and is not affected.
    """

    POLYPHASE = "polyphase"
    MAX = "max"


class HeadInit(Choice):
    """How a mixer's head starts.

    ``data``: after the usual random initialisation, the head's first linear layer
    is rescaled so that the pooled features of a batch of training images enter
    it centred (mean 0 per feature) and scaled (one standard deviation pooled
    over the features; :meth:`ella.models.Mixer.standardise_head`, a
    data-dependent initialisation, Kraehenbuehl et al., ICLR 2016).
    ``default``: torch's initialisation only.
    """

    DATA = "data"
    DEFAULT = "default"


class FCMode(Choice):
    """FC path: factorised (ELLA's ``V U`` form) or a dense map (small sizes only)."""

    FACTORIZED = "factorized"
    DENSE = "dense"


class InvarianceMethod(Choice):
    """Input invariance: none, fixed full ranges, learned by marginal likelihood, Augerino."""

    NONE = "none"
    FULL = "full"
    LEARNED = "learned"
    AUGERINO = "augerino"


class Generator(Choice):
    """The six affine generators of learned input invariance."""

    TRANSLATE_X = "translate_x"
    TRANSLATE_Y = "translate_y"
    ROTATE = "rotate"
    SCALE_X = "scale_x"
    SCALE_Y = "scale_y"
    SHEAR = "shear"


class Augmentation(Choice):
    """Training-time augmentation per image of ``ella train``."""

    NONE = "none"
    C4 = "c4"
    D4 = "d4"
    ROTATE = "rotate"
    TRANSLATE = "translate"
    SCALE = "scale"


class Precision(Choice):
    """Arithmetic of the training steps (the evidence and its log determinants stay in
    float32 or float64 whatever this is)."""

    FP32 = "fp32"  # float32 throughout
    TF32 = "tf32"  # float32 tensors, the matrix units' TF32 mode in products and convolutions
    BF16 = "bf16"  # autocast: products and convolutions in bfloat16, the loss in float32


class CudaGraph(Choice):
    """Whether the training step runs as a captured CUDA graph (:mod:`ella.engine.graphs`).

    ``auto``: captured on a CUDA device unless something rules it out
    (:func:`~ella.engine.graphs.eager_reason`), else eager, saying why on a CUDA device.
    ``on``: captured; a configuration that rules it out is refused before any work.
    ``off``: eager steps.
    """

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class ReportedState(Choice):
    """Which weights a learned run reports (test accuracy, shares, the saved model).

    ``best_evidence``: the state after the evidence round with the highest log
    marginal likelihood, as laplace-torch's ``marglik_training`` returns its best
    model. ``final``: the weights and priors after the last epoch.
    """

    BEST_EVIDENCE = "best_evidence"
    FINAL = "final"


class PriorMode(Choice):
    """Prior groups: one per layer and path, one per parameter tensor, or one in all."""

    LAYER_PATH = "layer_path"
    TENSOR = "tensor"
    SCALAR = "scalar"


class PriorMean(Choice):
    """Where the Gaussian prior of the weights is centred: ``zero`` (the ELLA reference), or
    ``init``, the network's initial weights, so that the scatter term and the MAP penalty
    price only what training added (``||theta - theta_0||^2``) and not the random
    initialisation, which after a short run is still most of the weights)."""

    ZERO = "zero"
    INIT = "init"


class WeightResponse(Choice):
    """What the weights do when an evidence round has moved their prior precisions:
    ``none`` leaves them to the training steps, whose pull towards the prior's mean is
    ``lr delta / N`` of a weight per step; ``laplace`` moves them at once to the new
    prior's MAP as the round's Kronecker GGN predicts,
    ``theta <- (H + delta_new)^-1 (H + delta_old) theta`` in each tensor's eigenbasis
    (:func:`ella.marglik.laplace_response`; Kronecker Hessian only)."""

    NONE = "none"
    LAPLACE = "laplace"


class PriorUpdate(Choice):
    """How an evidence round moves the prior precisions: ``adam`` takes ``n_hypersteps``
    Adam steps on the log precisions (the ELLA reference); ``optimum`` sets them to the
    round's maximum of the evidence at the fitted weights and curvature (closed-form
    stationarity condition per group, Kronecker Hessian only); ``auto`` is ``optimum``
    where it applies and ``adam`` where it does not (a Hessian other than Kronecker, or
    input invariance learned with the priors), the default of ``TrainConfig.prior_update``."""

    ADAM = "adam"
    OPTIMUM = "optimum"
    AUTO = "auto"


class Backend(Choice):
    """Curvature backend of the Laplace evidence: ella's batched KFAC (native), or the
    stock laplace-torch backends kept as references."""

    NATIVE = "native"
    ASDL = "asdl"
    CURVLINOPS = "curvlinops"

    @classmethod
    def default_for(cls, structure: str) -> Backend:
        """The backend the evidence uses when none is named: ella's own factors where they
        exist (``kron``), else ASDL (``full``, ``diag``)."""
        return cls.NATIVE if structure == HessianStructure.KRON else cls.ASDL


class HessianStructure(Choice):
    """Structure of the Laplace Hessian: Kronecker-factored, or full/diagonal for tiny models."""

    KRON = "kron"
    FULL = "full"
    DIAG = "diag"


class GGN(Choice):
    """GGN of the evidence: exact (a backward pass per class), a one-sample MC estimate, or
    the stratified estimate (the most probable class exactly and one label sampled from the
    others: two backward passes, unbiased, :func:`ella.marglik.native.stratified_root`);
    auto: stratified where the backend has it (ella's own factors), else mc."""

    EXACT = "exact"
    MC = "mc"
    STRATIFIED = "stratified"
    AUTO = "auto"

    def for_backend(self, backend: str) -> GGN:
        """This GGN, with ``auto`` resolved for ``backend`` (``native``: stratified; a stock
        backend: mc)."""
        if self != GGN.AUTO:
            return self
        return GGN.STRATIFIED if backend == Backend.NATIVE else GGN.MC


class SubsetControl(Choice):
    """Control variate of the subset evidence's curvature (a ratio estimator): the GGN of
    ``M`` of ``N`` training images is scaled by the mean trace of the softmax output
    Hessian, ``1 - sum_c p_c^2``, over all ``N`` images against that over the ``M``
    (:func:`ella.marglik.control.curvature_ratio`). ``none``: no control, ``N / M`` alone;
    ``training``: the traces of the training passes, averaged over epochs with each older
    epoch's weight halved (free; augmented inputs, the weights of those epochs);
    ``forward``: a pass without gradients over all training images at the round (the
    current traces; costs a forward pass over ``N`` images)."""

    NONE = "none"
    TRAINING = "training"
    FORWARD = "forward"


class Likelihood(Choice):
    """Likelihood of the targets: softmax classification or Gaussian regression."""

    CLASSIFICATION = "classification"
    REGRESSION = "regression"


class EnsembleMethod(Choice):
    """Particle methods: deep ensembles and the three repulsive ensembles."""

    DE = "de"
    WEIGHT_RDE = "weight_rde"
    FUNCTION_RDE = "function_rde"
    FORDE = "forde"


class GroupAugmentation(Choice):
    """Ensemble augmentation by a group: none, every image's whole orbit, or one element."""

    NONE = "none"
    ORBIT = "orbit"
    SAMPLED = "sampled"


class Lengthscales(Choice):
    """FoRDE kernel lengthscales: identity, the data's PCA, or the alpha-mix of both."""

    IDENTITY = "identity"
    PCA = "pca"
    MIX = "mix"
