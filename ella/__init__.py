"""ella: learn which symmetries each layer of a network should have.

Subpackages:
    ella.groups   finite groups acting on images and lifted tensors
    ella.nn       relaxed layers with FC, CONV and GCONV paths
    ella.models   ready networks (``ella.models.mixer``)
    ella.testing  ``assert_equivariant`` and friends
"""

__version__ = "0.1.0"
