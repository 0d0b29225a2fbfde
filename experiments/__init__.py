"""One-off studies behind the decision records in ``docs/research/``; not part of the package.

Run from the repository root as ``python -m experiments.NAME`` (see ``experiments/README.md``).
"""
