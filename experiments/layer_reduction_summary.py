"""The tables of :mod:`experiments.layer_reduction`: the exhaustive comparison's per-layer
answer, and every candidate's agreement with it, from the rows its phases wrote.

Measures (issue 69, fixed before the runs): the architecture a candidate selects against
the exhaustive winner (exact match; layers that agree), the Spearman rank correlation of
its scores with the exhaustive dense-GGN evidence over the 27 architectures (reductions
only: a greedy search scores a few), the per-layer contrast ``score(remove CONV) -
score(remove GCONV)`` on rotated against upright MNIST, and the seconds it cost.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from scipy.stats import spearmanr

from experiments.layer_reduction_setup import (
    ARCHITECTURES,
    DATASETS,
    ESTIMATORS,
    FULL,
    N_LAYERS,
    key,
    short,
    tag,
    without,
)
from experiments.miniature import Budget, describe_network

#: how the candidates are named in the tables, and where their answer comes from
METHODS = [
    *[(f"{e}, one-shot", e, "one_shot") for e in ESTIMATORS],
    *[(f"{e}, iterative", e, "iterative") for e in ESTIMATORS],
    ("greedy drop-and-retrain, from scratch", None, "greedy_scratch"),
    ("greedy drop-and-retrain, from the trained weights", None, "greedy_retrain"),
    ("ella's KFAC evidence over the 27", None, "kfac_exhaustive"),
]
LABELS = {tag(a): short(a) for a in ARCHITECTURES}


def agree(a: str, b: str) -> int:
    """Layers in which two architectures keep the same paths."""
    return sum(x == y for x, y in zip(a.split("/"), b.split("/"), strict=True))


def greedy_from_table(evidence: dict[str, float]) -> str:
    """Drop one path of one layer at a time while the best such network's evidence (read
    off the exhaustive table: every candidate trained from scratch) rises."""
    arch = FULL
    while True:
        options = [without(arch, i, p) for i, layer in enumerate(arch) if len(layer) == 2
                   for p in layer]  # fmt: skip
        if not options:
            return tag(arch)
        best = max(options, key=lambda a: evidence[tag(a)])
        if evidence[tag(best)] <= evidence[tag(arch)]:
            return tag(arch)
        arch = best


def contrast_of(scores: dict[str, float], layer: int) -> float:
    """``score(remove CONV) - score(remove GCONV)`` in ``layer``, the other layers whole."""
    return scores[tag(without(FULL, layer, "conv"))] - scores[tag(without(FULL, layer, "gconv"))]


def summarise(rows: dict[str, dict], budget: Budget, args) -> tuple[dict, str]:
    seeds: Sequence[int] = args.seeds
    settings = [(d, s) for s in seeds for d in DATASETS]
    nets, found = {}, {}
    for d, s in settings:
        table = {tag(a): rows.get(key(d, s, a, budget)) for a in ARCHITECTURES}
        nets[(d, s)] = {t: r for t, r in table.items() if r is not None}
        found[(d, s)] = len(nets[(d, s)]) == len(ARCHITECTURES)
    complete = [ds for ds in settings if found[ds]]
    per_setting = {}
    for d, s in complete:
        table = nets[(d, s)]
        evidence = {t: r["log_evidence"] for t, r in table.items()}
        order = sorted(evidence, key=evidence.get, reverse=True)
        reduce = rows.get(key(d, s, FULL, budget, what="reduce"))
        greedy = rows.get(key(d, s, FULL, budget, what=f"greedy{args.retrain_epochs}"))
        answers, scores, costs = {}, {}, {}
        epoch = statistics.fmean(r["epoch_seconds"] for r in table.values())
        for name, estimator, how in METHODS:
            if estimator is not None and reduce is not None:
                answers[name] = reduce[estimator][how]
                costs[name] = reduce[estimator]["seconds"]
                if how == "one_shot":  # the iterative answer has the same scores
                    scores[name] = reduce[estimator]["log_bf"]
            elif how == "greedy_scratch":
                answers[name] = greedy_from_table(evidence)
                costs[name] = sum(
                    r["seconds"]["training"] + r["seconds"]["scoring"] for r in table.values()
                )
            elif how == "greedy_retrain" and greedy is not None:
                answers[name] = greedy["selected"]
                costs[name] = greedy["seconds"]
            elif how == "kfac_exhaustive":
                kfac = {t: r["log_evidence_kfac"] for t, r in table.items()}
                answers[name] = max(kfac, key=kfac.get)
                scores[name] = kfac
        winner = order[0]
        per_setting[f"{d}/seed{s}"] = {
            "winner": winner,
            "margin": evidence[order[0]] - evidence[order[1]],
            "evidence": evidence,
            "val_acc": {t: r["val_acc"] for t, r in table.items()},
            "epoch_seconds": epoch,
            "answers": answers,
            "exact": {n: a == winner for n, a in answers.items()},
            "layers_agree": {n: agree(a, winner) for n, a in answers.items()},
            "spearman": {
                n: float(spearmanr([sc[t] for t in evidence], list(evidence.values()))[0])
                for n, sc in scores.items()
            },
            "contrast": {
                "exhaustive": [contrast_of(evidence, i) for i in range(N_LAYERS)],
                **{n: [contrast_of(sc, i) for i in range(N_LAYERS)] for n, sc in scores.items()},
            },
            "seconds": costs,
        }
    within_noise(per_setting, seeds)
    payload = {"settings": per_setting, "complete": [f"{d}/seed{s}" for d, s in complete],
               "seed_variation": seed_variation(per_setting, seeds),
               "claims": claims(per_setting, seeds)}  # fmt: skip
    return payload, markdown(payload, rows, nets, budget, seeds)


def within_noise(per_setting: dict, seeds: Sequence[int]) -> None:
    """Add to each setting ``"within_noise"``: per candidate, whether every layer in which
    its answer differs from the winner is a layer in which the reference's own winners at
    the data set's two seeds differ (issue 69's "within the reference's own seed-to-seed
    variation"); None where the other seed is not complete."""
    for name, row in per_setting.items():
        dataset, _ = name.split("/")
        others = [per_setting.get(f"{dataset}/seed{s}") for s in seeds]
        row["within_noise"] = dict.fromkeys(row["answers"])
        if len(others) < 2 or None in others:
            continue
        first, second = (o["winner"].split("/") for o in others[:2])
        noisy = {i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b}
        winner = row["winner"].split("/")
        for method, answer in row["answers"].items():
            wrong = {i for i, layer in enumerate(answer.split("/")) if layer != winner[i]}
            row["within_noise"][method] = wrong <= noisy


def seed_variation(per_setting: dict, seeds: Sequence[int]) -> dict[str, dict]:
    """The reference's own noise per data set: the layers in which its winners at two seeds
    agree, and the mean over the 27 architectures of ``|evidence(seed a) - evidence(seed
    b)|`` beside the winners' margins over the runner-up."""
    out = {}
    for d in DATASETS:
        rows = [per_setting.get(f"{d}/seed{s}") for s in seeds]
        if len(rows) < 2 or None in rows:
            continue
        a, b = rows[:2]
        out[d] = {
            "winners_agree": agree(a["winner"], b["winner"]),
            "mean_abs_seed_difference": statistics.fmean(
                abs(a["evidence"][t] - b["evidence"][t]) for t in a["evidence"]
            ),
            "margins": [a["margin"], b["margin"]],
        }
    return out


def follows(per_setting: dict, seeds: Sequence[int]) -> dict[int, dict] | None:
    """Per seed, the layers that keep GCONV and the layers that drop CONV in the winner on
    each data set; it follows the data where rotated MNIST keeps GCONV in more layers or
    drops CONV from more than MNIST, and in none fewer."""
    out = {}
    for s in seeds:
        pair = [per_setting.get(f"{d}/seed{s}") for d in DATASETS]
        if None in pair:
            continue
        counts = []
        for row in pair:
            layers = row["winner"].split("/")
            counts.append({"gconv_kept": sum("gconv" in x for x in layers),
                           "conv_dropped": sum("conv" not in x.split("+")
                                               for x in layers)})  # fmt: skip
        mnist, rotated = counts
        gains = [rotated[k] - mnist[k] for k in ("gconv_kept", "conv_dropped")]
        out[s] = {"mnist": mnist, "rotated_mnist": rotated,
                  "holds": min(gains) >= 0 and max(gains) > 0}  # fmt: skip
    return out or None


#: the method ``ella select --per-layer`` runs
PRODUCT = "greedy drop-and-retrain, from the trained weights"


def reliability_sentence(per_setting: dict) -> str:
    """What ``ella report`` says beside every per-layer answer
    (``ella.selection.PER_LAYER_RELIABILITY``, which a test holds to this)."""
    rows = [r for r in per_setting.values() if PRODUCT in r["answers"]]
    exact = sum(r["exact"][PRODUCT] for r in rows)
    layers = sum(r["layers_agree"][PRODUCT] for r in rows)
    return (
        f"in a miniature this selection agreed with the exhaustive comparison of every "
        f"per-layer network in {exact} of {len(rows)} settings ({layers} of {N_LAYERS * len(rows)} "
        f"layers; record 0042)"
    )


def claims(per_setting: dict, seeds: Sequence[int]) -> dict:
    exact = {}
    for row in per_setting.values():
        for name, hit in row["exact"].items():
            exact.setdefault(name, []).append(hit)
    return {
        "exhaustive_follows_the_data": follows(per_setting, seeds),
        "exact_matches": {n: f"{sum(v)} of {len(v)}" for n, v in exact.items()},
        "per_layer_reliability": reliability_sentence(per_setting),
    }


def _fmt(value, spec: str = "+.0f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(payload: dict, rows: dict, nets: dict, budget: Budget, seeds) -> str:
    settings = payload["settings"]
    names = list(settings)
    lines = [
        "# Issue 69: which paths each layer needs, by Bayesian model reduction against the "
        "exhaustive comparison",
        "",
        "`python -m experiments.layer_reduction --phase summarise`. "
        f"{describe_network(budget.widths)}. "
        f"{budget.train_size} training and {budget.validation_size} validation images, "
        f"{budget.epochs} epochs of Adam at 3e-3, KFAC evidence rounds every "
        f"{budget.frequency} epochs from epoch {budget.burnin}; every network scored by its "
        "dense-GGN Laplace evidence at its optimal precisions. Complete settings: "
        + (", ".join(payload["complete"]) or "none")
        + ".",
        "",
        "## The exhaustive comparison",
        "",
        "Log evidence (dense GGN, optimal precisions) of every per-layer architecture, "
        "layers 1-2-3: B both paths, C CONV only, G GCONV only; validation accuracy after "
        "the slash.",
        "",
        "| architecture | " + " | ".join(f"{d} s{s}" for (d, s) in nets) + " |",
        "|---|" + "---:|" * len(nets),
    ]
    for arch in ARCHITECTURES:
        cells = []
        for ds in nets:
            r = nets[ds].get(tag(arch))
            cells.append("-" if r is None else f"{r['log_evidence']:.0f} / {r['val_acc']:.2f}")
        lines.append(f"| {short(arch)} | " + " | ".join(cells) + " |")
    lines += ["", "| setting | winner | margin over second (nats) | winner's val acc |",
              "|---|---|---:|---:|"]  # fmt: skip
    for n, row in settings.items():
        lines.append(f"| {n} | {LABELS[row['winner']]} | {row['margin']:.0f} | "
                     f"{row['val_acc'][row['winner']]:.3f} |")  # fmt: skip
    verdict = payload["claims"]["exhaustive_follows_the_data"]
    if verdict:
        lines += ["", "Does the exhaustive answer follow the data (rotated MNIST keeps GCONV in "
                  "more layers or drops CONV from more, never fewer)? "
                  + "; ".join(f"seed {s}: {'yes' if v['holds'] else 'no'} (GCONV kept "
                              f"{v['mnist']['gconv_kept']} -> {v['rotated_mnist']['gconv_kept']}, "
                              f"CONV dropped {v['mnist']['conv_dropped']} -> "
                              f"{v['rotated_mnist']['conv_dropped']})"
                              for s, v in verdict.items()) + "."]  # fmt: skip
    for d, v in payload["seed_variation"].items():
        lines += ["", f"Seed to seed on {d}: the winners agree in {v['winners_agree']} of 3 "
                  f"layers; an architecture's evidence moves by {v['mean_abs_seed_difference']:.0f}"
                  f" nats on average between the seeds, the winners lead by "
                  f"{v['margins'][0]:.0f} and {v['margins'][1]:.0f}."]  # fmt: skip
    lines += [
        "",
        "## The candidates against it",
        "",
        "Selected architecture (layers agreeing with the winner, of 3); Spearman correlation "
        "of the candidate's scores with the exhaustive evidence over the 27.",
        "",
        "| candidate | " + " | ".join(names) + " | exact | within the reference's seed "
        "variation | Spearman (mean) | seconds |",
        "|---|" + "---|" * len(names) + "---:|---:|---:|---:|",
    ]
    for name, _, _ in METHODS:
        cells, exact, rho, secs, noise = [], 0, [], [], []
        for n in names:
            row = settings[n]
            a = row["answers"].get(name)
            cells.append("-" if a is None else f"{LABELS[a]} ({row['layers_agree'][name]})")
            exact += bool(row["exact"].get(name))
            if row["within_noise"].get(name) is not None:
                noise.append(row["within_noise"][name])
            if name in row["spearman"]:
                rho.append(row["spearman"][name])
            if name in row["seconds"]:
                secs.append(row["seconds"][name])
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {exact} of {len(names)} | "
            + (f"{sum(noise)} of {len(noise)}" if noise else "-")
            + " | "
            f"{_fmt(statistics.fmean(rho) if rho else None, '+.2f')} | "
            f"{_fmt(statistics.fmean(secs) if secs else None, '.0f')} |"
        )
    epochs = [row["epoch_seconds"] for row in settings.values()]
    if epochs:
        lines += ["", f"A training epoch of the full network: {statistics.fmean(epochs):.2f} s "
                  "(one thread; two networks trained side by side)."]  # fmt: skip
    lines += [
        "",
        "## Per-layer contrast",
        "",
        "`score(remove CONV) - score(remove GCONV)` per layer (nats), rotated minus upright "
        "MNIST at each seed; it follows the data where it is positive.",
        "",
        "| candidate | "
        + " | ".join(f"seed {s}, layer {i + 1}" for s in seeds for i in range(N_LAYERS))
        + " |",  # fmt: skip
        "|---|" + "---:|" * (len(seeds) * N_LAYERS),
    ]
    for name in ["exhaustive", *[m[0] for m in METHODS if m[2] == "one_shot"],
                 "ella's KFAC evidence over the 27"]:  # fmt: skip
        cells = []
        for s in seeds:
            up, rot = (settings.get(f"{d}/seed{s}") for d in DATASETS)
            for i in range(N_LAYERS):
                if up is None or rot is None or name not in up["contrast"]:
                    cells.append("-")
                else:
                    cells.append(f"{rot['contrast'][name][i] - up['contrast'][name][i]:+.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


#: the guide's per-layer reliability table, written by ``--phase summarise``
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "symmetry.md"
BEGIN = (
    "<!-- per-layer:begin (written by python -m experiments.layer_reduction --phase "
    "summarise; do not edit) -->"
)
END = "<!-- per-layer:end -->"
#: the guide's columns: (heading, method name in the results)
GUIDE_METHODS = [
    ("drop and retrain from the trained weights (`ella select --per-layer`)", PRODUCT),
    ("reduction, dense GGN", "dense, one-shot"),
    ("reduction, Kronecker with the blocks between paths", "layer_kron, one-shot"),
    ("reduction, per-tensor KFAC", "per_tensor, one-shot"),
]  # fmt: skip


def reliability_table(payload: dict) -> str:
    """The guide's table: per (data set, seed), the exhaustive comparison's per-layer answer
    and each method's, with the layers (of 3) in which it agrees."""
    settings = payload["settings"]
    lines = [
        "| data, seed | exhaustive answer (layers 1-2-3) | "
        + " | ".join(h for h, _ in GUIDE_METHODS) + " |",
        "|---|---|" + "---|" * len(GUIDE_METHODS),
    ]  # fmt: skip
    exact = dict.fromkeys(GUIDE_METHODS, 0)
    for name, row in settings.items():
        dataset, seed = name.split("/")
        cells = []
        for method in GUIDE_METHODS:
            answer = row["answers"].get(method[1])
            if answer is None:
                cells.append("not run")
                continue
            exact[method] += answer == row["winner"]
            cells.append(f"{LABELS[answer]} ({row['layers_agree'][method[1]]} of 3)")
        lines.append(
            f"| {dataset.replace('_', ' ')}, {seed.removeprefix('seed')} | "
            f"{LABELS[row['winner']]} | " + " | ".join(cells) + " |"
        )
    lines.append(
        "| exact matches | | "
        + " | ".join(f"{exact[m]} of {len(settings)}" for m in GUIDE_METHODS) + " |"
    )  # fmt: skip
    return "\n".join(lines)


__all__ = ["BEGIN", "END", "GUIDE", "greedy_from_table", "reliability_table", "summarise"]
