"""The test-case matrix: what the layer, evidence and selection tests run over, in one place.

The kinds of path come from the registry (:data:`ella.nn.kinds.PATH_KINDS`), so a kind
that joins it is covered with no edit here; the evidence backends, Hessian structures
and layer groups come from their choices (:mod:`ella.choices`), a selection's searches and
criteria from their registries (:mod:`ella.selection`). On them: the paths of
each kind (:data:`PATH_CASES`), the networks whose native evidence is checked against
the stock backends (:data:`NETWORKS`) and the fitted evidences of the fast Kronecker
evidence (:data:`EVIDENCE`). ``tests/conftest.py`` serves them as fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella import selection
from ella.choices import Backend, HessianStructure, LayerGroup
from ella.groups import get_group
from ella.marglik import LaplaceEvidence, PriorStructure
from ella.models import mixer
from ella.nn import GConvPath, GroupPool, Lift, RelaxedLayer, ResidualConvPath
from ella.nn.kinds import PATH_KINDS, PATH_NAMES

# ---------------------------------------------------------------- the axes
#: every kind of path, by name, in the order a layer holds them (the registry's)
KINDS: tuple[str, ...] = tuple(PATH_KINDS)
#: the paper's paths, a layer's default
PAPER_PATHS: tuple[str, ...] = PATH_NAMES
#: every curvature backend of the evidence
BACKENDS: tuple[str, ...] = Backend.values()
#: the backends that are not ella's own (the references of the native one)
STOCK_BACKENDS: tuple[str, ...] = tuple(b for b in BACKENDS if b != Backend.NATIVE)
#: every Hessian structure of the evidence
STRUCTURES: tuple[str, ...] = HessianStructure.values()
#: every group a layer lifts to
GROUPS: tuple[str, ...] = LayerGroup.values()
#: the groups with more than the identity: those a symmetry test can fail on
NONTRIVIAL_GROUPS: tuple[str, ...] = tuple(g for g in GROUPS if get_group(g).order > 1)
#: every registered search of a selection (:data:`ella.selection.SEARCHES`)
SEARCHES: tuple[str, ...] = tuple(selection.SEARCHES)
#: every registered criterion a selection scores by (:data:`ella.selection.CRITERIA`)
SELECTION_CRITERIA: tuple[str, ...] = tuple(selection.CRITERIA)

# ---------------------------------------------------------------- paths
#: variants of a kind beyond its defaults: id -> (kind, keyword arguments of its class)
PATH_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "fc dense": ("fc", {"mode": "dense"}),
    "gconv shared": ("gconv", {"mode": "shared"}),
}
#: one path of every kind at its defaults (by the kind's name), then :data:`PATH_VARIANTS`
PATH_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    **{kind: (kind, {}) for kind in KINDS},
    **PATH_VARIANTS,
}
#: the kinds whose path commutes with the group's action on lifted maps; every other kind
#: of the registry is shown not to
GROUP_EQUIVARIANT: tuple[str, ...] = ("gconv",)
#: the kinds whose path commutes with circular translations; every other kind is shown not to
TRANSLATION_EQUIVARIANT: tuple[str, ...] = ("conv", "gconv", "residual")


def make_path(case: str, in_channels: int, out_channels: int, size: int, group: str, **kwargs):
    """The path of :data:`PATH_CASES` ``case`` (its kind's class, with ``kwargs``)."""
    kind, options = PATH_CASES[case]
    return PATH_KINDS[kind](in_channels, out_channels, size, group, **options, **kwargs)


# ---------------------------------------------------------------- networks
class NoHead(nn.Module):
    """Two relaxed layers (the second with stride 2), pooled over the group and space:
    the last parameterised layer is a relaxed layer, not an ``nn.Linear``."""

    def __init__(self, group: str, paths, **kwargs):
        super().__init__()
        self.lift = Lift(group)
        self.layer1 = RelaxedLayer(1, 2, 8, group, paths=paths, **kwargs)
        self.layer2 = RelaxedLayer(2, 5, 8, group, paths=paths, stride=2, **kwargs)
        self.pool = GroupPool(group)

    def forward(self, x):
        z = self.layer2(torch.relu(self.layer1(self.lift(x))))
        return self.pool(z).mean(dim=(-2, -1))


class LoneGConv(nn.Module):
    """A full GCONV (or residual) path used on its own (no relaxed layer) in a user's
    network."""

    def __init__(self, group: str, stride: int = 2, path: type = GConvPath):
        super().__init__()
        self.lift = Lift(group)
        self.gconv = path(1, 3, 8, group, stride=stride)
        self.pool = GroupPool(group)
        self.head = nn.Linear(3, 4)

    def forward(self, x):
        z = torch.relu(self.gconv(self.lift(x)))
        return self.head(self.pool(z).mean(dim=(-2, -1)))


#: networks on 8x8 one-channel images, by id: every kind of path and layer the native
#: evidence handles (``tests/marglik/test_native.py``)
NETWORKS: dict[str, Callable[[], nn.Module]] = {
    "C4 mixed": lambda: mixer(1, 10, 8, "C4", width=1),
    "D4 mixed shared": lambda: mixer(1, 10, 8, "D4", width=1, gconv_mode="shared"),
    "C4 dense fc": lambda: mixer(1, 10, 8, "C4", width=1, fc_mode="dense"),
    "C4 mixed fc rank 2": lambda: mixer(1, 10, 8, "C4", width=1, fc_rank=2),
    "trivial fc only rank 3": lambda: mixer(1, 10, 8, "trivial", paths=("fc",), width=1, fc_rank=3),
    "C4 fc only": lambda: mixer(1, 10, 8, "C4", paths=("fc",), width=1),
    "D4 conv only": lambda: mixer(1, 10, 8, "D4", paths=("conv",), width=1),
    "C4 gconv only": lambda: mixer(1, 10, 8, "C4", paths=("gconv",), width=1),
    "C4 mixed instance norm": lambda: mixer(1, 10, 8, "C4", width=1, norm="instance"),
    "C4 mixed max downsampling": lambda: mixer(
        1, 10, 8, "C4", width=1, norm="instance", downsample="max"
    ),
    "D4 conv+gconv no head max downsampling": lambda: NoHead(
        "D4", ("conv", "gconv"), downsample="max"
    ),
    "D4 fc+gconv no head": lambda: NoHead("D4", ("fc", "gconv")),
    "C4 mixed no head": lambda: NoHead("C4", ("fc", "conv", "gconv")),
    "D4 lone gconv path": lambda: LoneGConv("D4"),
    "C4 gconv+residual": lambda: mixer(1, 10, 8, "C4", paths=("gconv", "residual"), width=1),
    "D4 fc+gconv+residual no head": lambda: NoHead("D4", ("fc", "gconv", "residual")),
    "C4 lone residual path": lambda: LoneGConv("C4", path=ResidualConvPath),
}


# ---------------------------------------------------------------- fitted evidences
def classification_evidence(
    backend: str, structure: str, n_data: int | None = None, centred: bool = False
) -> LaplaceEvidence:
    """A width-1 C4 mixer on 20 random 8x8 images; ``structure`` the prior's;
    ``centred``: the prior's mean is a random vector (as the initial weights of a trained
    network would be)."""
    torch.manual_seed(0)
    model = mixer(1, 10, 8, "C4", width=1)
    x, y = torch.randn(20, 1, 8, 8), torch.randint(10, (20,))
    n_params = sum(p.numel() for p in model.parameters())
    mean = torch.randn(n_params, generator=torch.Generator().manual_seed(1)) if centred else None
    evidence = LaplaceEvidence(
        model, PriorStructure(model, structure), backend=backend, prior_mean=mean
    )
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=8), n_data=n_data)
    return evidence


def regression_evidence() -> LaplaceEvidence:
    """A tanh MLP on 30 noisy points of a sine (two outputs), one prior per tensor."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
    x = torch.randn(30, 3)
    y = torch.sin(x[:, :2]) + 0.1 * torch.randn(30, 2)
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "tensor"), likelihood="regression", sigma_noise=0.3
    )
    evidence.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    return evidence


#: fitted Kronecker evidences, by id (``tests/marglik/test_fast_evidence.py``)
EVIDENCE: dict[str, Callable[[], LaplaceEvidence]] = {
    "native, layer_path": lambda: classification_evidence("native", "layer_path"),
    "native, tensor": lambda: classification_evidence("native", "tensor"),
    "native, scalar": lambda: classification_evidence("native", "scalar"),
    "asdl, layer_path": lambda: classification_evidence("asdl", "layer_path"),
    "native, subset of 20 for N=300": lambda: classification_evidence(
        "native", "layer_path", n_data=300
    ),
    "regression, sigma 0.3": regression_evidence,
    "native, prior centred at a random mean": lambda: classification_evidence(
        "native", "layer_path", centred=True
    ),
}
