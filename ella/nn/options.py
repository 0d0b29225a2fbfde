"""A relaxed layer's options: one object from a run's configuration to each path's
:meth:`~ella.nn.paths.Path.for_layer`.

:class:`LayerOptions` declares every option a layer passes to its paths, with its
default, once; :class:`~ella.nn.RelaxedLayer`, :class:`~ella.models.Mixer` and
:func:`~ella.models.build_model` hand it on unchanged. A kind of path with an option of
its own declares it in its class (:attr:`~ella.nn.paths.Path.own_options`, name and
default); the layer's keyword, and a configuration's field of that name, then reach the
path through :attr:`LayerOptions.own`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ella.choices import Downsampling, FCMode, GConvMode, Normalisation

__all__ = ["LayerOptions"]


@dataclasses.dataclass(frozen=True)
class LayerOptions:
    """The options every path of a :class:`~ella.nn.RelaxedLayer` may read.

    Attributes:
        kernel_size: odd kernel size of the CONV, GCONV and residual paths. Defaults to 3.
        fc_mode: :class:`~ella.choices.FCMode`, ``"factorized"`` or ``"dense"`` (see
            :class:`~ella.nn.FCPath`). Defaults to ``"factorized"``.
        fc_rank: projections per pair of channels of a factorised FC path
            (:class:`~ella.nn.FCPath`'s ``rank``). Defaults to 1.
        gconv_mode: :class:`~ella.choices.GConvMode`, ``"full"`` or ``"shared"`` (see
            :class:`~ella.nn.GConvPath`). Defaults to ``"full"``.
        downsample: ``"polyphase"`` (exactly shift and group equivariant) or ``"max"``
            (2x2 max; exactly group equivariant, locally shift invariant) in the stride-2
            layers; see :class:`~ella.choices.Downsampling`. Defaults to ``"polyphase"``.
        norm: ``"none"``, or ``"instance"``: before the ReLU, normalise each example's
            channel over (group copies, H, W) to mean 0 and variance 1 (no
            parameters). It commutes with the group's action, so it keeps every
            path's symmetry, and it treats each example on its own, so the
            Kronecker-factored evidence applies unchanged. It also makes the layer's
            function invariant to a common scale ``c`` of its CONV and GCONV
            weights and biases, and the log evidence invariant to that scale
            together with the precisions' ``1/c^2``: the evidence does not fix the
            scale of the layer's priors, and in long runs the precisions grow
            without bound while the weights shrink. Defaults to ``"none"``.
        zero_init: paths that start at zero (:meth:`~ella.nn.paths.Path.start_at_zero`):
            ``("fc",)`` makes the layer begin as its convolutions, which the data can
            then relax. Paths the layer lacks are skipped, a single-path layer keeps
            its start (:func:`~ella.nn.kinds.check_zero_init`), and a mixed layer must
            keep one path. Defaults to none.
        own: the options that kinds of path declare for themselves
            (:attr:`~ella.nn.paths.Path.own_options`), by name; every declared one is
            present, at its default unless given.

    The values are checked where they are used (each path parses its own), so a
    refusal names the option as the layer's keyword.
    """

    kernel_size: int = 3
    fc_mode: FCMode | str = FCMode.FACTORIZED
    fc_rank: int = 1
    gconv_mode: GConvMode | str = GConvMode.FULL
    downsample: Downsampling | str = Downsampling.POLYPHASE
    norm: Normalisation | str = Normalisation.NONE
    zero_init: tuple[str, ...] = ()
    own: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options every layer has (the fields less :attr:`own`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "own")

    @classmethod
    def named(
        cls, values: Mapping[str, Any], declared: Mapping[str, Any], where: str = "RelaxedLayer"
    ) -> LayerOptions:
        """The options ``values`` gives by name, the rest at their defaults.

        Args:
            values: option name -> value, e.g. a layer's keywords.
            declared: the options that kinds of path declare, name -> default
                (:func:`~ella.nn.kinds.declared_options`).
            where: the caller, as a refusal names it.

        Raises:
            TypeError: a name that is neither a layer's option nor declared by a kind.
        """
        _refuse_unknown(values, declared, where)
        common = set(cls.names())
        own = {name: values.get(name, default) for name, default in declared.items()}
        return cls(**{name: v for name, v in values.items() if name in common}, own=own)

    @classmethod
    def of(cls, source: object, declared: Mapping[str, Any]) -> LayerOptions:
        """The options ``source`` holds as attributes of the same names (e.g. a run's
        :class:`~ella.train.TrainConfig`), the rest at their defaults."""
        wanted = (*cls.names(), *declared)
        values = {name: getattr(source, name) for name in wanted if hasattr(source, name)}
        return cls.named(values, declared, where=type(source).__name__)

    @classmethod
    def given(
        cls,
        options: LayerOptions | None,
        values: Mapping[str, Any],
        declared: Mapping[str, Any],
        where: str,
    ) -> LayerOptions:
        """A layer's or a mixer's options from its arguments: ``options`` with ``values``
        changed, or, without ``options``, those ``values`` names (:meth:`named`).

        Raises:
            TypeError: a name of ``values`` that is no option, naming ``where``.
        """
        if options is None:
            return cls.named(values, declared, where)
        return options._changed(values, where) if values else options

    def replace(self, **values: Any) -> LayerOptions:
        """A copy with ``values`` changed (options every layer has, or :attr:`own`'s).

        Raises:
            TypeError: a name that is neither.
        """
        return self._changed(values, "LayerOptions.replace")

    def _changed(self, values: Mapping[str, Any], where: str) -> LayerOptions:
        _refuse_unknown(values, self.own, where)
        own = {name: values.get(name, value) for name, value in self.own.items()}
        common = {name: value for name, value in values.items() if name not in self.own}
        return dataclasses.replace(self, **common, own=own)


def _refuse_unknown(values: Mapping[str, Any], declared: Mapping[str, Any], where: str) -> None:
    """Raise a TypeError naming every name of ``values`` that is neither a layer's option
    nor one of ``declared``, and the names that are."""
    known = {*LayerOptions.names(), *declared}
    if unknown := sorted(set(values) - known):
        raise TypeError(
            f"{where} got unknown option(s) {', '.join(unknown)}; a layer's options are "
            f"{', '.join(sorted(known))} (a kind of path declares its own in Path.own_options)"
        )
