"""The learned prior's state: one log precision per parameter group, and the MAP term.

:class:`LearnedPrior` holds the log precisions ``log delta`` (a leaf tensor with its own
Adam optimiser), the prior's mean ``mu`` and the penalty they give the weights,
``1/2 sum_i delta_i (theta_i - mu_i)^2 / N`` (MacKay 1992; Immer et al., ICML 2021,
Eq. 3). What moves the precisions is :class:`~ella.learner.PriorLearner`'s.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from ella.choices import PriorMean, PriorMode
from ella.errors import CheckpointError, ConfigError
from ella.marglik import PriorStructure

__all__ = ["LearnedPrior"]


class LearnedPrior:
    """Log precisions of a model's parameter groups, and the prior term they give.

    Args:
        model: the network (every trainable parameter belongs to one group).
        n_data: ``N``, the size of the training set (the penalty's scale).
        structure: which tensors share a precision (:class:`~ella.choices.PriorMode`).
        prior_precision: the initial precision of every group.
        mean: ``zero`` or ``init`` (the trainable parameters now).
        lr: Adam's learning rate on the log precisions.

    Attributes:
        prior: the :class:`~ella.marglik.PriorStructure` (group names, tensor index).
        log_prior: the log precisions, (n_groups,), a leaf tensor.
        optimizer: Adam on ``log_prior``.
        prior_mean: the prior's mean of every trainable parameter (n_params,), or
            ``None`` (zero).
    """

    def __init__(
        self,
        model: nn.Module,
        n_data: int,
        structure: PriorMode,
        prior_precision: float,
        mean: PriorMean,
        lr: float,
    ):
        self.model = model
        self.n_data = n_data
        self.prior = PriorStructure(model, structure)
        self.mean = PriorMean.parse(mean, "prior mean")
        self._params: list[nn.Parameter] | None = None  # trainable()
        self.prior_mean: torch.Tensor | None = (
            self.trainable_vector().detach().clone() if self.mean == PriorMean.INIT else None
        )
        device = next(model.parameters()).device
        self.log_prior = torch.full(
            (self.prior.n_groups,), math.log(prior_precision), device=device
        ).requires_grad_()
        self.optimizer = torch.optim.Adam([self.log_prior], lr=lr)
        self._diagonal: tuple[int, torch.Tensor] | None = None  # (version of log_prior, diag)
        #: (version of log_prior, per-tensor precisions, per-tensor delta / N as floats)
        self._scales: tuple[int, torch.Tensor, list[float]] | None = None

    def trainable(self) -> list[nn.Parameter]:
        """The trainable tensors, in the order of :attr:`prior` (listed once)."""
        if self._params is None:
            self._params = [p for p in self.model.parameters() if p.requires_grad]
        return self._params

    def trainable_vector(self) -> torch.Tensor:
        """The trainable parameters as one vector, (n_params,)."""
        return parameters_to_vector(self.trainable())

    def precision_diagonal(self) -> torch.Tensor:
        """The current prior precision of every parameter, (n_params,), detached.

        Cached until ``log_prior`` changes (any in-place update bumps its version)."""
        version = self.log_prior._version
        if self._diagonal is None or self._diagonal[0] != version:
            diagonal = self.prior.expand_diagonal(self.log_prior.detach().exp())
            self._diagonal = (version, diagonal)
        return self._diagonal[1]

    def penalty(self) -> torch.Tensor:
        """``1/2 sum_i delta_i (theta_i - mu_i)^2 / N`` (``mu`` the prior mean, zero by
        default): add it to a mean cross-entropy loss."""
        theta = self.trainable_vector()
        if self.prior_mean is not None:
            theta = theta - self.prior_mean
        return 0.5 * (self.precision_diagonal() * theta.square()).sum() / self.n_data

    def _tensor_scales(self) -> tuple[torch.Tensor, list[float]]:
        """The prior precision of every trainable tensor, (n_tensors,), and ``delta_t / N``
        of each as a float, rounded as backpropagating :meth:`penalty` rounds it (the float32
        ``1 / N`` times ``delta_t``); cached until ``log_prior`` changes."""
        version = self.log_prior._version
        if self._scales is None or self._scales[0] != version:
            delta = self.prior.expand(self.log_prior.detach().exp())
            inverse_n = torch.ones((), dtype=delta.dtype, device=delta.device) / self.n_data
            self._scales = (version, delta, (inverse_n * delta).tolist())
        return self._scales[1], self._scales[2]

    @torch.no_grad()
    def penalty_value(self) -> torch.Tensor:
        """The value of :meth:`penalty` without a graph (0-dim, on the parameters' device),
        from one norm per tensor: pair it with :meth:`add_penalty_gradient`."""
        if self.prior_mean is not None:
            return self.penalty()
        delta, _ = self._tensor_scales()
        norms = torch.stack(torch._foreach_norm(self.trainable()))
        return 0.5 * (delta * norms.square()).sum() / self.n_data

    @torch.no_grad()
    def add_penalty_gradient(self) -> None:
        """Add the gradient of :meth:`penalty`, ``delta_t (theta_t - mu_t) / N``, to every
        trainable tensor's ``.grad`` (a tensor without one gets it as its gradient).

        Equal to backpropagating :meth:`penalty` with the data's loss (bit for bit with the
        prior centred at zero), in a few multi-tensor operations where autograd runs
        several per tensor.
        """
        params = self.trainable()
        if self.prior_mean is not None:
            diff = self.trainable_vector() - self.prior_mean
            flat = self.precision_diagonal() * diff / self.n_data
            terms = list(flat.split([p.numel() for p in params]))
            terms = [t.view_as(p) for t, p in zip(terms, params, strict=True)]
        else:
            _, scales = self._tensor_scales()
            terms = torch._foreach_mul(params, scales)
        have = [i for i, p in enumerate(params) if p.grad is not None]
        if have:
            torch._foreach_add_([params[i].grad for i in have], [terms[i] for i in have])
        for i, p in enumerate(params):
            if p.grad is None:
                p.grad = terms[i].clone() if self.prior_mean is not None else terms[i]

    @property
    def prior_precision(self) -> dict[str, float]:
        """``{group: delta}``."""
        return self.prior.as_dict(self.log_prior.exp())

    @property
    def prior_variance(self) -> dict[str, float]:
        """``{group: 1 / delta}``."""
        return self.prior.as_dict(self.log_prior.neg().exp())

    def state_dict(self) -> dict:
        """The groups, log precisions, Adam's state and mean (tensors and plain values)."""
        return {
            "groups": list(self.prior.names),
            "log_prior": self.log_prior.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "prior_mean": None if self.prior_mean is None else self.prior_mean.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` saved; a state that does not fit changes nothing.

        Raises:
            CheckpointError: an entry missing, a tensor of another shape than this model's
                groups, an optimizer state that does not fit.
            ConfigError: the state is of priors for other groups, or centred elsewhere.
        """
        _check_entries(state)
        if list(state["groups"]) != self.prior.names:
            raise ConfigError(
                f"these priors are for the groups {state['groups']}, not this model's "
                f"{self.prior.names}"
            )
        _check_shapes(state, self.prior.n_groups)
        mean = state.get("prior_mean")  # absent before the option existed: zero
        if (mean is None) != (self.prior_mean is None):
            saved = "zero" if mean is None else "init"
            raise ConfigError(
                f"these priors are centred at {saved}, not at {self.mean.value}: "
                f"set prior_mean (--prior-mean) to {saved}"
            )
        if mean is not None and mean.shape != self.prior_mean.shape:
            raise ConfigError(
                f"the saved prior mean has {mean.numel()} values, this model "
                f"{self.prior_mean.numel()} trainable parameters"
            )
        try:  # torch checks the state before it changes the optimizer
            self.optimizer.load_state_dict(state["optimizer"])
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"the saved optimizer state of the priors does not fit this learner "
                f"({type(error).__name__}: {error}); {STATE_FIX}"
            ) from error
        with torch.no_grad():
            self.log_prior.copy_(state["log_prior"])
        if mean is not None:
            self.prior_mean = mean.to(self.prior_mean)


#: the entries that every saved learner state has
STATE_KEYS = ("groups", "log_prior", "optimizer", "history")
STATE_FIX = (
    "the state is damaged or not from PriorLearner.state_dict() of this model: load the "
    "priors saved with this model (ckpt['priors'] of its run), or start without them"
)


def _check_entries(state) -> None:
    """Refuse a saved learner state without the entries of a learner's ``state_dict``."""
    if not isinstance(state, dict):
        raise CheckpointError(f"the saved priors must be a dict, got {type(state).__name__}")
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise CheckpointError(
            f"the saved priors lack the entries {missing} (they have {sorted(state)}); " + STATE_FIX
        )


def _check_shapes(state: dict, n_groups: int) -> None:
    """Refuse saved precisions (or Adam moments of them) of another length than the
    model's ``n_groups`` prior groups."""
    tensors = {"log_prior": state["log_prior"]}
    optimizer = state["optimizer"]
    slots = optimizer.get("state", {}) if isinstance(optimizer, dict) else {}
    for slot in slots.values() if isinstance(slots, dict) else ():
        if isinstance(slot, dict):
            tensors.update({f"optimizer {k}": v for k, v in slot.items() if k != "step"})
    for name, value in tensors.items():
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
        if shape != (n_groups,):
            given = f"has shape {shape}" if shape is not None else f"is a {type(value).__name__}"
            raise CheckpointError(
                f"the saved priors' {name} {given}, expected a tensor of shape "
                f"({n_groups},), one value per prior group of this model; {STATE_FIX}"
            )
