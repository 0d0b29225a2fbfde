"""The evidence's view of a network: each FC stage's maps as one ``nn.Linear`` per channel.

An :class:`~ella.nn.FCPath` holds each stage's ``K`` maps in one tensor
(:class:`~ella.nn.batched.BatchedLinear`), while its KFAC approximation has one
Kronecker block per map. laplace-torch's ``KronLaplace``, which holds the factors of
every backend, keeps one block per parameter tensor in ``model.parameters()`` order, and
the stock backends (ASDL, Curvlinops) hook ``nn.Linear`` calls. :class:`PerChannelView`
presents a network as they need it: a copy whose factorised FC paths are
:class:`PerChannelFCPath` (one ``nn.Linear`` per channel, whose weights are views of one
buffer per stage, refreshed from the stacked tensors by :meth:`PerChannelView.sync`)
and whose other modules hold the original's parameters and buffers themselves.

The view's tensors are those of the per-channel layout: ``pixel_maps.<i>.weight``
(C_o R, S_in) for input channel ``i``, then ``channel_maps.<o>.weight`` (S_out, C_i R)
and ``channel_maps.<o>.bias`` (S_out) for output channel ``o``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ella.choices import FCMode
from ella.marglik.priors import PriorStructure
from ella.nn.paths import FCPath, Path, by_output, contiguous_grad

__all__ = ["PerChannelFCPath", "PerChannelView"]


def _views_as_linears(
    buffer: torch.Tensor, bias: torch.Tensor | None, requires_grad: bool
) -> nn.ModuleList:
    """One ``nn.Linear`` per slice ``k`` of ``buffer`` (K, out, in), whose weight (and bias,
    slice ``k`` of ``bias`` (K, out)) are views of the buffers, not copies."""
    maps = nn.ModuleList()
    for k in range(buffer.shape[0]):
        linear = nn.Linear.__new__(nn.Linear)  # no fresh weights drawn only to be replaced
        nn.Module.__init__(linear)
        linear.in_features, linear.out_features = buffer.shape[2], buffer.shape[1]
        linear.weight = nn.Parameter(buffer[k], requires_grad=requires_grad)
        b = None if bias is None else nn.Parameter(bias[k], requires_grad=requires_grad)
        linear.register_parameter("bias", b)
        maps.append(linear)
    return maps


class PerChannelFCPath(Path):
    """A factorised :class:`~ella.nn.FCPath` as ``C_i`` pixel maps and ``C_o`` channel maps,
    each an ``nn.Linear``, with the same outputs.

    The forward runs the two stages as ``bmm`` over the maps' stacked weights, or, inside
    :func:`~ella.nn.per_module_calls`, as one call per map (for backends that hook module
    calls). ``_capture``, when a dict, receives the stages' tensors for the native
    Kronecker factors (:class:`ella.marglik.native.NativeGGN`): ``x`` (C_i, B, S_in),
    ``stage1`` (C_i, B, C_o R), ``mixed`` (C_o, B, C_i R) and ``out`` (C_o, B, S_out).

    Args:
        path: the stacked path it stands for (its weights are read by :meth:`copy_from`).
    """

    kind = FCPath.kind
    fan_in_rate = FCPath.fan_in_rate

    def __init__(self, path: FCPath):
        super().__init__(path.in_channels, path.out_channels, path.in_size, path.group, path.stride)
        if path.mode != FCMode.FACTORIZED:
            raise ValueError("only a factorised FCPath has per-channel maps")
        self.mode, self.rank = path.mode, path.rank
        pixel, channel = path.pixel_maps, path.channel_maps
        self._pixel = torch.empty_like(pixel.weight, requires_grad=False)
        self._channel = torch.empty_like(channel.weight, requires_grad=False)
        self._bias = torch.empty_like(channel.bias, requires_grad=False)
        self.pixel_maps = _views_as_linears(self._pixel, None, pixel.weight.requires_grad)
        self.channel_maps = _views_as_linears(
            self._channel, self._bias, channel.weight.requires_grad
        )
        self._capture: dict[str, torch.Tensor] | None = None
        self.copy_from(path)

    @torch.no_grad()
    def copy_from(self, path: FCPath) -> None:
        """Take the stacked path's current weights (three copies)."""
        self._pixel.copy_(path.pixel_maps.weight)
        self._channel.copy_(path.channel_maps.weight)
        self._bias.copy_(path.channel_maps.bias)

    @torch.no_grad()
    def copy_to(self, path: FCPath) -> None:
        """Write the per-channel maps' weights into the stacked path (:meth:`copy_from`'s
        inverse)."""
        path.pixel_maps.weight.copy_(self._pixel)
        path.channel_maps.weight.copy_(self._channel)
        path.channel_maps.bias.copy_(self._bias)

    def stacked_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``U`` (C_i, C_o R, S_in), ``V`` (C_o, S_out, C_i R) and the bias (C_o, S_out),
        differentiable in the per-channel modules' parameters."""
        u = torch.stack([m.weight for m in self.pixel_maps])
        v = torch.stack([m.weight for m in self.channel_maps])
        bias = torch.stack([m.bias for m in self.channel_maps])
        return u, v, bias

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, G, C_out, H / stride, W / stride) outputs of (B, G, C_in, H, W) inputs, the
        stacked path's: each stage as one ``bmm``, or one call per map inside
        :func:`~ella.nn.per_module_calls`."""
        self.check_input(z)
        b, g, c, h, w = z.shape
        rows = z.reshape(b, g * c, h * w).transpose(0, 1)  # (C_i, B, S_in)
        if self.module_calls:  # one module call per channel, as hooking backends need
            stage1 = torch.stack([m(rows[i]) for i, m in enumerate(self.pixel_maps)])
            mixed = by_output(stage1, self.rank)
            out = torch.stack([m(mixed[o]) for o, m in enumerate(self.channel_maps)])
        else:
            u, v, bias = (contiguous_grad(t) for t in self.stacked_weights())
            rows = rows.contiguous()
            stage1 = torch.bmm(rows, u.transpose(1, 2))  # (C_i, B, C_o R)
            mixed = by_output(contiguous_grad(stage1), self.rank)  # (C_o, B, C_i R)
            out = torch.baddbmm(bias[:, None], mixed, v.transpose(1, 2))  # (C_o, B, S_out)
            if self._capture is not None:
                self._capture.update(x=rows, stage1=stage1, mixed=mixed, out=out)
            out = contiguous_grad(out)
        return out.transpose(0, 1).reshape(b, g, self.out_channels, *self.out_size)

    def extra_repr(self) -> str:
        """:meth:`~ella.nn.paths.Path.extra_repr`, marked per-channel, with a rank other than 1."""
        rank = f", rank={self.rank}" if self.rank != 1 else ""
        return f"{super().extra_repr()}, per-channel{rank}"


def _factorised_fc_paths(model: nn.Module) -> list[FCPath]:
    return [m for m in model.modules() if isinstance(m, FCPath) and m.mode == FCMode.FACTORIZED]


class PerChannelView:
    """A network as the evidence sees it: its factorised FC paths as per-channel
    ``nn.Linear`` modules (:class:`PerChannelFCPath`), everything else the network's own.

    Without a factorised FC path, :attr:`network` is ``model`` itself.

    Args:
        model: the network (its parameters are read; only :meth:`write_back` writes them).

    Attributes:
        network: the view; its parameters other than the FC paths' are ``model``'s own
            tensors, its FC maps are refreshed by :meth:`sync`.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        fc = _factorised_fc_paths(model)
        self._pairs: list[tuple[FCPath, PerChannelFCPath]] = []
        if not fc:
            self.network = model
            self._modes: list[tuple[nn.Module, nn.Module]] = []
            return
        memo: dict[int, object] = {id(t): t for t in model.parameters()}
        memo.update((id(t), t) for t in model.buffers())
        for path in fc:
            twin = PerChannelFCPath(path)
            memo[id(path)] = twin
            self._pairs.append((path, twin))
        self.network = copy.deepcopy(model, memo)
        names = dict(self.network.named_modules())
        self._modes = [
            (m, names[name])
            for name, m in model.named_modules()
            if name in names and not isinstance(names[name], PerChannelFCPath)
        ]

    def sync(self) -> nn.Module:
        """Copy the FC paths' current weights and every module's train/eval mode into
        :attr:`network`; returns it."""
        for path, twin in self._pairs:
            twin.copy_from(path)
            twin.train(path.training)
        for source, module in self._modes:
            module.training = source.training
        return self.network

    def write_back(self) -> None:
        """Copy the FC paths' per-channel weights of :attr:`network` into ``model``'s
        stacked tensors (after something moved the view's weights in place); the view's
        other parameters are ``model``'s own."""
        for path, twin in self._pairs:
            twin.copy_to(path)

    def vector(self, values: torch.Tensor) -> torch.Tensor:
        """A vector over ``model``'s trainable parameters, (n_params,) in
        ``model.parameters()`` order, in the order of :attr:`network`'s."""
        if not self._pairs:
            return values
        params = [p for p in self.model.parameters() if p.requires_grad]
        if values.shape != (sum(p.numel() for p in params),):
            raise ValueError(
                f"expected a vector over the {len(params)} trainable tensors "
                f"({sum(p.numel() for p in params)} values), got shape {tuple(values.shape)}"
            )
        sizes = [p.numel() for p in params]
        parts = {id(p): v.view_as(p) for v, p in zip(values.split(sizes), params, strict=True)}
        for path, _ in self._pairs:  # the per-channel order of each path's tensors
            if path.channel_maps.weight.requires_grad:
                weight, bias = id(path.channel_maps.weight), id(path.channel_maps.bias)
                v, b = parts[weight], parts[bias]  # (C_o, S_out, C_i R), (C_o, S_out)
                parts[weight] = torch.cat([v.flatten(1), b], dim=1)  # map o's weight, bias
                parts[bias] = b.new_zeros(0)
        ordered = [parts[id(p)].flatten() for p in params]
        return torch.cat(ordered)

    def prior(self, prior: PriorStructure) -> PriorStructure:
        """``prior`` (over ``model``'s tensors) over :attr:`network`'s tensors: each
        per-channel map in the group of the stacked tensor it is a slice of."""
        if not self._pairs:
            return prior
        view = PriorStructure(self.network, prior.mode)
        if prior.param_names == view.param_names:  # over the view already
            return prior
        group_of = dict(zip(prior.param_names, prior.tensor_groups, strict=True))
        stacked = {}  # the view's tensor name -> the model's tensor name
        fc_names = {id(path): name for name, path in self.model.named_modules()}
        for path, _ in self._pairs:
            base = fc_names[id(path)]
            for k in range(path.pixel_maps.channels):
                stacked[f"{base}.pixel_maps.{k}.weight"] = f"{base}.pixel_maps.weight"
            for k in range(path.channel_maps.channels):
                stacked[f"{base}.channel_maps.{k}.weight"] = f"{base}.channel_maps.weight"
                stacked[f"{base}.channel_maps.{k}.bias"] = f"{base}.channel_maps.bias"
        groups = [group_of[stacked.get(name, name)] for name in view.param_names]
        return view.regrouped(groups, prior.names)
