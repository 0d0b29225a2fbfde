"""Prior structures: which parameter tensors share a prior precision.

ELLA (van der Ouderaa et al., NeurIPS 2023, Sec. 4) puts a zero-mean Gaussian
prior ``N(0, 1/delta_{l,p})`` on the parameters of path ``p`` of layer ``l``.
A :class:`PriorStructure` maps each *hyperparameter group* (``layer3.gconv``)
to the parameter tensors it covers, and expands the group values into the
per-tensor precision vector that laplace-torch's ``KronLaplace`` expects, in
``model.parameters()`` order, differentiably.

Structures (:class:`PriorMode`):

* ``"layer_path"`` (default): one group per path of every
  :class:`~ella.nn.RelaxedLayer` (``<layer name>.<path>``), and one per other
  module holding parameters (``head.0``: weight and bias together).
* ``"tensor"``: one group per parameter tensor (the reference code's choice).
* ``"scalar"``: a single group ``"all"``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ella.choices import PriorMode
from ella.nn import RelaxedLayer


def _relaxed_layers(model: nn.Module) -> dict[str, RelaxedLayer]:
    return {name: m for name, m in model.named_modules() if isinstance(m, RelaxedLayer)}


def _group_of(param_name: str, layers: dict[str, RelaxedLayer]) -> str:
    """``layer3.paths.gconv.conv.weight`` -> ``layer3.gconv``; ``head.0.bias`` -> ``head.0``."""
    for layer_name, layer in layers.items():
        prefix = f"{layer_name}.paths." if layer_name else "paths."
        if param_name.startswith(prefix):
            path = param_name[len(prefix) :].split(".", 1)[0]
            if path in layer.paths:
                return f"{layer_name}.{path}" if layer_name else path
    owner = param_name.rpartition(".")[0]
    return owner or "model"


class PriorStructure:
    """Groups of parameter tensors sharing one prior precision.

    Args:
        model: the network; its ``named_parameters()`` order is the tensor order.
        mode: ``"layer_path"``, ``"tensor"`` or ``"scalar"``.

    Attributes:
        names: group names, in order of first appearance.
        index: (n_tensors,) long tensor; ``index[t]`` is the group of tensor ``t``.
        param_names: names of the parameter tensors, in ``model.parameters()`` order.
    """

    def __init__(self, model: nn.Module, mode: PriorMode | str = PriorMode.LAYER_PATH):
        self.mode = PriorMode.parse(mode, "prior structure")
        self.param_names = [n for n, p in model.named_parameters() if p.requires_grad]
        if not self.param_names:
            raise ValueError("the model has no trainable parameters")
        self.numels = [p.numel() for p in model.parameters() if p.requires_grad]
        if self.mode == PriorMode.SCALAR:
            groups = ["all"] * len(self.param_names)
        elif self.mode == PriorMode.TENSOR:
            groups = list(self.param_names)
        else:
            layers = _relaxed_layers(model)
            groups = [_group_of(n, layers) for n in self.param_names]
        self._group(groups)

    def _group(self, groups: list[str]) -> None:
        """Set :attr:`names` and :attr:`index` from each tensor's group name."""
        self.names: list[str] = list(dict.fromkeys(groups))
        position = {g: i for i, g in enumerate(self.names)}
        self.index = torch.tensor([position[g] for g in groups], dtype=torch.long)

    def regrouped(self, groups: list[str], names: list[str]) -> PriorStructure:
        """The same tensors in the given groups (one per tensor), whose names in order of
        first appearance must be ``names`` (another structure's groups, checked)."""
        other = copy.copy(self)
        other._group(groups)
        if other.names != list(names):
            raise ValueError(f"the groups {other.names} are not {list(names)}")
        return other

    @property
    def n_groups(self) -> int:
        """The number of prior groups (one precision each)."""
        return len(self.names)

    @property
    def n_tensors(self) -> int:
        """The number of parameter tensors the groups cover."""
        return len(self.param_names)

    @property
    def tensor_groups(self) -> list[str]:
        """The group name of each parameter tensor (n_tensors,)."""
        return [self.names[i] for i in self.index.tolist()]

    def tensors_of(self, group: str) -> list[str]:
        """Names of the parameter tensors in ``group``."""
        pairs = zip(self.param_names, self.tensor_groups, strict=True)
        return [n for n, g in pairs if g == group]

    def expand(self, group_values: torch.Tensor) -> torch.Tensor:
        """Per-tensor values (n_tensors,) from per-group values (n_groups,); differentiable."""
        if group_values.shape != (self.n_groups,):
            raise ValueError(
                f"expected {self.n_groups} group values ({self.mode.value} structure), "
                f"got shape {tuple(group_values.shape)}"
            )
        return group_values[self.index.to(group_values.device)]

    def expand_diagonal(self, group_values: torch.Tensor) -> torch.Tensor:
        """Per-parameter values (n_params,), e.g. for a weight-decay term."""
        per_tensor = self.expand(group_values)
        sizes = torch.tensor(self.numels, device=group_values.device)
        return per_tensor.repeat_interleave(sizes)

    def as_dict(self, group_values: torch.Tensor) -> dict[str, float]:
        """``{group name: value}``."""
        return dict(zip(self.names, group_values.detach().cpu().tolist(), strict=True))

    def __repr__(self) -> str:
        return f"PriorStructure(mode={self.mode.value!r}, groups={self.names})"
