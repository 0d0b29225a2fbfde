"""``ella train`` with training-time augmentation gives the results it gave when every batch
was augmented on the CPU, image by image, and moved to the device.

``data/augmented_runs.json`` holds the metrics and results of small runs, one per
augmentation, written by this module run as a script before the training data moved to
the device and the augmentations ran batched there::

    PYTHONPATH=. .venv/bin/python tests/train/test_augmented_runs.py --write

(the stored file was written at commit 03ba083, with that commit's ``ella`` first on the path
and this module and the reruns, then in ``tests/train/test_reference_runs.py``, from the tree
that added them).

The runs use ``ella train``'s defaults (subset evidence with the training passes' control
variate, whose traces the epoch records) on a one-channel mixer; the tolerance is the one
of :mod:`tests.train.reference_runs`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.train.reference_runs import assert_reproduces, write_reference

REFERENCE = Path(__file__).with_name("data") / "augmented_runs.json"
#: one small run of ella train's defaults; each case sets its augmentation
BASE: dict[str, object] = dict(
    train_size=64, test_size=32, epochs=2, batch_size=32, width=1, n_epochs_burnin=1,
    marglik_frequency=1, marglik_subset_size=32, progress=False,
)  # fmt: skip
CASES: dict[str, dict] = {kind: {**BASE, "augment": kind} for kind in ("c4", "rotate", "translate")}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_augmented_results_equal_the_stored_reference(name, session_folder):
    batch = [CASES[n] for n in sorted(CASES)]
    assert_reproduces(REFERENCE, name, CASES[name], CASES[name], batch, session_folder)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write_reference(REFERENCE, CASES)
