"""ella.marglik.null: the class-frequency model's evidence against its definition."""

import math

import pytest
import torch

from ella.marglik import class_frequency_model


def test_class_frequency_model_is_the_dirichlet_categorical_evidence(float64):
    labels = torch.tensor([0, 2, 2, 1, 2, 0, 2])
    k = 4  # class 3 never seen
    model = class_frequency_model(labels, k)
    counts = [2, 1, 4, 0]
    n = len(labels)
    assert model["log_likelihood"] == pytest.approx(
        sum(c * math.log(c / n) for c in counts if c), rel=1e-12
    )
    # the evidence as a product of predictive probabilities, Laplace's rule of succession
    seen, log_evidence = [0] * k, 0.0
    for i, y in enumerate(labels.tolist()):
        log_evidence += math.log((seen[y] + 1) / (i + k))
        seen[y] += 1
    assert model["log_evidence"] == pytest.approx(log_evidence, rel=1e-12)
