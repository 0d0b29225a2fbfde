"""The test suite's fixtures (``tests/conftest.py``), for the experiments' tests: every test
starts from torch's seed 0, and ``float64`` runs one in double precision."""

from tests.conftest import _seed, float64

__all__ = ["_seed", "float64"]
