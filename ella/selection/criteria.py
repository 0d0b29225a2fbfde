"""How a selection scores a candidate network: the criteria, registered by name.

A candidate is trained, then its GGN is fitted exactly on all training images
(:class:`Candidate`). A criterion turns that into the number a round maximises, stored in
the candidate's row under the criterion's :attr:`Criterion.key`. Every row also keeps the
Laplace log evidence of the tensors it keeps (``log_evidence``), its training log
likelihood and its shares, which the collapse rule and the answers read whatever decides.

``"evidence"`` (the default) is :func:`ella.marglik.kept_log_evidence` at the
evidence-optimal precisions (MacKay, Neural Computation 1992). A criterion of one's own is
a :class:`Criterion` passed to :func:`register_criterion`; ``ella select --criterion NAME``
and ``ella.select(..., criterion=NAME)`` then use it, and its records name it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ella.errors import ConfigError
from ella.marglik import LaplaceEvidence

__all__ = [
    "CRITERIA",
    "DEFAULT_CRITERION",
    "Candidate",
    "Criterion",
    "criterion_of",
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
    """

    net: nn.Module
    evidence: LaplaceEvidence
    optimum: torch.Tensor
    dropped: list[bool]
    log_evidence: float
    train_data: Any
    config: Any
    validation: Any = None


@dataclass(frozen=True)
class Criterion:
    """A score that a selection round maximises.

    Attributes:
        name: the registry key (``ella select --criterion NAME``).
        key: the row field the score is stored in and compared by (higher is better).
        label: the score's column heading in the tables (``"log evidence"``).
        score: ``score(candidate) -> {key: value, ...}``: the row fields it adds.
    """

    name: str
    key: str
    label: str
    score: Callable[[Candidate], dict[str, float]]


def _evidence(candidate: Candidate) -> dict[str, float]:
    return {"log_evidence": candidate.log_evidence}


#: the criterion of every selection that names none
DEFAULT_CRITERION = "evidence"
#: the criteria by name
CRITERIA: dict[str, Criterion] = {
    DEFAULT_CRITERION: Criterion(DEFAULT_CRITERION, "log_evidence", "log evidence", _evidence)
}


def register_criterion(criterion: Criterion) -> Criterion:
    """Add ``criterion`` to :data:`CRITERIA` (a name taken is refused); returns it."""
    if criterion.name in CRITERIA:
        raise ConfigError(f"a selection criterion named {criterion.name!r} exists already")
    CRITERIA[criterion.name] = criterion
    return criterion


def criterion_of(name: str | None, option: str = "criterion") -> Criterion:
    """The registered criterion ``name`` (``None``: the default); an unknown name is
    refused naming ``option`` and the choices."""
    name = DEFAULT_CRITERION if name is None else name
    if name not in CRITERIA:
        raise ConfigError(f"{option} must be one of {', '.join(sorted(CRITERIA))}; got {name!r}")
    return CRITERIA[name]
