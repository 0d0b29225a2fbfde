"""Which evidence settings go together: each rule stated once, asked by every entry point.

:func:`evidence_problems` names the settings of an evidence fit that cannot go together,
each with the rule's reason and the nearest settings that can. The evidence recipe
(:meth:`ella.engine.recipe.EvidenceRecipe.check`), the configurations of ``ella train`` and
:func:`ella.fit` (:meth:`ella.engine.schedule.ScheduleConfig.check`), the subset rounds of
:class:`~ella.learner.PriorLearner` and :class:`~ella.marglik.LaplaceEvidence` ask it, and
each words the answer in its own names (:meth:`RuleProblem.words`) as Python keywords; the
command line prints the same refusal with its flags (:class:`EvidenceRuleError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ella.choices import GGN, Backend, HessianStructure, Likelihood, PriorUpdate, WeightResponse
from ella.errors import ConfigError

__all__ = [
    "CONFIG_NAMES",
    "EvidenceRuleError",
    "RuleProblem",
    "as_flag",
    "check_evidence_settings",
    "evidence_problems",
    "first_problem",
    "resolved_update",
]

#: how ``ella train``'s and :func:`ella.fit`'s options name the recipe's settings (the
#: others have the recipe's names)
CONFIG_NAMES: Mapping[str, str] = {
    "update": "prior_update",
    "step": "prior_step",
    "response": "weight_response",
    "subset_size": "marglik_subset_size",
}


def resolved_update(update: PriorUpdate | str, hessian: HessianStructure | str) -> PriorUpdate:
    """``update`` with ``auto`` resolved: ``optimum`` with the Kronecker Hessian, which its
    closed form needs, ``adam`` otherwise."""
    update = PriorUpdate.parse(update, "prior update")
    if update != PriorUpdate.AUTO:
        return update
    kron = HessianStructure.parse(hessian, "Hessian structure") == HessianStructure.KRON
    return PriorUpdate.OPTIMUM if kron else PriorUpdate.ADAM


def as_flag(name: str) -> str:
    """A configuration field's command-line flag: ``prior_update`` -> ``--prior-update``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class RuleProblem:
    """Settings that break one rule, why, and the nearest settings that keep it.

    Attributes:
        settings: the settings that break it, by their recipe names
            (:class:`~ella.engine.recipe.EvidenceRecipe`'s fields), with their values.
        reason: the rule, in words that name no option.
        fixes: alternatives, each the settings to change to.
    """

    settings: Mapping[str, object]
    reason: str
    fixes: tuple[Mapping[str, object], ...]

    def words(self, names: Mapping[str, str] | None = None, flags: bool = False) -> str:
        """The refusal in the caller's names: ``names`` maps a recipe name to the caller's
        (``{"update": "prior_update"}``; others as they are), written as Python keywords
        (``prior_update='optimum'``) or, with ``flags``, as flags (``--prior-update
        optimum``)."""
        names = names or {}

        def setting(name: str, value: object) -> str:
            name = names.get(name, name)
            if flags and value is None:  # the command line cannot unset; "all" is as many
                return f"{as_flag(name)} of at least the number of training examples"
            if flags:
                return f"{as_flag(name)} {_plain(value)}"
            return f"{name}={_plain(value)!r}" if isinstance(value, str) else f"{name}={value}"

        join = " " if flags else ", "
        said = join.join(setting(n, v) for n, v in self.settings.items())
        fixes = ", or ".join(join.join(setting(n, v) for n, v in f.items()) for f in self.fixes)
        return f"{said}: {self.reason}; use {fixes}"


def _plain(value: object) -> object:
    """An enum member as its value (``HessianStructure.KRON`` -> ``"kron"``)."""
    return getattr(value, "value", value)


def evidence_problems(
    hessian: HessianStructure | str = HessianStructure.KRON,
    backend: Backend | str | None = None,
    ggn: GGN | str = GGN.AUTO,
    update: PriorUpdate | str = PriorUpdate.AUTO,
    step: float | None = None,
    response: WeightResponse | str = WeightResponse.NONE,
    subset_size: int | None = None,
    n_data: int | None = None,
    likelihood: Likelihood | str | None = None,
) -> list[RuleProblem]:
    """Every rule of the evidence that the settings break, in the order they are stated.

    The rules: the native backend gives Kronecker factors only; the stratified GGN is the
    native backend's estimator, and samples class labels; the round's closed-form optimum
    and the weights' Laplace response need the Kronecker Hessian; a step towards the
    optimum needs the optimum in force; a round on a subset of the ``n_data`` examples
    (``subset_size`` fewer; ``n_data`` ``None``: unknown, a subset is assumed) needs the
    Kronecker Hessian, which scales the subset's curvature.

    Args:
        hessian: the Hessian's structure.
        backend: the curvature backend; ``None``: the default for ``hessian``.
        ggn: the GGN's estimator (``auto`` resolves by the backend and breaks no rule).
        update: the prior update (``auto`` resolves by the Hessian).
        step: the step towards the optimum; ``None``: its default for the rule in force.
        response: the weights' response to the precisions.
        subset_size: the examples of a round; ``None``: all.
        n_data: the training examples; ``None``: unknown.
        likelihood: ``None``: not known yet (the stratified GGN's rule is not asked).
    """
    hessian = HessianStructure.parse(hessian, "Hessian structure")
    backend = Backend.parse(backend or Backend.default_for(hessian), "curvature backend")
    ggn = GGN.parse(ggn, "GGN type")
    kron = hessian == HessianStructure.KRON
    problems = []

    def broken(settings: dict, reason: str, *fixes: dict) -> None:
        problems.append(RuleProblem(settings, reason, fixes))

    if backend == Backend.NATIVE and not kron:
        broken({"hessian": hessian, "backend": backend},
               "the native backend gives Kronecker factors only",
               {"backend": Backend.ASDL}, {"backend": Backend.CURVLINOPS},
               {"hessian": "kron"})  # fmt: skip
    if ggn == GGN.STRATIFIED and backend != Backend.NATIVE:
        broken({"ggn": ggn, "backend": backend},
               "the stratified GGN is the native backend's estimator",
               {"backend": Backend.NATIVE}, {"ggn": GGN.MC}, {"ggn": GGN.EXACT})  # fmt: skip
    if ggn == GGN.STRATIFIED and likelihood is not None and likelihood != "classification":
        broken({"ggn": ggn, "likelihood": likelihood},
               "the stratified GGN samples class labels (classification)",
               {"ggn": GGN.EXACT}, {"ggn": GGN.MC})  # fmt: skip
    if PriorUpdate.parse(update, "prior update") == PriorUpdate.OPTIMUM and not kron:
        broken({"update": PriorUpdate.OPTIMUM, "hessian": hessian},
               "the round's closed-form optimum needs the Kronecker Hessian",
               {"hessian": "kron"}, {"update": PriorUpdate.ADAM})  # fmt: skip
    if step not in (None, 1) and resolved_update(update, hessian) != PriorUpdate.OPTIMUM:
        broken({"step": step, "update": update},
               "a step towards the optimum needs the optimum; Adam's steps are set by its "
               "rate and number of steps",
               {"update": PriorUpdate.OPTIMUM}, {"step": 1})  # fmt: skip
    if WeightResponse.parse(response, "weight response") == WeightResponse.LAPLACE and not kron:
        broken({"response": WeightResponse.LAPLACE, "hessian": hessian},
               "the weights' Laplace response needs the Kronecker Hessian (it moves them in "
               "each tensor's Kronecker eigenbasis)",
               {"hessian": "kron"}, {"response": WeightResponse.NONE})  # fmt: skip
    partial = subset_size is not None and (n_data is None or subset_size < n_data)
    if partial and not kron:
        broken({"subset_size": subset_size, "hessian": hessian},
               "a round on a subset of the training examples scales the subset's curvature, "
               "which needs the Kronecker Hessian",
               {"hessian": "kron"}, {"subset_size": None})  # fmt: skip
    return problems


def first_problem(
    names: Mapping[str, str] | None = None, flags: bool = False, **settings
) -> str | None:
    """The words of the first rule ``settings`` break (:func:`evidence_problems`), in the
    caller's ``names`` (:meth:`RuleProblem.words`); ``None`` where they keep every rule."""
    problems = evidence_problems(**settings)
    return problems[0].words(names, flags) if problems else None


class EvidenceRuleError(ConfigError):
    """Settings that break one of the evidence's rules.

    The message names the settings as Python keywords in the caller's names; the command
    line prints :meth:`~ella.errors.EllaError.on_command_line`, which names them as flags.

    Attributes:
        problem: the rule broken, its settings and their fixes.
        names: the caller's names of the recipe's settings (:meth:`RuleProblem.words`).
        context: what the rule was asked about (``"64 training examples"``), or ``""``.
    """

    def __init__(self, problem: RuleProblem, names: Mapping[str, str], context: str = ""):
        self.problem, self.names, self.context = problem, names, context

        def said(words: str) -> str:
            return f"{words} ({context})" if context else words

        super().__init__(
            said(problem.words(names)), command_line=said(problem.words(names, flags=True))
        )


def check_evidence_settings(
    names: Mapping[str, str] | None = None, context: str = "", **settings
) -> None:
    """Refuse (:class:`EvidenceRuleError`) the first rule ``settings`` break
    (:func:`evidence_problems`), in the caller's ``names``, followed by ``context`` where
    it is given."""
    if problems := evidence_problems(**settings):
        raise EvidenceRuleError(problems[0], names or {}, context)
