"""``ella train`` gives the results it gave before the run engine was refactored.

``data/reference_runs.json`` holds the metrics of three small runs (a learned-prior
mixer with the exact GGN, a mixer with subset evidence and the MC GGN, and a MAP
MLP), written at commit a7a1f40, before the training loop moved onto ``PriorLearner``
and ``ella.engine.epochs``, by the script that is now ``tests/train/reference_runs.py``::

    git worktree add /tmp/ref a7a1f40
    PYTHONPATH=/tmp/ref .venv/bin/python tests/train/reference_runs.py --write

The test reruns the same configurations with today's code, each in a child process on
one thread with MKL's kernels capped at AVX2 (``PINNED_ENV``; the references were written
so). The cap makes a run independent of which x86 processor runs it: with MKL's AVX-512
kernels, which it picks by itself on a processor that has them, the evidence of a small
rotated run moves by 1.4% (ulp-level differences in a matrix product, amplified by the log
determinant of nearly singular curvature factors), and with the cap the results are
bit-identical to the stored ones on such a processor. The tolerance, relative 5e-3
(``REL_TOL``), leaves room for other floating-point kernels (another BLAS, another
architecture): without the cap, the code of commit 2678eec differed from the
reference by up to 1.4e-3 (the learned mixer's layer-8 FC prior precision after three
rounds; 5.4e-4 with subset evidence, 6e-6 for the MLP). It is far below what a changed
seed or learning rate moves: ``lr`` 1.05e-3 instead of 1e-3 moves 89 of the learned
mixer's 208 numbers by more than 5e-3 (up to 100%), 58 of 147 with subset evidence and
10 of the MLP's 16; seed 1 instead of 0 moves 180 of 208.

The cases, ``PINNED_ENV``, ``REL_TOL`` and the reruns are in ``tests/train/reference_runs.py``.
"""

from __future__ import annotations

import pytest

from tests.train.reference_runs import CASES, PINNED, REFERENCE, assert_reproduces


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_train_results_equal_the_stored_reference(name, session_folder):
    batch = [{**PINNED, **CASES[n]} for n in sorted(CASES)]
    assert_reproduces(
        REFERENCE, name, CASES[name], {**PINNED, **CASES[name]}, batch, session_folder
    )
