"""What ``ella report`` and the plan before a selection say about a run's selections: the
headline (the finished answer, how far a selection got, or what asking costs), and the
networks a selection will train at the run's pace."""

from __future__ import annotations

from pathlib import Path

from ella.errors import CheckpointError, EllaError
from ella.learner.report import counted
from ella.rundir import (
    CONFIG,
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_PER_LAYER,
    RESULTS,
    SELECT_EPOCHS,
    lock_holder,
    read_json,
)
from ella.selection.answer import answer_line, format_path_drops
from ella.selection.candidates import check_selectable
from ella.selection.criteria import DEFAULT_CRITERION, Criterion, criterion_of, default_criterion
from ella.selection.record import read_drops, read_selection

__all__ = [
    "PER_LAYER_RELIABILITY",
    "SHARES_NOTE",
    "format_answer",
    "format_plan",
    "run_criterion",
    "selection_cost",
    "selection_rounds",
]


#: how often ``ella select --per-layer``'s answer has agreed with the exhaustive comparison
#: of every per-layer network (record 0042), said beside every per-layer answer
PER_LAYER_RELIABILITY = (
    "in a miniature this selection agreed with the exhaustive comparison of every per-layer "
    "network in 0 of 4 settings (4 of 12 layers; record 0042)"
)

#: what the effective-parameter table reads, said beside every answer
SHARES_NOTE = (
    "the shares below say how the evidence prices the paths training grew, not which "
    "symmetry the data need"
)


def selection_rounds(n_paths: int) -> list[int]:
    """Networks trained per round by a greedy selection that drops a path in every round:
    the control and one candidate per path kept, from ``n_paths`` paths down to two
    (``[4, 3]`` for three paths)."""
    return [kept + 1 for kept in range(n_paths, 1, -1)]


def format_answer(run_dir: str | Path, results: dict) -> str | None:
    """The report's headline: which paths the data need by the evidence's discrete
    comparison (the run's finished :func:`select_paths`), or what asking costs.

    The shares of a layer's paths say how the evidence prices the paths training grew; the
    comparison of the networks with and without each path is the answer to which the data
    need (the guide: "Which symmetry does each layer need?"). Without a selection the
    headline estimates its cost from the run's own pace: ``epochs`` per network, the
    networks of :func:`selection_rounds`.

    Args:
        run_dir: a finished run directory of ``ella train``.
        results: its ``results.json``.

    Returns:
        Two lines, the answer (or its cost) and :data:`SHARES_NOTE`; None for a run that
        :func:`select` cannot take (:func:`check_selectable`: MAP, one path, ...).
    """
    try:
        paths = check_selectable(run_dir, SELECT_EPOCHS)
    except CheckpointError:  # a damaged file of the run is said, never passed over
        raise
    except EllaError:
        return None
    per_layer = _per_layer_line(run_dir, results, len(paths))
    path = Path(run_dir) / PATH_SELECTION
    record = read_selection(path) if path.is_file() else None
    if record is not None and record.get("finished"):
        return f"{answer_line(record)}\n{per_layer}\n{SHARES_NOTE}"
    if record is not None and record.get("rounds"):
        line = _unfinished(run_dir, record, "the data need", "a selection", "")
        return f"{line}\n{per_layer}\n{SHARES_NOTE}"
    cost = selection_cost(results, len(paths), "greedy")
    drops_path = Path(run_dir) / PATH_DROPS
    drops = read_drops(drops_path) if drops_path.is_file() else {}
    if drops.get("rows"):
        line = _drops_line(run_dir, drops, len(paths))
    else:
        holder = lock_holder(Path(run_dir))
        if holder is not None:  # a selection before its first record, or a resumed run
            line = (
                f"which paths the data need: not answered yet; {_holding(holder)}, and a "
                "selection writes its record after its first network"
            )
        else:
            scorer = run_criterion(run_dir)
            asks = (
                "the evidence"
                if scorer.name == DEFAULT_CRITERION
                else f"{scorer.label} (--criterion {scorer.name})"
            )
            line = (
                f"which paths the data need: not asked yet; ella select {run_dir} asks "
                f"{asks}, training the network with and without each path: {cost}"
            )
    return f"{line}\n{per_layer}\n{SHARES_NOTE}"


def _holding(holder: str) -> str:
    """That another process holds the run directory (:func:`ella.rundir.lock_holder`)."""
    return f"pid {holder} holds the run directory"


def _drops_line(run_dir: str | Path, drops: dict, n_paths: int) -> str:
    """The report's line for a run with ``ella select --drop-only``'s record and no greedy
    selection: the one round's answer (:func:`format_path_drops`'s last line), or how far
    it got, and that ``ella select RUN`` makes the whole choice."""
    epochs, rows = drops["epochs"], drops["rows"]
    flags = "" if epochs == SELECT_EPOCHS else f" --epochs {epochs}"
    if drops.get("seeds", 1) > 1:
        flags += f" --seeds {drops['seeds']}"
    if len(rows) < n_paths + 1:
        holder = lock_holder(Path(run_dir))
        state = (
            f"running ({_holding(holder)})"
            if holder is not None
            else f"stopped; ella select {run_dir} --drop-only{flags} resumes it"
        )
        return (
            f"which paths the data need: one round of drops (ella select --drop-only) has "
            f"{len(rows)} of {n_paths + 1} networks, {state}"
        )
    said = format_path_drops(drops).splitlines()[-1]
    if drops.get("seeds", 1) == 1:
        said += " (one training per candidate, so not decided)"
    return (
        f"which paths the data need, first round only (ella select --drop-only{flags}, "
        f"{epochs} epochs per network): {said}; ella select {run_dir}{flags} makes the "
        "whole choice, its first round this one"
    )


def _unfinished(run_dir: str | Path, record: dict, which: str, what: str, flag: str) -> str:
    """The report's line for an unfinished selection record: running where another process
    holds the run directory (:func:`ella.rundir.lock_holder`), else stopped, with the
    command that resumes it."""
    rounds = len(record["rounds"])
    holder = lock_holder(Path(run_dir))
    if holder is not None:
        return f"which paths {which}: {what} is running (in round {rounds}; {_holding(holder)})"
    epochs = "" if record["epochs"] == SELECT_EPOCHS else f" --epochs {record['epochs']}"
    return (
        f"which paths {which}: {what} stopped in round {rounds}; ella select "
        f"{run_dir}{flag}{epochs} resumes it"
    )


def _per_layer_line(run_dir: str | Path, results: dict, n_paths: int) -> str:
    """The report's line for ``ella select --per-layer``: its answer with
    :data:`PER_LAYER_RELIABILITY`, that a selection stopped, or what its first round costs."""
    path = Path(run_dir) / PATH_SELECTION_PER_LAYER
    record = read_selection(path, "per-layer path selection") if path.is_file() else None
    if record is not None and record.get("finished"):
        return f"{answer_line(record)}; {PER_LAYER_RELIABILITY}"
    if record is not None and record.get("rounds"):
        return _unfinished(
            run_dir, record, "each layer needs", "a per-layer selection", " --per-layer"
        )
    cost = selection_cost(results, n_paths, "per_layer")
    return (
        f"which paths each layer needs: not asked yet; ella select {run_dir} --per-layer drops "
        f"one path of one layer at a time: {cost}; {PER_LAYER_RELIABILITY}"
    )


def selection_cost(
    results: dict, n_paths: int, search: str, epochs: int = SELECT_EPOCHS, seeds: int = 1
) -> str:
    """What a selection of a run will train, at the run's own pace: the networks of its
    first round (:func:`selection_rounds` for ``"greedy"``, the control and each path for
    ``"drop"``, the control and each path of each layer for ``"per_layer"``), of ``epochs``
    each at ``seeds`` seeds, and for the greedy search all of its rounds if it drops a path
    in each; another search's rounds are its own, so only the pace is said.

    Args:
        results: the run's ``results.json`` (its ``train_time_s``, ``epochs`` and layers).
        n_paths: the paths of the run's relaxed layers.
        search: a registered search's name.
        epochs: epochs of training per candidate.
        seeds: the seeds every candidate is trained at.
    """
    pace = _seconds_per_epoch(results)
    at = "" if seeds == 1 else f" at {seeds} seeds each"
    layers = len(results.get("effective_parameters", []))
    if search == "per_layer" and not layers:  # results without the layers' rows
        return f"a network of {epochs} epochs per path of each layer{at} in its first round"
    rounds = {
        "greedy": selection_rounds(n_paths),
        "drop": [n_paths + 1],
        "per_layer": [1 + n_paths * layers],
    }.get(search)
    if rounds is None:
        per = "" if pace is None else f", about {epochs * pace * seeds / 60:.1f} min each"
        return f"networks of {epochs} epochs{at}{per} at this run's pace"
    where = "in its first round" if search != "drop" else "in its one round"
    cost = f"{counted(rounds[0], 'network')} of {epochs} epochs{at} {where}"
    if pace is not None:
        first, every = (epochs * pace * seeds * n / 60 for n in (rounds[0], sum(rounds)))
        cost += f", about {first:.0f} min at this run's pace"
        if len(rounds) > 1:
            cost += f" ({sum(rounds)} networks, {every:.0f} min, if it drops a path each round)"
    return cost


def run_criterion(run_dir: str | Path, criterion: str | None = None) -> Criterion:
    """The criterion that scores a selection of ``run_dir``: ``criterion``, or where it is
    None :func:`default_criterion` of the run's held-out images (``validation_size``)."""
    if criterion is None:
        held_out = read_json(Path(run_dir) / CONFIG, "run's configuration").get("validation_size")
        criterion = default_criterion(held_out or 0)
    return criterion_of(criterion)


def format_plan(
    run_dir: str | Path,
    search: str,
    flag: str,
    epochs: int = SELECT_EPOCHS,
    seeds: int = 1,
    criterion: str | None = None,
) -> str:
    """What ``ella select`` is about to train, said before any work (``--dry-run`` says
    only this): :func:`selection_cost` at the run's pace, the criterion that scores the
    candidates (``None``: :func:`default_criterion` of the run), for ``--per-layer`` its
    measured agreement (:data:`PER_LAYER_RELIABILITY`); the run is checked first
    (:func:`check_selectable`)."""
    paths = check_selectable(run_dir, epochs)
    results = read_json(Path(run_dir) / RESULTS, "run's results")
    scorer = run_criterion(run_dir, criterion)
    line = f"ella select {run_dir}{flag} trains " + selection_cost(
        results, len(paths), search, epochs, seeds
    )
    line += f"; each scored by {scorer.label} (--criterion {scorer.name})"
    if search == "per_layer":
        line += f"; {PER_LAYER_RELIABILITY}"
    return line


def _seconds_per_epoch(results: dict) -> float | None:
    """A run's training seconds per epoch (its evidence rounds included); None where its
    results lack them."""
    seconds, epochs = results.get("train_time_s"), results.get("epochs")
    return seconds / epochs if seconds and epochs else None
