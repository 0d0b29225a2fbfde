"""Where the original data files are, for the tests that need them: ``../shared/data``
beside the checkout (a test that needs it skips where it is absent)."""

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
