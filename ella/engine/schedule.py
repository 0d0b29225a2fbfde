"""The options of the alternating schedule, shared by ``ella train`` and :func:`ella.fit`.

MAP steps on the weights with the prior term ``1/2 sum delta theta^2 / N``
(cosine learning rate), and, after ``n_epochs_burnin`` epochs and every
``marglik_frequency`` epochs, one evidence fit and an update of the log prior
precisions: ``n_hypersteps`` Adam steps (``prior_update="adam"``, the ELLA reference's
schedule) or a step of ``prior_step`` towards the round's closed-form optimum
(``"optimum"``); the default ``"auto"`` takes the optimum where the Hessian is
Kronecker-factored, Adam elsewhere. The evidence options' defaults are those of
:class:`~ella.engine.recipe.EvidenceRecipe`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ella.choices import (
    GGN,
    Backend,
    GConvRate,
    HessianStructure,
    LRScaling,
    Optimizer,
    PriorMean,
    PriorMode,
    PriorUpdate,
    SubsetControl,
    WeightResponse,
)
from ella.engine.recipe import OPTIMUM_STEP, EvidenceRecipe
from ella.errors import ConfigError
from ella.evidence_rules import CONFIG_NAMES, check_evidence_settings, resolved_update
from ella.nn.batched import BatchedLinear
from ella.nn.paths import Path
from ella.options import MAX_SEED, Config, option


@dataclass
class OptimizerConfig(Config):
    """The weights' optimiser and cosine learning-rate schedule, shared by ``ella train``,
    ``ella ensemble`` and :func:`ella.fit`."""

    epochs: int = option(10, minimum=1)
    optimizer: Optimizer = Optimizer.ADAM
    lr: float = option(1e-3, greater_than=0)
    lr_min: float = option(1e-6, minimum=0)
    momentum: float = option(0.9, minimum=0, maximum=1)
    lr_scaling: LRScaling = LRScaling.NONE
    gconv_lr: GConvRate = GConvRate.SAME
    seed: int = option(0, minimum=0, maximum=MAX_SEED)
    progress: bool = option(True, defines_run=False)

    def check(self) -> None:
        """Cross-option checks: ``lr_min`` at most ``lr``, and Adam for the rates' rules."""
        if self.lr_min > self.lr:
            raise ConfigError(f"lr_min ({self.lr_min}) must not exceed lr ({self.lr})")
        if (
            self.lr_scaling in (LRScaling.FAN_IN, LRScaling.FAN_IN_FC)
            and self.optimizer != Optimizer.ADAM
        ):
            raise ConfigError(
                f"--lr-scaling {self.lr_scaling} is Adam's rule (Adam moves every weight by "
                f"about lr); with --optimizer {self.optimizer} use --lr-scaling none or auto"
            )

        if self.gconv_lr == GConvRate.GROUP_ORDER and self.optimizer != Optimizer.ADAM:
            raise ConfigError(
                f"--gconv-lr group_order corrects Adam's step for the GCONV weights' sharing "
                f"(SGD's gradient already sums it); with --optimizer {self.optimizer} use "
                "--gconv-lr same"
            )

    def gconv_rate(self) -> GConvRate:
        """The GCONV paths' rate in force: ``gconv_lr``, with ``auto`` resolved by the
        optimiser (``group_order`` for Adam, ``same`` for SGD)."""
        if self.gconv_lr == GConvRate.AUTO:
            return GConvRate.GROUP_ORDER if self.optimizer == Optimizer.ADAM else GConvRate.SAME
        return self.gconv_lr

    def weight_lr_scaling(self) -> LRScaling:
        """The rule in force: ``lr_scaling``, with ``auto`` resolved by the optimiser
        (``fan_in`` for Adam, ``none`` for SGD)."""
        if self.lr_scaling == LRScaling.AUTO:
            return LRScaling.FAN_IN if self.optimizer == Optimizer.ADAM else LRScaling.NONE
        return self.lr_scaling


@dataclass
class ScheduleConfig(OptimizerConfig):
    """Optimiser, learning-rate schedule and evidence schedule (see the module docstring)."""

    # marginal likelihood; the evidence options' defaults are the recipe's
    learn_priors: bool = True
    prior_structure: PriorMode = EvidenceRecipe.structure
    prior_precision: float = option(EvidenceRecipe.prior_precision, greater_than=0)
    prior_mean: PriorMean = EvidenceRecipe.mean
    n_epochs_burnin: int = option(4, minimum=0)
    # priors that converge within the run: a round every marglik_frequency epochs after the
    # burn-in, each moving the precisions towards its optimum (adam where it does not apply)
    marglik_frequency: int = option(2, minimum=1)
    prior_update: PriorUpdate = EvidenceRecipe.update
    # None: OPTIMUM_STEP, or 1 with --prior-update adam (which does not use it)
    prior_step: float | None = option(EvidenceRecipe.step, greater_than=0, maximum=1)
    n_hypersteps: int = option(EvidenceRecipe.n_hypersteps, minimum=0)
    lr_hyp: float = option(EvidenceRecipe.lr, greater_than=0)
    backend: Backend = Backend.default_for(EvidenceRecipe.hessian)
    hessian: HessianStructure = EvidenceRecipe.hessian
    ggn: GGN = EvidenceRecipe.ggn
    marglik_batch_size: int = option(EvidenceRecipe.batch_size, minimum=1)
    marglik_subset_size: int | None = option(EvidenceRecipe.subset_size, minimum=1)
    subset_control: SubsetControl = EvidenceRecipe.control
    weight_response: WeightResponse = EvidenceRecipe.response

    def check(self) -> None:
        """The optimiser's checks, then resolve ``prior_step`` and ask the evidence's rules
        (:func:`~ella.evidence_rules.evidence_problems`), worded in the fields' names (the
        command line prints its flags)."""
        super().check()
        if self.prior_step is None:  # resolved by the rule, so a default never refuses
            step = 1.0 if self.prior_update == PriorUpdate.ADAM else OPTIMUM_STEP
            object.__setattr__(self, "prior_step", step)
        check_evidence_settings(CONFIG_NAMES, **self.evidence_settings())

    def evidence_settings(self) -> dict[str, object]:
        """The settings the evidence's rules read, by the recipe's names."""
        return {
            "hessian": self.hessian,
            "backend": self.backend,
            "ggn": self.ggn,
            "update": self.prior_update,
            # a step given with the update left to auto is that rule's (resolved in check)
            "step": None if self.prior_update == PriorUpdate.AUTO else self.prior_step,
            "response": self.weight_response,
        }

    def prior_update_rule(self) -> PriorUpdate:
        """The update in force: ``prior_update`` with ``auto`` resolved
        (:func:`~ella.evidence_rules.resolved_update`)."""
        return resolved_update(self.prior_update, self.hessian)

    def steps_priors_by_adam(self) -> bool:
        """Whether the evidence rounds take Adam steps on the log precisions (the steps
        ``lr_hyp`` and ``n_hypersteps`` set): the priors are learned, by ``adam``."""
        return bool(self.learn_priors) and self.prior_update_rule() == PriorUpdate.ADAM

    def learned_by_evidence(self) -> dict[str, str]:
        """What the evidence rounds learn: ``{the option of its initial value: what it is,
        in words}``; empty where no round is due. The prior precisions with
        ``learn_priors``."""
        return {"prior_precision": "the prior precisions"} if self.learn_priors else {}

    def evidence_epochs(self) -> list[int]:
        """The (1-based) epochs after which the evidence is fitted (:func:`evidence_due`);
        none where the rounds learn nothing (:meth:`learned_by_evidence`)."""
        learning = bool(self.learned_by_evidence())
        return [e for e in range(1, self.epochs + 1) if evidence_due(self, e, learning)]

    def check_given(self, given: Iterable[str]) -> None:
        """Refuse a given ``lr_hyp`` that no round uses (the closed-form update, or no
        learned priors), naming the option that makes it count."""
        super().check_given(given)
        if "lr_hyp" not in set(given) or self.steps_priors_by_adam():
            return
        if not self.learn_priors:
            raise ConfigError(
                f"--lr-hyp {self.lr_hyp} sets the Adam steps of the evidence rounds, and "
                "--no-learn-priors has none: drop --lr-hyp, or learn the priors"
            )
        raise ConfigError(
            f"--lr-hyp {self.lr_hyp} sets the Adam steps of --prior-update adam, and the "
            f"update in force is {self.prior_update_rule()} (each round moves the log "
            "precisions --prior-step of the way to its closed-form optimum, without a "
            "learning rate): add --prior-update adam, or drop --lr-hyp"
        )


def evidence_due(config: ScheduleConfig, epoch: int, learning: bool | None = None) -> bool:
    """Whether the evidence is fitted after (1-based) ``epoch``: something is learned by it
    (``learning``, default ``config.learn_priors``), ``epoch >= n_epochs_burnin`` and
    ``epoch % marglik_frequency == 0``."""
    if learning is None:
        learning = config.learn_priors
    return learning and epoch >= config.n_epochs_burnin and epoch % config.marglik_frequency == 0


def first_evidence_epoch(n_epochs_burnin: int, marglik_frequency: int) -> int:
    """The first (1-based) epoch after which the schedule fits the evidence
    (:func:`evidence_due`): the smallest multiple of ``marglik_frequency`` that is at least
    ``n_epochs_burnin`` and at least 1."""
    return marglik_frequency * max(1, -(-n_epochs_burnin // marglik_frequency))


class NoEvidenceRoundWarning(UserWarning):
    """A run that learns by the evidence (its priors, or an invariance) whose epochs all end
    before the schedule's first evidence round: nothing is learned, and the network is a MAP
    network under its initial priors (:func:`no_round_note`)."""


def no_round_note(config: ScheduleConfig, flags: bool = False) -> str | None:
    """What to say of a configuration that learns by the evidence
    (:meth:`ScheduleConfig.learned_by_evidence`) but whose ``epochs`` end before its first
    round (:func:`first_evidence_epoch`), with the settings that give it one
    (:func:`no_round_words`); ``None`` where a round runs or nothing is learned
    (``learn_priors=False``).

    Args:
        config: the run's schedule (``ella train``'s or :func:`ella.fit`'s).
        flags: name the options as the command line's flags (``--epochs 4``), not as
            Python's keywords (``epochs=4``).
    """
    learned = config.learned_by_evidence()
    if not learned or config.evidence_epochs():
        return None
    initial = {name: (what, getattr(config, name)) for name, what in learned.items()}
    return no_round_words(
        config.epochs, config.n_epochs_burnin, config.marglik_frequency, initial, flags
    )


def no_round_words(
    epochs: int,
    n_epochs_burnin: int,
    marglik_frequency: int,
    initial: dict[str, tuple[str, object]],
    flags: bool = False,
) -> str:
    """The words of :func:`no_round_note` from the schedule's values (a results file's
    configuration holds them as plain values): the epoch of the first round, what keeps its
    initial value (``initial``: ``{option: (what, its value)}``), and the ways out: the
    epochs that reach the first round, the burn-in (and frequency) that put a round within
    ``epochs``, and, where the priors are all that is learned, a MAP network by intent."""

    def named(name: str, value: object) -> str:
        return f"--{name.replace('_', '-')} {value}" if flags else f"{name}={value}"

    first = first_evidence_epoch(n_epochs_burnin, marglik_frequency)
    if marglik_frequency <= epochs:  # a round after the last multiple of the frequency
        last = epochs // marglik_frequency * marglik_frequency
        within = f"{named('n_epochs_burnin', last)} (a round after epoch {last})"
    else:  # a round after the last epoch
        within = named("marglik_frequency", 1)
        if n_epochs_burnin > epochs:
            burnin = named("n_epochs_burnin", epochs)
            within = f"{burnin}{' ' if flags else ' and '}{within}"
    fixes = [f"{named('epochs', first)} or more", within]
    if list(initial) == ["prior_precision"]:
        no_priors = "--no-learn-priors" if flags else "learn_priors=False"
        fixes.append(f"{no_priors} to train a MAP network by intent")
    kept = " and ".join(f"{what} keep their initial value ({named(name, value)})"
                        for name, (what, value) in initial.items())  # fmt: skip
    return (
        f"no evidence round: {named('epochs', epochs)} ends before the first round, after "
        f"epoch {first} ({named('n_epochs_burnin', n_epochs_burnin)}, "
        f"{named('marglik_frequency', marglik_frequency)}), so the evidence learns nothing: "
        f"{kept}, and the network is trained by MAP alone; give "
        f"{', or '.join(fixes)}"
    )


def cosine_lr(step: int, total: int, lr: float, lr_min: float) -> float:
    """Cosine decay from ``lr`` at step 0 to ``lr_min`` at step ``total``."""
    return lr_min + 0.5 * (lr - lr_min) * (1 + math.cos(math.pi * min(step, total) / total))


#: Fan-in above which ``--lr-scaling fan_in`` lowers a weight tensor's learning rate
#: (:class:`~ella.choices.LRScaling`): a 3x3 filter over up to 7 input channels keeps
#: ``lr``; in the default mixer the FC pixel maps at 28x28 (fan-in 784) learn at 0.08 lr,
#: at 14x14 at 0.33 lr, and the filters over more than 7 channels at 0.11-0.9 lr.
FAN_IN_REFERENCE = 64


def fan_in(parameter: torch.Tensor) -> int:
    """Inputs per output of a weight tensor (out, in, *kernel): ``in * prod(kernel)``;
    1 for a bias or any other tensor of one axis."""
    return math.prod(parameter.shape[1:]) if parameter.dim() > 1 else 1


def lr_scale(
    parameter: torch.Tensor,
    scaling: LRScaling | str,
    in_fc_path: bool = False,
    fan: int | None = None,
) -> float:
    """The factor on ``--lr`` of one tensor under ``scaling`` (see :class:`LRScaling`;
    ``auto`` is resolved by :meth:`OptimizerConfig.weight_lr_scaling`).

    Args:
        parameter: a weight or bias tensor.
        scaling: ``none``, ``fan_in`` or ``fan_in_fc``.
        in_fc_path: whether the tensor belongs to an FC path (read by ``fan_in_fc``).
        fan: the tensor's fan-in where its shape does not tell it (the maps stacked in a
            :class:`~ella.nn.batched.BatchedLinear`, :func:`stacked_fan_ins`);
            ``None``: :func:`fan_in`.
    """
    scaling = LRScaling.parse(scaling, "lr_scaling")
    if scaling == LRScaling.AUTO:
        raise ValueError("lr_scale needs a resolved rule; resolve auto with weight_lr_scaling()")
    if scaling == LRScaling.NONE or (scaling == LRScaling.FAN_IN_FC and not in_fc_path):
        return 1.0
    return min(1.0, FAN_IN_REFERENCE / (fan_in(parameter) if fan is None else fan))


def stacked_fan_ins(module: nn.Module) -> dict[int, int]:
    """``{id: fan-in}`` of the tensors of every :class:`~ella.nn.batched.BatchedLinear` in
    ``module``: a weight (K, out, in) is ``K`` maps of fan-in ``in``, a bias (K, out) has 1."""
    fans = {}
    for m in module.modules():
        if isinstance(m, BatchedLinear):
            fans[id(m.weight)] = m.in_features
            if m.bias is not None:
                fans[id(m.bias)] = 1
    return fans


def fc_path_parameters(module: nn.Module) -> set[int]:
    """``id`` of every tensor of a path of ``module`` whose kind the ``fan_in_fc`` rule
    scales (:attr:`~ella.nn.paths.Path.fan_in_rate`: the FC path)."""
    return {
        id(p)
        for m in module.modules()
        if isinstance(m, Path) and m.fan_in_rate
        for p in m.parameters()
    }


def gconv_path_parameters(module: nn.Module) -> dict[int, int]:
    """``{id: copies}`` of every tensor of a path of ``module`` whose weights serve
    several group copies (:meth:`~ella.nn.paths.Path.rate_copies`: the GCONV path's
    ``|G|``)."""
    return {
        id(p): m.rate_copies()
        for m in module.modules()
        if isinstance(m, Path) and m.rate_copies() > 1
        for p in m.parameters()
    }


def make_optimizer(parameters, config: OptimizerConfig) -> torch.optim.Optimizer:
    """SGD with momentum or Adam over ``parameters`` (an iterable or a module's), at
    ``config.lr``, with one parameter group per learning-rate factor of
    ``config.lr_scaling`` and ``config.gconv_lr`` (the factor is the group's
    ``"lr_scale"``, which the learning-rate schedule multiplies in).

    The update runs in torch's ``foreach`` form (one call per operation over all
    tensors; bit-identical to the per-tensor loop). torch's fused CPU
    kernel is faster still, but made one process with 2 threads and two processes with 1
    thread end 2.7e-4 apart in a log prior precision after two epochs (``foreach``:
    about 1e-6; ``tests/test_distributed.py``), so it is not used.
    """
    scaling = config.weight_lr_scaling()
    tied = config.gconv_rate() == GConvRate.GROUP_ORDER
    if isinstance(parameters, nn.Module):
        fc = fc_path_parameters(parameters)
        copies = gconv_path_parameters(parameters) if tied else {}
        fans = stacked_fan_ins(parameters)
        parameters = parameters.parameters()
    elif scaling == LRScaling.FAN_IN_FC or tied:
        option = "--lr-scaling fan_in_fc" if scaling == LRScaling.FAN_IN_FC else "--gconv-lr"
        raise ValueError(f"{option} needs the model (an nn.Module), not its tensors")
    else:
        fc, copies, fans = set(), {}, {}
    scaled: dict[float, list[torch.Tensor]] = {}
    for parameter in parameters:
        scale = lr_scale(parameter, scaling, id(parameter) in fc, fans.get(id(parameter)))
        scale *= copies.get(id(parameter), 1)
        scaled.setdefault(scale, []).append(parameter)
    groups = [
        {"params": group, "lr": config.lr * scale, "lr_scale": scale}
        for scale, group in scaled.items()
    ]
    if config.optimizer == Optimizer.SGD:
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, foreach=True)
    return torch.optim.Adam(groups, lr=config.lr, foreach=True)


#: Help text of every option of :class:`OptimizerConfig`.
OPTIMIZER_HELP: dict[str, str] = {
    "epochs": "training epochs",
    "optimizer": "optimizer of the weights (sgd uses --momentum)",
    "lr": "initial learning rate of the weights (cosine schedule)",
    "lr_min": "final learning rate of the cosine schedule (0 <= lr_min <= lr)",
    "momentum": "SGD momentum in [0, 1] (ignored by adam)",
    "lr_scaling": "none (every weight at --lr), fan_in (adam only: a weight tensor with more "
    f"than {FAN_IN_REFERENCE} inputs per output learns at lr * {FAN_IN_REFERENCE} / fan-in, "
    "so that every layer's outputs move about as fast), fan_in_fc (adam only: fan_in for the "
    "FC paths' tensors, every other tensor at --lr) or auto (fan_in with adam, none with sgd)",
    "gconv_lr": "same (the GCONV paths' tensors at the rate of --lr-scaling), group_order "
    "(adam only: |G| times it, since a GCONV weight serves every group copy where a CONV "
    "weight serves one) or auto (group_order with adam, same with sgd)",
    "seed": "random seed (initialisation and data order)",
    "progress": "show progress bars (may change on --resume)",
}

#: Help text of every option of :class:`ScheduleConfig`.
SCHEDULE_HELP: dict[str, str] = {
    **OPTIMIZER_HELP,
    "learn_priors": "learn the prior precisions by marginal likelihood (--no-learn-priors: MAP)",
    "marglik_batch_size": "batch size of the evidence fit",
    "marglik_subset_size": "fit the evidence on this many training images, drawn afresh "
    "(class-balanced) at every evidence round, with likelihood and curvature scaled to the "
    "whole training set (Immer et al., ICML 2023); unset: all training images",
    "subset_control": "control variate of the subset evidence (--marglik-subset-size): "
    "scale the subset's curvature by the mean of 1 - sum p^2 over all training images against "
    "the subset's (a ratio estimator): training (the training passes' traces, each older "
    "epoch's weight halved; free), "
    "forward (a pass over all training images at each round) or none",
    "prior_structure": "prior groups: layer_path (one per layer and path), tensor (one per "
    "parameter tensor) or scalar (one in all)",
    "prior_precision": "initial prior precision of every group",
    "prior_mean": "centre of the weights' prior: zero (the reference) or init (the initial "
    "weights, so the evidence prices what training added, not the random initialisation)",
    "n_epochs_burnin": "epochs of MAP training before the first evidence fit",
    "marglik_frequency": "fit the evidence every this many epochs after the burn-in",
    "prior_update": "adam: --n-hypersteps Adam steps per evidence fit (the reference); "
    "optimum: the fit's maximum of the evidence, per prior group in closed form; auto: "
    "optimum, or adam where optimum does not apply (a Hessian other than kron, learned "
    "invariance)",
    "weight_response": "after each evidence round: none (the training steps pull the weights "
    "towards the new prior) or laplace (the weights move at once to the new prior's MAP as "
    "the round's Kronecker GGN predicts; --hessian kron)",
    "prior_step": "with --prior-update optimum (or auto, where it resolves to optimum): the "
    "fraction of the way to each round's optimum that the log precisions move (1: to the "
    "optimum; below 1 damps the rounds); unused by adam",
    "n_hypersteps": "Adam steps on the prior precisions per evidence fit (--prior-update adam)",
    "lr_hyp": "Adam learning rate for the log prior precisions",
    "backend": "curvature backend of the Laplace evidence",
    "hessian": "Laplace Hessian structure: kron, or full/diag for tiny models (a size that "
    "cannot fit in memory is refused before training)",
    "ggn": "GGN: exact (K - 1 backward passes for K classes with the native backend, one "
    "per class with a stock one), mc (one sampled class, faster), "
    "stratified (the most probable class exactly and one class sampled from the others: "
    "two backward passes, far less noisy than mc on confident predictions; native backend) "
    "or auto (stratified with the native backend, mc with a stock one)",
}

__all__ = [
    "OPTIMIZER_HELP",
    "SCHEDULE_HELP",
    "OptimizerConfig",
    "ScheduleConfig",
    "FAN_IN_REFERENCE",
    "cosine_lr",
    "NoEvidenceRoundWarning",
    "evidence_due",
    "first_evidence_epoch",
    "no_round_note",
    "no_round_words",
    "fan_in",
    "fc_path_parameters",
    "gconv_path_parameters",
    "lr_scale",
    "make_optimizer",
    "stacked_fan_ins",
]
