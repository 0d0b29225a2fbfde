"""How a selection scores a candidate network: the criteria, registered by name.

A candidate is trained, then its GGN is fitted exactly on all training images
(:class:`Candidate`). A criterion turns that into the number a round maximises, stored in
the candidate's row under the criterion's :attr:`Criterion.key`. Every row also keeps the
Laplace log evidence of the tensors it keeps (``log_evidence``), its training log
likelihood and its shares, which the collapse rule and the answers read whatever decides.

``"evidence"`` is :func:`ella.marglik.kept_log_evidence` at the evidence-optimal
precisions (MacKay, Neural Computation 1992); ``"validation"`` the log likelihood of the
run's held-out images (``ella train --validation-size V``);
``"training_speed"`` minus the training NLL summed over the candidate's epochs. A criterion
of one's own is a :class:`Criterion` passed to :func:`register_criterion`;
``ella select --criterion NAME`` and ``ella.select(..., criterion=NAME)`` then use it, and
its records name it.

A selection that names no criterion is scored by :func:`default_criterion`: the held-out
likelihood where the run holds images out, the evidence otherwise: no criterion of the
training images alone separated data with and without a symmetry as surely as the
held-out likelihood did (the guide's defaults table gives the record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence

__all__ = [
    "CRITERIA",
    "DEFAULT_CRITERION",
    "HELD_OUT_CRITERION",
    "Candidate",
    "Criterion",
    "check_validation",
    "criterion_of",
    "default_criterion",
    "register_criterion",
]


@dataclass
class Candidate:
    """A trained candidate, as a criterion sees it.

    Attributes:
        net: the trained network (its dropped tensors at zero).
        evidence: its Kronecker evidence, exact GGN on all training images.
        optimum: the evidence-optimal log precisions (n_groups,).
        dropped: per tensor of ``evidence.view.network``, whether it is held at zero.
        log_evidence: the evidence of the tensors it keeps, at ``optimum``.
        train_data: the training images it was trained and fitted on.
        config: the recipe it was trained with.
        validation: the run's held-out images (``--validation-size``), or None.
        train_nll: the mean training NLL of each epoch of its training on.
    """

    net: nn.Module
    evidence: LaplaceEvidence
    optimum: torch.Tensor
    dropped: list[bool]
    log_evidence: float
    train_data: Any
    config: Any
    validation: Any = None
    train_nll: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Criterion:
    """A score that a selection round maximises.

    Attributes:
        name: the registry key (``ella select --criterion NAME``).
        key: the row field the score is stored in and compared by (higher is better).
        label: the score's column heading in the tables (``"log evidence"``).
        score: ``score(candidate) -> {key: value, ...}``: the row fields it adds.
        needs_validation: whether it reads the run's held-out images (a run of
            ``ella train --validation-size V``; refused before any work otherwise).
    """

    name: str
    key: str
    label: str
    score: Callable[[Candidate], dict[str, float]]
    needs_validation: bool = False


def _evidence(candidate: Candidate) -> dict[str, float]:
    return {"log_evidence": candidate.log_evidence}


@torch.no_grad()
def _validation(candidate: Candidate, batch_size: int = 500) -> dict[str, float]:
    """The candidate's log likelihood of the run's held-out images, summed (the plain
    predictive at its weights)."""
    x, y = candidate.validation.tensors
    net, total = candidate.net.eval(), 0.0
    for start in range(0, len(x), batch_size):
        logits = net(x[start : start + batch_size])
        total -= float(F.cross_entropy(logits, y[start : start + batch_size], reduction="sum"))
    return {"validation_log_likelihood": total}


#: the criterion of a record that names none, and of a selection on a run without held-out
#: images (:func:`default_criterion`)
DEFAULT_CRITERION = "evidence"

#: the criterion of a selection that names none, on a run with held-out images
HELD_OUT_CRITERION = "validation"


def default_criterion(validation_size: int) -> str:
    """The criterion of a selection that names none: :data:`HELD_OUT_CRITERION` where the
    run holds ``validation_size > 0`` images out, else :data:`DEFAULT_CRITERION`."""
    return HELD_OUT_CRITERION if validation_size else DEFAULT_CRITERION


#: the criteria by name
def _training_speed(candidate: Candidate) -> dict[str, float]:
    r"""Training speed as an estimate of the marginal likelihood (Lyle, Schut, Ru, Gal & van
    der Wilk, NeurIPS 2020): minus the training NLL summed over the candidate's epochs of
    training on, :math:`-N \sum_e \bar\ell_e`, the network that fits faster scoring higher."""
    return {"training_speed": -len(candidate.train_data) * sum(candidate.train_nll)}


CRITERIA: dict[str, Criterion] = {
    DEFAULT_CRITERION: Criterion(DEFAULT_CRITERION, "log_evidence", "log evidence", _evidence),
    HELD_OUT_CRITERION: Criterion(
        HELD_OUT_CRITERION, "validation_log_likelihood", "val log lik", _validation, True
    ),
    "training_speed": Criterion("training_speed", "training_speed", "train speed", _training_speed),
}


def register_criterion(criterion: Criterion) -> Criterion:
    """Add ``criterion`` to :data:`CRITERIA` (a name taken is refused); returns it."""
    if criterion.name in CRITERIA:
        raise ConfigError(f"a selection criterion named {criterion.name!r} exists already")
    CRITERIA[criterion.name] = criterion
    return criterion


def check_validation(criterion: Criterion, validation_size: int, where: str) -> None:
    """Refuse, before any work, a criterion that reads held-out images where ``where`` (a
    run directory, or a model of ``ella.fit``) holds none."""
    if criterion.needs_validation and not validation_size:
        raise ConfigError(
            f"the criterion {criterion.name!r} scores each candidate on the run's held-out "
            f"images, and {where} holds none: train it with a validation split (ella train "
            "--validation-size V; TrainConfig(validation_size=V)), or choose another criterion"
        )


def criterion_of(name: str | None, option: str = "criterion") -> Criterion:
    """The registered criterion ``name`` (``None``: the default); an unknown name is
    refused naming ``option`` and the choices."""
    name = DEFAULT_CRITERION if name is None else name
    if name not in CRITERIA:
        raise ConfigError(f"{option} must be one of {', '.join(sorted(CRITERIA))}; got {name!r}")
    return CRITERIA[name]
