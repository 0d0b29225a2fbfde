"""ella: learn which symmetries each layer of a network should have.

Subpackages:
    ella.groups   finite groups acting on images and lifted tensors
    ella.nn       relaxed layers with FC, CONV and GCONV paths
    ella.models   ready networks (``ella.models.mixer``)
    ella.testing  ``assert_equivariant`` and friends
    ella.marglik  the Laplace evidence of layer-wise priors
    ella.learner  ``PriorLearner``: learned priors in your own training loop
    ella.fit      the whole alternating job for your own model and DataLoader
    ella.seed_epoch_order   a hand-written loop's data order, drawn as ella.fit draws it
    ella.select   choose a learned run's paths by the evidence (``ella select``)
"""

__version__ = "0.2.0"
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
