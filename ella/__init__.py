"""ella: learn which symmetries each layer of a network should have.

Subpackages:
    ella.groups   finite groups acting on images and lifted tensors
    ella.nn       relaxed layers with FC, CONV and GCONV paths
    ella.models   ready networks (``ella.models.mixer``)
    ella.testing  ``assert_equivariant`` and friends
    ella.marglik  the Laplace evidence of layer-wise priors
    ella.learner  ``PriorLearner``: learned priors in your own training loop
"""

__version__ = "0.1.0"
__all__ = ["PriorLearner"]


def __getattr__(name: str):
    if name == "PriorLearner":  # imported on first use: ``import ella`` stays light
        from ella.learner import PriorLearner

        return PriorLearner
    raise AttributeError(f"module 'ella' has no attribute {name!r}")
