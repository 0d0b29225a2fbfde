"""Scripts that reproduce the figures the documentation states. What they share with the
experiments (``experiments/``) is :mod:`studies`; :mod:`benchmarks.runner` is what they
alone share."""
