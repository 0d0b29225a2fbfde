"""ella: learn which symmetries each layer of a network should have.

At the top level, imported on first use:
    ella.fit               the whole alternating job for your own model and DataLoader
    ella.FitConfig         its options
    ella.PriorLearner      learned priors in your own training loop
    ella.select            which paths the data need, by the evidence (``ella select``)
    ella.seed_epoch_order  a hand-written loop's data order, drawn as ella.fit draws it

Subpackages, from the layers up:
    ella.nn          relaxed layers with FC, CONV, GCONV and residual paths
    ella.models      ready networks (``ella.models.mixer``) and plain baselines
    ella.data        data sets read from their original files, checksums verified
    ella.marglik     the Laplace evidence of layer-wise priors and effective parameters
    ella.invariance  learned input invariance (LILA, Augerino)
    ella.metrics     the symmetry a model has (G-EED, orbit-same-predictions)
    ella.engine      epochs, schedules and health checks shared by every loop
    ella.learner     ``PriorLearner`` and the report of effective parameters
    ella.train       ``ella train``'s loop and :func:`ella.fit`
    ella.ensembles   deep and repulsive ensembles (``ella ensemble``)
    ella.cli         the ``ella`` command, one module per command

Modules: ``groups`` (finite groups acting on images, and affine resampling), ``testing``
(``assert_equivariant``), ``selection`` and ``export`` (choosing and exporting paths),
``options`` (the ``Config`` base, and older configurations in ``options.migrations``),
``choices`` (every choice-valued option), ``io`` and ``rundir`` (atomic files, run
directories), ``schemas``, ``evidence_rules``, ``distributed``, ``runtime`` (the machine,
dependencies, timers) and ``errors``.
"""

__version__ = "0.3.0"
__all__ = ["FitConfig", "PriorLearner", "fit", "seed_epoch_order", "select"]


def __getattr__(name: str):
    """``ella.fit``, ``ella.FitConfig``, ``ella.PriorLearner`` and ``ella.select``, imported on
    first use (``import ella`` stays light)."""
    if name == "PriorLearner":
        from ella.learner import PriorLearner

        return PriorLearner
    if name in ("fit", "FitConfig"):
        from ella.train import fit as fit_module

        return getattr(fit_module, name)
    if name == "seed_epoch_order":
        from ella.train.alternating import seed_epoch_order

        return seed_epoch_order
    if name == "select":
        from ella.selection import select

        return select
    raise AttributeError(f"module 'ella' has no attribute {name!r}")
