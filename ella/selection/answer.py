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

from ella.io import atomic_write
from ella.learner.report import counted, paths_label
from ella.nn import PATH_KINDS, path_columns
from ella.selection.candidates import CONTROL, collapsed, kept_their_fit
from ella.selection.criteria import DEFAULT_CRITERION, criterion_of
from ella.selection.replicates import gain_summary, summarise
from ella.selection.units import LAYER_PATHS, UnitKind, unit_kind

__all__ = [
    "MORE_SEEDS",
    "EVIDENCE_AGREEMENT",
    "answer_line",
    "decision",
    "drop_gains",
    "format_path_drops",
    "format_path_selection",
    "format_spread",
    "per_layer_labels",
    "per_layer_outcome",
    "save_per_layer_figure",
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


#: said beside every answer of the evidence: how often it followed the data's symmetry,
#: dropping a path from the mixer, against the held-out likelihood (record 0044, decision ii)
EVIDENCE_AGREEMENT = (
    "in record 0044 the evidence dropped the path the data's symmetry predicts on both data "
    "sets at 1 of 3 seeds, a held-out likelihood at 2 of 3: train with --validation-size V "
    "and ella select scores by the held-out images"
)


def answer_line(record: dict) -> str:
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
