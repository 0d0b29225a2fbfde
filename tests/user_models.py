"""A small user-defined network of ella's layers, shared by the tests of ``PriorLearner`` and
``ella.fit``."""

from collections import OrderedDict

import torch
from torch import nn

from ella.nn import GroupPool, Lift, RelaxedLayer


def user_model() -> nn.Module:
    """Two relaxed layers between Lift and GroupPool, then an nn.Linear head."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            lift=Lift("C4"),
            layer1=RelaxedLayer(1, 2, 8),
            layer2=RelaxedLayer(2, 2, 8, stride=2),
            pool=GroupPool("C4"),
            gap=nn.AdaptiveAvgPool2d(1),
            flat=nn.Flatten(),
            head=nn.Linear(2, 3),
        )
    )
