"""The run machinery under ``ella train``, :func:`ella.fit` and ``ella ensemble``.

* :mod:`ella.engine.epochs`: the epoch loop (run directory, resume, checkpoints, the
  per-epoch random streams, divergence checks, the progress bar);
* :mod:`ella.engine.schedule`: the optimiser, its rates and the evidence schedule's
  options;
* :mod:`ella.engine.recipe`: the evidence recipe, each default of the rounds stated once;
* :mod:`ella.engine.health`: a training run's collapse, measured from its metrics.

It sits below :mod:`ella.train` and :mod:`ella.ensembles`, which both build on it, and
imports neither.
"""
