"""Ensembles and symmetry: deep ensembles with data augmentation, and repulsive ensembles.

* :class:`Ensemble`: M members run together (``torch.func.vmap``) or in a loop.
* :class:`EnsembleTrainer`: deep ensembles (Lakshminarayanan et al. 2017) with
  data augmentation by a group's orbit or sampled elements (emergent
  equivariance, Gerken & Kessel, ICML 2024), and the particle methods
  weight-/function-space RDE (D'Angelo & Fortuin, NeurIPS 2021) and FoRDE
  (input-gradient repulsion, Trinh et al., ICLR 2024) as Wasserstein gradient
  descent in the same loop.
* :mod:`ella.ensembles.predict`: mean-probability prediction, accuracy / NLL /
  ECE, corrupted test sets, orbit-same-predictions.
"""

from ella.ensembles.config import HELP, METHODS, EnsembleConfig
from ella.ensembles.kernels import (
    LengthscaleMetric,
    log_kernel_density,
    median_bandwidth,
    repulsion_force,
)
from ella.ensembles.members import Ensemble, init_members
from ella.ensembles.predict import (
    classification_metrics,
    corrupted_metrics,
    ensemble_log_probs,
    evaluate_ensemble,
    expected_calibration_error,
    member_log_probs,
    orbit_member_log_probs,
    orbit_metrics,
    orbit_summary,
)
from ella.ensembles.report import format_results
from ella.ensembles.trainer import (
    EnsembleTrainer,
    augment_with_group,
    member_features,
    train_ensemble,
)

__all__ = [
    "format_results",
    "HELP",
    "METHODS",
    "Ensemble",
    "EnsembleConfig",
    "EnsembleTrainer",
    "LengthscaleMetric",
    "augment_with_group",
    "classification_metrics",
    "corrupted_metrics",
    "ensemble_log_probs",
    "evaluate_ensemble",
    "expected_calibration_error",
    "init_members",
    "log_kernel_density",
    "median_bandwidth",
    "member_features",
    "member_log_probs",
    "orbit_member_log_probs",
    "orbit_metrics",
    "orbit_summary",
    "repulsion_force",
    "train_ensemble",
]
