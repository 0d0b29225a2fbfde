"""Learned input invariance by marginal likelihood (van der Ouderaa & van der Wilk, UAI 2022;
Immer et al., LILA, NeurIPS 2022).

* :mod:`~ella.invariance.affine`: the six affine generators and ``expm`` transforms;
* :class:`InvariantClassifier`: ``f(x) = E_T[g(T x)]`` around any classifier;
* :mod:`~ella.invariance.kfac`: Kronecker factors with the graph kept, so the
  evidence has a gradient with respect to the extents ``eta``;
* :class:`InvarianceEvidence`: the differentiable Laplace log evidence.
"""

from ella.invariance.affine import (
    GENERATORS,
    affine_matrices,
    eta_as_dict,
    generator_matrices,
    transform_images,
)
from ella.invariance.evidence import InvarianceEvidence
from ella.invariance.model import InvariantClassifier

__all__ = [
    "GENERATORS",
    "InvarianceEvidence",
    "InvariantClassifier",
    "affine_matrices",
    "eta_as_dict",
    "generator_matrices",
    "transform_images",
]
