"""FoRDE (Trinh et al., ICLR 2024): input-gradient repulsion vs deep and repulsive ensembles.

Five ensembles of the same plain CNN (:func:`ella.models.cnn`), the
same initialisations and the same minibatches, differing only in the particle
update: deep ensemble (``de``, no repulsion), weight-space and function-space
repulsive ensembles (``weight_rde``, ``function_rde``; D'Angelo & Fortuin
2021) and FoRDE with identity or PCA lengthscales (``forde_identity``,
``forde_pca``). Measured on the clean test set (accuracy, NLL, ECE) and on
corrupted copies of it (:mod:`ella.data.corruptions`: 8 corruptions at
severities 1, 3, 5, averaged), on FashionMNIST and the offline CIFAR-10 subset.

    python -m benchmarks.fordes --profile cpu     # about 12 minutes on 1 CPU thread
    python -m benchmarks.fordes --profile paper   # the paper's schedule (GPU)
"""

from __future__ import annotations

import argparse

from studies.fordes import DATASETS, METHODS, PROFILES, build_runs, measure
from studies.runner import (
    common_arguments,
    header_line,
    load_or_measure,
    partial_path,
    run_ensembles,
    write,
)

#: FoRDE paper, Table 1, ResNet18 / CIFAR-100, 10 members: NLL, acc %, ECE, CIFAR-100-C acc %
PAPER = {
    "de": (0.70, 81.8, 0.041, 54.3),
    "weight_rde": (0.70, 81.7, 0.043, 54.2),
    "function_rde": (0.76, 80.1, 0.042, 51.9),
    "forde_pca": (0.71, 81.4, 0.039, 56.1),
    "forde_identity": (0.70, 82.1, 0.043, 54.1),
}


def claims(rows: list[dict]) -> dict[str, bool]:
    out = {}
    by = {}
    for r in rows:
        by.setdefault(r["dataset"], {})[r["method"]] = r
    for d, m in by.items():
        if {"forde_pca", "de"} <= set(m):
            out[f"{d}: FoRDE-PCA has higher corrupted accuracy than DE"] = (
                m["forde_pca"]["corrupted_accuracy"] > m["de"]["corrupted_accuracy"]
            )
        if {"forde_identity", "de"} <= set(m):
            out[f"{d}: FoRDE-Identity has higher clean accuracy than DE"] = (
                m["forde_identity"]["accuracy"] > m["de"]["accuracy"]
            )
        if {"function_rde", "de"} <= set(m):
            out[f"{d}: function-RDE has lower clean accuracy than DE"] = (
                m["function_rde"]["accuracy"] < m["de"]["accuracy"]
            )
    return out


def markdown(payload: dict) -> str:
    lines = [
        "# FoRDE: input-gradient repulsive ensembles vs deep and repulsive ensembles",
        "",
        header_line(payload, "plain CNN members (ella.models.cnn)"),
        "",
        "Ours: accuracy / NLL / ECE on the clean test set; corrupted: mean over 8 torch "
        f"corruptions at severities {payload['settings']['severities']} (not the published "
        "-C sets). Paper: Trinh et al. (ICLR 2024) Table 1, ResNet18 on CIFAR-100 with 10 "
        "members, corrupted = CIFAR-100-C; a different data set and model, shown for the "
        "ordering of methods, not for the values.",
        "",
        "| data set | method | acc % | NLL | ECE | corrupted acc % | member acc % "
        "| disagreement | paper acc % / NLL / ECE / cA % |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in payload["rows"]:
        p = PAPER[r["method"]]
        lines.append(
            f"| {r['dataset']} | {r['method']} | {100 * r['accuracy']:.1f} | {r['nll']:.3f} "
            f"| {r['ece']:.3f} | {100 * r['corrupted_accuracy']:.1f} "
            f"| {100 * r['member_accuracy']:.1f} | {r['disagreement']:.3f} "
            f"| {p[1]} / {p[0]:.2f} / {p[2]:.3f} / {p[3]} |"
        )
    lines += ["", "Claims of the paper at this profile:", ""]
    lines += [f"- {c}: **{'yes' if ok else 'no'}**" for c, ok in payload["claims"].items()]
    lines += ["", "Notes:", ""] + [f"- {n}" for n in payload.get("notes", [])]
    return "\n".join(lines) + "\n"


def notes(payload: dict) -> list[str]:
    """Measured facts that qualify the table at this profile."""
    s, rows = payload["settings"], payload["rows"]
    out = [
        "Budget: {members} members, plain CNN width {width} (8w and 16w channels), {n} training "
        "images, {epochs} epochs, {optimizer} lr {lr}, weight decay {weight_decay}, batch "
        "{batch_size}, no training-time augmentation (the paper: ResNet18, 300 epochs, crops "
        "and flips). Repulsion weight 1/batch_size as in the FoRDE reference code (how "
        "strongly that acts next to the likelihood: `repulsion.md`); one "
        "seed.".format(n=s["train_size"] or "all", **s),
    ]
    by: dict[str, dict] = {}
    for r in rows:
        by.setdefault(r["dataset"], {})[r["method"]] = r
    for d, m in by.items():
        n = next(iter(m.values()))["test_size"]
        accs = [r["accuracy"] for r in m.values()]
        p = sum(accs) / len(accs)
        se = (p * (1 - p) / n) ** 0.5
        spread = max(accs) - min(accs)
        out.append(
            f"{d}: clean accuracies span {100 * spread:.1f} points over the methods; the "
            f"standard error of one accuracy on {n} test images is about {100 * se:.1f} points"
            + (", so the clean differences are within noise" if spread < 2 * se else "")
            + ". Member disagreement: "
            + ", ".join(f"{k} {v['disagreement']:.3f}" for k, v in m.items())
            + "."
        )
    seconds = sum(r["seconds"] for r in rows)
    out.append(
        f"Training and measuring took {seconds / 60:.1f} min summed over the {len(rows)} runs "
        "(1 CPU thread, shared machine)."
    )
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, PROFILES)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    payload = load_or_measure(
        args,
        "fordes",
        profile,
        lambda: {
            "rows": run_ensembles(
                build_runs(args, profile), measure, "fordes", partial_path(args, "fordes")
            )
        },
    )
    payload["claims"] = claims(payload["rows"])
    payload["notes"] = notes(payload)
    write(args, "fordes", payload, markdown(payload))
    return payload


if __name__ == "__main__":
    main()
