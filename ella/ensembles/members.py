"""M models as one module: vectorised over members with ``torch.func``, or a loop.

A deep ensemble's members share an architecture but not their weights. With
``vectorize=True`` the members' parameters are stacked into tensors with a
leading member axis (``torch.func.stack_module_state``) and one
``vmap(functional_call)`` runs all members at once; with ``vectorize=False``
the members are kept as a ``ModuleList`` and run one after the other. Both
modes compute the same function and the same gradients (the tests check it);
the loop is the fallback for modules ``vmap`` cannot batch (e.g. with
data-dependent Python control flow or in-place buffer updates).

Checkpoints hold :meth:`Ensemble.member_state_dicts`, the same for both modes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

__all__ = ["Ensemble", "init_members"]


def init_members(model_fn: Callable[[], nn.Module], seeds: Sequence[int]) -> list[nn.Module]:
    """Build one member per seed: ``torch.manual_seed(seed); model_fn()``.

    The RNG state is restored afterwards, so building members does not change
    what the caller draws next.
    """
    if not seeds:
        raise ValueError("an ensemble needs at least one member")
    state = torch.random.get_rng_state()
    try:
        members = []
        for seed in seeds:
            torch.manual_seed(int(seed))
            members.append(model_fn())
    finally:
        torch.random.set_rng_state(state)
    return members


class Ensemble(nn.Module):
    """An ensemble of same-architecture members.

    Args:
        members: the initialised members (same parameter names and shapes).
        vectorize: run the members with ``vmap`` (True) or in a loop (False).

    Calling the ensemble on images (B, ...) gives logits (M, B, K); on
    per-member inputs (M, B, ...) with ``per_member=True``, member ``i`` sees
    ``x[i]`` (used for per-member input gradients).
    """

    def __init__(self, members: Sequence[nn.Module], vectorize: bool = True):
        super().__init__()
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one member")
        names = [tuple(n for n, _ in m.named_parameters()) for m in members]
        shapes = [tuple(p.shape for p in m.parameters()) for m in members]
        if len(set(names)) != 1 or len(set(shapes)) != 1:
            raise ValueError("ensemble members must have the same parameter names and shapes")
        self.size = len(members)
        self.vectorized = bool(vectorize)
        if self.vectorized:
            params, buffers = stack_module_state(members)
            self._param_names = list(params)
            self._buffer_names = list(buffers)
            self.stacked_params = nn.ParameterList(
                [nn.Parameter(params[n].detach().clone()) for n in self._param_names]
            )
            for i, n in enumerate(self._buffer_names):
                self.register_buffer(f"stacked_buffer_{i}", buffers[n].clone())
            # the architecture, called functionally; kept out of the module tree
            self.__dict__["_template"] = copy.deepcopy(members[0])
        else:
            self.members = nn.ModuleList(members)

    def __len__(self) -> int:
        return self.size

    @property
    def template(self) -> nn.Module:
        """A module with the members' architecture (vectorised: member 0's initial weights)."""
        return self.__dict__["_template"] if self.vectorized else self.members[0]

    def _stacked(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        params = dict(zip(self._param_names, self.stacked_params, strict=True))
        buffers = {
            n: getattr(self, f"stacked_buffer_{i}") for i, n in enumerate(self._buffer_names)
        }
        return params, buffers

    def forward(self, x: torch.Tensor, per_member: bool = False) -> torch.Tensor:
        """Member outputs.

        Args:
            x: inputs (B, ...) shared by all members, or (M, B, ...) with ``per_member``.
            per_member: whether ``x`` has a leading member axis.

        Returns:
            (M, B, K) outputs of every member.
        """
        if per_member and x.shape[0] != self.size:
            raise ValueError(
                f"per-member inputs need a leading axis of size {self.size}, got {tuple(x.shape)}"
            )
        if self.vectorized:
            template = self.template
            template.train(self.training)

            def call(p, b, xi):
                return functional_call(template, (p, b), (xi,))

            params, buffers = self._stacked()
            return vmap(call, in_dims=(0, 0, 0 if per_member else None))(params, buffers, x)
        return torch.stack([m(x[i] if per_member else x) for i, m in enumerate(self.members)])

    def flat_parameters(self) -> torch.Tensor:
        """All members' parameters as one (M, P) tensor (differentiable)."""
        if self.vectorized:
            return torch.cat([p.reshape(self.size, -1) for p in self.stacked_params], dim=1)
        return torch.stack(
            [torch.cat([p.reshape(-1) for p in m.parameters()]) for m in self.members]
        )

    def member_state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """One ``state_dict`` per member (detached copies), the same in both modes."""
        if not self.vectorized:
            return [
                {k: v.detach().clone() for k, v in m.state_dict().items()} for m in self.members
            ]
        params, buffers = self._stacked()
        keys = list(self.template.state_dict())
        out = []
        for i in range(self.size):
            values = {n: t[i].detach().clone() for n, t in {**params, **buffers}.items()}
            out.append({k: values[k] for k in keys if k in values})
        return out

    @torch.no_grad()
    def load_member_state_dicts(self, states: Sequence[dict[str, torch.Tensor]]) -> None:
        """Load what :meth:`member_state_dicts` returned (from either mode)."""
        if len(states) != self.size:
            raise ValueError(f"expected {self.size} member states, got {len(states)}")
        if not self.vectorized:
            for m, s in zip(self.members, states, strict=True):
                m.load_state_dict(s)
            return
        for p, n in zip(self.stacked_params, self._param_names, strict=True):
            p.copy_(torch.stack([s[n] for s in states]))
        for i, n in enumerate(self._buffer_names):
            getattr(self, f"stacked_buffer_{i}").copy_(torch.stack([s[n] for s in states]))

    def subset(self, count: int) -> Ensemble:
        """A new ensemble of the first ``count`` members (copies; same mode)."""
        if not 1 <= count <= self.size:
            raise ValueError(f"subset size must be in 1..{self.size}, got {count}")
        members = [self.member(i) for i in range(count)]
        return Ensemble(members, vectorize=self.vectorized).to(next(self.parameters()).device)

    def member(self, i: int) -> nn.Module:
        """A standalone copy of member ``i`` (an ordinary module with its weights)."""
        if not 0 <= i < self.size:
            raise IndexError(f"member {i} of an ensemble of {self.size}")
        module = copy.deepcopy(self.template)
        module.load_state_dict(self.member_state_dicts()[i], strict=False)
        return module
