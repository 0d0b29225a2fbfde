"""Scripts that reproduce the figures the documentation states. :mod:`benchmarks.common`,
:mod:`benchmarks.runner` and :mod:`benchmarks.ensembles` are the harness they share with
the experiments (``experiments/``)."""
