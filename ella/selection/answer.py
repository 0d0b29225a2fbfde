"""A selection's answer: the tables of its record, the report's headline, the per-layer
figure.

Every text reads the record alone (and, for the headline, the run's results and which
records exist), so ``ella select``, ``ella train --select-paths`` and ``ella report`` print
the same words for the same record. A unit's label is its kind's
(:mod:`ella.selection.units`); the score's name is its criterion's
(:mod:`ella.selection.criteria`).
"""

from __future__ import annotations

from pathlib import Path

from ella.errors import CheckpointError, EllaError
from ella.io import atomic_write
from ella.learner.report import counted, paths_label
from ella.nn import PATH_KINDS, path_columns
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
from ella.selection.candidates import CONTROL, check_selectable, collapsed, kept_their_fit
from ella.selection.criteria import DEFAULT_CRITERION, Criterion, criterion_of, default_criterion
from ella.selection.record import read_drops, read_selection
from ella.selection.replicates import gain_summary, summarise
from ella.selection.units import LAYER_PATHS, UnitKind, unit_kind

__all__ = [
    "MORE_SEEDS",
    "EVIDENCE_AGREEMENT",
    "PER_LAYER_RELIABILITY",
    "SHARES_NOTE",
    "decision",
    "drop_gains",
    "format_answer",
    "format_path_drops",
    "format_path_selection",
    "format_plan",
    "format_spread",
    "per_layer_labels",
    "per_layer_outcome",
    "save_per_layer_figure",
    "selection_cost",
    "selection_rounds",
]


def kind_of(record: dict) -> UnitKind:
    """The unit kind of a selection record."""
    return unit_kind(bool(record.get("per_layer")))


def drop_gains(record: dict) -> list[tuple[int, str, float]]:
    """The drops of a selection record's rounds: ``(round number, what it dropped, its gain
    in its criterion's score, log evidence by default, over the round's control)`` for each
    round whose winner dropped a path (or a group); rounds the control won, or not decided
    yet, are left out."""
    gains, key = [], criterion_of(record.get("criterion")).key
    for number, this in enumerate(record["rounds"], start=1):
        if this["winner"] not in (None, CONTROL):
            control = this["rows"][0][key]
            row = next(r for r in this["rows"] if r["dropped"] == this["winner"])
            gains.append((number, this["winner"], row[key] - control))
    return gains


#: the seeds a one-seed answer suggests asking at: the fewest whose standard error can call
#: a difference (two seeds give a standard error of one degree of freedom)
MORE_SEEDS = 3


def decision(record: dict) -> dict:
    """How sure a greedy selection's answer is: each round's step with its spread over the
    seeds (:func:`~ella.selection.replicates.summarise`) and what asking at more seeds
    costs; the same fields ``ella report`` words and :func:`ella.select` returns.

    A round's step is the drop it made (its gain over the round's control) or, where the
    control won, its best rival that kept its fit (a gain at or below zero: keeping is
    right). A step is *decided* where its gain has one sign at every seed and ``|mean|``
    exceeds ``CALL_AT`` standard errors, for a kept rival below zero; one seed decides
    nothing (it measures no spread).

    Returns:
        ``{"kept", "criterion", "seeds", "decided", "steps": [{"round", "unit", "action"
        ("drop" or "keep"), "mean", "se", "agree", "seeds", "decided"}], "more": {"seeds",
        "networks", "minutes"}}``: ``decided`` where every step is, ``se`` None at one
        seed, ``more`` the cost of asking again at ``max(MORE_SEEDS, 2 seeds)`` (the
        networks the record trained, once per added seed, at the pace its rows measured;
        ``minutes`` None where the rows lack their seconds).
    """
    criterion = criterion_of(record.get("criterion"))
    key, seeds = criterion.key, int(record.get("seeds", 1))
    steps = []
    for number, this in enumerate(record["rounds"], start=1):
        if this["winner"] is None:
            continue
        control = this["rows"][0]
        if this["winner"] != CONTROL:
            row, action = next(r for r in this["rows"] if r["dropped"] == this["winner"]), "drop"
        else:
            rivals = kept_their_fit(this["rows"], record["null"])
            if not rivals:
                continue
            row, action = max(rivals, key=lambda r: r[key]), "keep"
        gain = gain_summary(row, control, key) or summarise([row[key] - control[key]])
        decided = gain["decided"] and (gain["mean"] > 0) == (action == "drop")
        se = None if gain["se"] != gain["se"] else gain["se"]  # NaN at one seed
        steps.append({"round": number, "unit": row["dropped"], "action": action,
                      "mean": gain["mean"], "se": se, "agree": gain["agree"],
                      "seeds": gain["seeds"], "decided": decided})  # fmt: skip
    more = max(MORE_SEEDS, 2 * seeds)
    rows = [r for this in record["rounds"] for r in this["rows"]]
    seconds = [r.get("seconds") for r in rows]
    minutes = None
    if rows and all(isinstance(t, (int, float)) for t in seconds):
        minutes = (more - seeds) * sum(seconds) / 60
    return {
        "kept": list(record["kept"]),
        "criterion": criterion.name,
        "seeds": seeds,
        "decided": bool(steps) and all(s["decided"] for s in steps),
        "steps": steps,
        "more": {"seeds": more, "networks": (more - seeds) * len(rows), "minutes": minutes},
    }


def per_layer_outcome(record: dict) -> dict[str, tuple[int, float] | None]:
    """Each prior group of a per-layer selection: None where it was kept, else the round
    that dropped it and that drop's gain in log evidence over the round's control."""
    outcome: dict[str, tuple[int, float] | None] = dict.fromkeys(record["paths"])
    for number, dropped, gain in drop_gains(record):
        outcome[dropped] = (number, gain)
    return outcome


def per_layer_labels(record: dict) -> dict[str, str]:
    """Each prior group's words in the per-layer figure: ``"kept"``, or the round that
    dropped it and its gain, ``"+40 nats"`` from one training or ``"+40 ± 9 nats"`` (mean
    ± standard error) from replicates (:func:`decision`)."""
    spread = {s["unit"]: s for s in decision(record)["steps"] if s["action"] == "drop"}
    labels = {}
    for group, dropped in per_layer_outcome(record).items():
        if dropped is None:
            labels[group] = "kept"
            continue
        step, gain = spread.get(group), f"{dropped[1]:+.0f}"
        if step is not None and step["se"] is not None:
            gain = f"{step['mean']:+.0f} ± {step['se']:.0f}"
        labels[group] = f"dropped, round {dropped[0]}\n{gain} nats"
    return labels


def save_per_layer_figure(record: dict, path: str | Path) -> Path:
    """A finished per-layer selection as a grid, written as PNG: a row per relaxed layer and
    a column per path, each kept group in its path's colour (the kind's, as in the shares
    figure), each dropped one light with the round that dropped it and the evidence it
    gained (nats; mean ± standard error where the candidates were replicated)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outcome, labels = per_layer_outcome(record), per_layer_labels(record)
    parts = {g: LAYER_PATHS.split(g) for g in outcome}
    layers = list(dict.fromkeys(layer for layer, _ in parts.values()))
    paths = [p for p in PATH_KINDS if any(path == p for _, path in parts.values())]
    fig, ax = plt.subplots(figsize=(1.6 * len(paths) + 1.5, 0.45 * len(layers) + 1.4))
    for i, layer in enumerate(layers):
        for j, name in enumerate(paths):
            group = f"{layer}.{name}"
            if group not in outcome:
                continue
            dropped = outcome[group]
            colour = PATH_KINDS[name].color if dropped is None else "#e5e5e5"
            ax.add_patch(plt.Rectangle((j, i), 0.95, 0.9, color=colour))
            label = labels[group]
            ax.text(j + 0.47, i + 0.45, label, ha="center", va="center", fontsize=8,
                    color="white" if dropped is None else "black")  # fmt: skip
    ax.set_xlim(0, len(paths))
    ax.set_ylim(len(layers), 0)
    ax.set_xticks([j + 0.47 for j in range(len(paths))], [p.upper() for p in paths])
    ax.set_yticks([i + 0.45 for i in range(len(layers))], layers)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    seeds = int(record.get("seeds", 1))
    over = "one training per candidate" if seeds == 1 else f"mean ± SE over {seeds} seeds"
    ax.set_title(
        f"Paths each layer keeps by the evidence ({record['epochs']} epochs per network, {over})",
        fontsize=10,
    )
    fig.tight_layout()
    path = atomic_write(Path(path), lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return path


def format_path_selection(record: dict) -> str:
    """A table per round of :func:`select_paths`'s record, and the paths it selected."""
    null, kind = record["null"], kind_of(record)
    criterion = criterion_of(record.get("criterion"))
    key, score = criterion.key, criterion.label
    raises = (
        "raises the evidence most"
        if criterion.name == DEFAULT_CRITERION
        else f"raises the {score} ({criterion.name}) most"
    )
    lines = [
        f"path selection: each round drops the {kind.what} whose removal {raises}, "
        f"the rest trained on for {counted(record['epochs'], 'epoch')} ('collapsed': a "
        f"candidate that kept less than half of the control's training fit over the class "
        f"frequencies, which cannot win)"
    ]
    width = max([10, *(len(r["dropped"]) + 2 for t in record["rounds"] for r in t["rows"])])
    for number, this in enumerate(record["rounds"], start=1):
        control = this["rows"][0][key]
        lines.append(f"round {number} (network {kind.kept_label(this['kept'])}):")
        columns = path_columns(this["rows"][0]["shares"])
        lines.append(
            f"  {'dropped':<{width}}{'test acc %':>11}{score:>15}{'vs control':>12}"
            f"  shares {paths_label(columns)} %"
        )
        for r in this["rows"]:
            shares = "/".join(f"{r['shares'].get(p, 0.0):.0f}" for p in columns)
            lost = r["dropped"] != CONTROL and collapsed(r, this["rows"][0], null)
            mark = "  collapsed" if lost else ""
            gain = None if r["dropped"] == CONTROL else gain_summary(r, this["rows"][0], key)
            if gain is not None:
                mark += f"  {format_spread(gain)}"
            lines.append(
                f"  {r['dropped']:<{width}}{100 * r['test_accuracy']:>11.2f}"
                f"{r[key]:>15.1f}{r[key] - control:>+12.1f}  {shares}"
                f"{mark}"
            )
        if this["winner"] is not None:
            kept_all = this["winner"] == CONTROL
            verdict = "keeps every path" if kept_all else f"drops {kind.label(this['winner'])}"
            lines.append(f"  the evidence {verdict}")
    if record["finished"]:
        first, last = record["rounds"][0]["rows"][0], _selected_row(record)
        lines.append(
            f"selected: {kind.kept_label(record['kept'])}; test accuracy "
            f"{100 * last['test_accuracy']:.2f}% (the whole network trained on alike: "
            f"{100 * first['test_accuracy']:.2f}%), log evidence {last['log_evidence']:.1f} "
            f"({last['log_evidence'] - first['log_evidence']:+.1f})"
        )
        lines.append(
            f"no network (the class frequencies, uniform Dirichlet prior): log evidence "
            f"{null['log_evidence']:.1f}"
        )
        if last["log_evidence"] < null["log_evidence"]:
            lines.append(
                "the evidence prefers the class frequencies to the selected network: at this "
                "number of training images the network's Occam factor outweighs its fit, so the "
                "choice of paths is the evidence's among networks it would not use"
            )
    return "\n".join(lines)


#: how often ``ella select --per-layer``'s answer has agreed with the exhaustive comparison
#: of every per-layer network (record 0042), said beside every per-layer answer
PER_LAYER_RELIABILITY = (
    "in a miniature this selection agreed with the exhaustive comparison of every per-layer "
    "network in 0 of 4 settings (4 of 12 layers; record 0042)"
)

#: said beside every answer of the evidence: how often it followed the data's symmetry,
#: dropping a path from the mixer, against the held-out likelihood (record 0044, decision ii)
EVIDENCE_AGREEMENT = (
    "in record 0044 the evidence dropped the path the data's symmetry predicts on both data "
    "sets at 1 of 3 seeds, a held-out likelihood at 2 of 3: train with --validation-size V "
    "and ella select scores by the held-out images"
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
        return f"{_answer(record)}\n{per_layer}\n{SHARES_NOTE}"
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
        return f"{_answer(record)}; {PER_LAYER_RELIABILITY}"
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


def _answer(record: dict) -> str:
    """One line of a finished selection: the paths kept, what each step gained with its
    spread over the seeds or that one seed measures none (:func:`decision`), what asking
    at more seeds costs where a step is not decided, and the selected network's test
    accuracy against the whole network trained on alike."""
    kind, criterion = kind_of(record), criterion_of(record.get("criterion"))
    evidence = criterion.name == DEFAULT_CRITERION
    nats = " nats" if evidence else ""  # the evidence's unit
    sure = decision(record)

    def told(step: dict) -> str:
        """A drop's gain: its spread over the seeds, or the one seed's figure."""
        gain = f"{step['mean']:+.0f}{nats}" if step["se"] is None else format_spread(step, nats)
        return f"{kind.label(step['unit'])} ({gain})"

    drops = [s for s in sure["steps"] if s["action"] == "drop"]
    how = f"dropped {', then '.join(map(told, drops))}" if drops else "every path kept"
    kept = [s for s in sure["steps"] if s["action"] == "keep"]
    if kept:
        step, too = kept[0], " too" if drops else ""
        unit = " nats" if evidence else f" ({criterion.label})"
        if step["se"] is None:
            how += (
                f"; dropping {kind.label(step['unit'])}{too} would cost {-step['mean']:.0f}{unit}"
            )
        elif step["mean"] > 0:  # ahead of the control, but not decided
            ahead = format_spread(step, nats)
            how += f"; dropping {kind.label(step['unit'])}{too} is ahead ({ahead})"
        else:
            how += (
                f"; dropping {kind.label(step['unit'])}{too} would cost "
                f"{-step['mean']:.0f} ± {step['se']:.0f}{unit} over {step['seeds']} seeds"
            )
    if not sure["decided"]:
        more = sure["more"]
        if sure["seeds"] == 1:
            why = "one training per candidate, so not decided (one seed measures no spread)"
        else:
            why = f"not decided at {sure['seeds']} seeds"
        cost = f"{more['networks']} more networks"
        if more["minutes"] is not None:
            cost += f", about {more['minutes']:.0f} min at this selection's pace"
        how += f"; {why}: asking with --seeds {more['seeds']} trains {cost}"
    first, selected = record["rounds"][0]["rows"][0], _selected_row(record)
    which, command = "the data need", "ella select"
    if record.get("per_layer"):
        which, command = "each layer needs", "ella select --per-layer"
    by = "the evidence" if evidence else f"{criterion.label}"
    if not evidence:
        command += f" --criterion {criterion.name}"
    if sure["seeds"] > 1:
        command += f" --seeds {sure['seeds']}"
    line = (
        f"which paths {which}, by {by} ({command}, {record['epochs']} epochs per network): "
        f"{kind.kept_label(record['kept'])}; {how}; test accuracy "
        f"{100 * selected['test_accuracy']:.2f}% (the whole network trained on alike: "
        f"{100 * first['test_accuracy']:.2f}%)"
    )
    if selected["log_evidence"] < record["null"]["log_evidence"]:
        line += "; below no network's evidence, so a choice among networks, not against none"
    if evidence:
        line += f"; {EVIDENCE_AGREEMENT}"
    return line


def format_spread(gain: dict, unit: str = "", cost: bool = False) -> str:
    """``+120 ± 40 nats, 3 of 3 seeds agree, decided`` (:func:`summarise`'s fields, or a
    step of :func:`decision`); with ``cost``, the loss the gain is: ``120 ± 40 nats, ...``."""
    called = "decided" if gain["decided"] else "not decided"
    mean = f"{-gain['mean']:.0f}" if cost else f"{gain['mean']:+.0f}"
    return (
        f"{mean} ± {gain['se']:.0f}{unit}, {gain['agree']} of {gain['seeds']} seeds agree, {called}"
    )


def _selected_row(record: dict) -> dict:
    """The row of the selected network: the winner of the last round."""
    last = record["rounds"][-1]
    return next(r for r in last["rows"] if r["dropped"] == last["winner"])


def format_path_drops(result: dict) -> str:
    """A table of :func:`drop_each_path`'s result and the paths the evidence would drop."""
    rows = result["rows"]
    control = rows[0]["log_evidence"]
    lines = [
        f"path drops: each path at zero in every relaxed layer, the rest trained on for "
        f"{counted(result['epochs'], 'epoch')} (the control: nothing dropped)",
        f"{'dropped':<10}{'test acc %':>11}{'log evidence':>15}{'vs control':>12}",
    ]
    for r in rows:
        gain = None if r is rows[0] else gain_summary(r, rows[0], "log_evidence")
        lines.append(
            f"{r['dropped']:<10}{100 * r['test_accuracy']:>11.2f}{r['log_evidence']:>15.1f}"
            f"{r['log_evidence'] - control:>+12.1f}"
            + ("" if gain is None else f"  {format_spread(gain, ' nats')}")
        )
    gains = [r for r in rows[1:] if r["log_evidence"] > control]
    if result.get("seeds", 1) > 1:  # only the gains the seeds decide
        summaries = [(r, gain_summary(r, rows[0], "log_evidence")) for r in gains]
        gains = [r for r, g in summaries if g is not None and g["decided"]]
    if gains:
        best = max(gains, key=lambda r: r["log_evidence"])
        names = ", ".join(r["dropped"].upper() for r in gains)
        lines.append(
            f"the evidence would drop: {names} (most: {best['dropped'].upper()}, "
            f"{best['log_evidence'] - control:+.0f} nats)"
        )
    else:
        lines.append("the evidence keeps every path")
    return "\n".join(lines)
