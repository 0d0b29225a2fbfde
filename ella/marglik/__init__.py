"""Marginal likelihood of layer-wise priors: prior structures, Laplace evidence, reports."""

# ruff: noqa: E402 (laplace-torch is imported once, guarded, before the modules that use it)
from ella.runtime.dependencies import import_laplace

import_laplace()  # a torchvision of another torch build: one line that names the fix

from ella.choices import Backend, HessianStructure
from ella.marglik.effective import (
    aggregate,
    effective_parameters,
    relative_effective,
    switched_off_paths,
)
from ella.marglik.evidence import LaplaceEvidence
from ella.marglik.kept import kept_log_evidence, tensor_terms
from ella.marglik.kron_terms import KronEvidenceTerms
from ella.marglik.null import class_frequency_model
from ella.marglik.per_channel import PerChannelFCPath, PerChannelView
from ella.marglik.predictive import glm_log_likelihood
from ella.marglik.priors import PriorMode, PriorStructure
from ella.marglik.response import laplace_response
from ella.marglik.support import UnsupportedModuleError, check_supported

__all__ = [
    "Backend",
    "HessianStructure",
    "KronEvidenceTerms",
    "LaplaceEvidence",
    "PerChannelFCPath",
    "PerChannelView",
    "PriorMode",
    "PriorStructure",
    "UnsupportedModuleError",
    "aggregate",
    "check_supported",
    "class_frequency_model",
    "effective_parameters",
    "glm_log_likelihood",
    "kept_log_evidence",
    "laplace_response",
    "relative_effective",
    "switched_off_paths",
    "tensor_terms",
]
