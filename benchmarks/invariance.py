"""Learned input invariance (LILA) against no, full and Augerino invariance on MNIST variants.

One MLP (two hidden layers; it has no built-in symmetry) is trained four ways
on MNIST, rotated MNIST (U[-180, 180] degrees), translated MNIST (U{-8..8}
pixels) and scaled MNIST:

* ``none``: the plain network (MAP);
* ``full``: ``f(x) = E_T[g(T x)]`` with the extents fixed at their full
  ranges (:data:`ella.invariance.affine.FULL_EXTENTS`);
* ``augerino``: the extents trained by the loss minus ``reg * ||eta||``
  (Benton et al., NeurIPS 2020);
* ``learned``: the extents learned by the differentiable KFAC Laplace evidence
  jointly with one prior precision per tensor (LILA, Immer et al., NeurIPS 2022).

All six affine generators are active and start at ``eta_init``; rows report
the learned extents per generator (rotation in radians, translations in half
image sizes, scales and shear as log factors) and the test accuracy.

    python -m benchmarks.invariance --profile cpu     # about 15 minutes on 2 CPU cores
    python -m benchmarks.invariance --profile paper   # full data, long schedule (GPU)
"""

from __future__ import annotations

import argparse
import math

from benchmarks.runner import run_or_load, save_figure_atomic
from ella.invariance import GENERATORS
from ella.train import TrainConfig
from studies.runner import SMOKE, claims_markdown, common_arguments, header_line, write

DATASETS = ("mnist", "rotated_mnist", "translated_mnist", "scaled_mnist")
METHODS = ("none", "full", "augerino", "learned")
#: the generator each data variant's transformation needs
VARIANT_GENERATORS = {
    "rotated_mnist": ("rotate",),
    "translated_mnist": ("translate_x", "translate_y"),
    "scaled_mnist": ("scale_x", "scale_y"),
}
#: the range of each variant's transformation in eta's units (28x28 MNIST, half size 14 px):
#: rotations U[-pi, pi]; shifts U{-8..8} px = 8/14 half-widths; scales log-uniform [0.7, 1.4]
DATA_EXTENTS = {
    "rotated_mnist": {"rotate": math.pi},
    "translated_mnist": {"translate_x": 8 / 14, "translate_y": 8 / 14},
    "scaled_mnist": {"scale_x": math.log(1.4), "scale_y": math.log(1.4)},
}
COMMON = dict(model="mlp", width=2, prior_structure="tensor", ggn="mc", augment="none")
PROFILES = {
    "smoke": {**SMOKE, **COMMON, "invariance_samples": 2, "invariance_eval_samples": 2,
              "invariance_marglik_size": 32},
    "cpu": {**COMMON, "train_size": 2000, "test_size": 2000, "epochs": 30,
            "n_epochs_burnin": 4, "marglik_frequency": 2, "n_hypersteps": 10,
            "invariance_samples": 8, "invariance_eval_samples": 16,
            "invariance_marglik_size": 500},
    "paper": {**COMMON, "train_size": None, "test_size": None, "epochs": 1000,
              "n_epochs_burnin": 10, "marglik_frequency": 1, "n_hypersteps": 1,
              "invariance_samples": 31, "invariance_eval_samples": 31,
              "invariance_marglik_size": 60000, "width": 4, "ggn": "exact",
              "batch_size": 1000, "lr": 5e-3},
}  # fmt: skip


def configurations(args: argparse.Namespace, profile: dict) -> list[tuple[dict, TrainConfig]]:
    runs = []
    for dataset in args.datasets:
        for method in args.methods:
            config = TrainConfig(
                dataset=dataset, data_dir=args.data_dir, invariance=method,
                learn_priors=method == "learned", seed=args.seed, device=args.device,
                progress=False, **profile,
            )  # fmt: skip
            runs.append(({"dataset": dataset, "method": method}, config))
    return runs


def claims(rows: list[dict]) -> dict[str, bool]:
    """The expected behaviour of learned extents, checked on what was run."""
    get = {(r["dataset"], r["method"]): r for r in rows}
    out = {}
    base = get.get(("mnist", "learned"))
    for dataset, generators in VARIANT_GENERATORS.items():
        row = get.get((dataset, "learned"))
        if row is None or base is None:
            continue
        mine = sum(row["eta"][g] for g in generators)
        plain = sum(base["eta"][g] for g in generators)
        names = "+".join(generators)
        out[f"learned {names} extent on {dataset} exceeds that on mnist"] = mine > plain
    row = get.get(("rotated_mnist", "learned"))
    if row is not None:
        out["rotation is the largest learned extent on rotated_mnist (in its units)"] = (
            max(row["eta"], key=row["eta"].get) == "rotate"
        )
    for dataset in DATASETS:
        methods = {m: get[(dataset, m)] for m in METHODS if (dataset, m) in get}
        if "learned" in methods and len(methods) > 1:
            best = max(methods.values(), key=lambda r: r["test_accuracy"])
            out[f"learned has the best test accuracy on {dataset}"] = best is methods["learned"]
    return out


def notes(rows: list[dict]) -> list[str]:
    """Measured facts: learned extents against the data's ranges, and Augerino's extents."""
    out = []
    for r in rows:
        if r["method"] == "learned":
            rotation = r["eta"]["rotate"]
            line = (
                f"{r['dataset']}: learned rotation extent {rotation:.2f} rad "
                f"({math.degrees(rotation):.0f} degrees); largest extent "
                f"{max(r['eta'], key=r['eta'].get)}"
            )
            for g, extent in DATA_EXTENTS.get(r["dataset"], {}).items():
                line += f"; {g} learned {r['eta'][g]:.2f} vs the data's {extent:.2f}"
            history = [h["rotate"] for h in r["eta_history"][-3:]]
            if r["dataset"] == "rotated_mnist" and history and history[-1] > history[0]:
                line += " (the rotation extent was still growing in the last epochs)"
            out.append(line)
    augerino = [r for r in rows if r["method"] == "augerino"]
    if augerino:
        largest = max(max(r["eta"].values()) for r in augerino)
        out.append(
            f"augerino: every extent ended at or below {largest:.3f} on every data set: with "
            "reg = 0.01 the training loss, which cannot prefer invariance, shrank eta from its "
            "initial value; its accuracy differences to none are not explained by the final "
            "extents (not investigated)"
        )
    return out


def figure(rows: list[dict], path) -> None:
    """eta per generator over the epochs, one panel per data set (learned runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    learned = [r for r in rows if r["method"] == "learned" and r["eta_history"]]
    if not learned:
        return
    fig, axes = plt.subplots(1, len(learned), figsize=(3.6 * len(learned), 3.2), sharey=True)
    axes = [axes] if len(learned) == 1 else list(axes)
    for ax, row in zip(axes, learned, strict=True):
        epochs = [h["epoch"] for h in row["eta_history"]]
        for g in GENERATORS:
            ax.plot(epochs, [h[g] for h in row["eta_history"]], label=g)
        ax.set_title(row["dataset"])
        ax.set_xlabel("epoch")
    axes[0].set_ylabel("learned extent eta")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, PROFILES)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    payload = run_or_load(args, "invariance", configurations(args, profile), {"settings": profile})
    rows = payload["rows"]
    payload["claims"] = claims(rows)
    payload["notes"] = notes(rows)
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    get = {(r["dataset"], r["method"]): r for r in rows}
    lines = [
        "# Learned input invariance: test accuracy and learned extents",
        "",
        header_line(payload, "first N images of the original MNIST files"),
        "",
        "Test accuracy (%):",
        "",
        "| data set | " + " | ".join(methods) + " |",
        "|---|" + "---:|" * len(methods),
    ]
    for d in datasets:
        cells = [f"{100 * get[(d, m)]['test_accuracy']:.2f}" for m in methods]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Extents eta at the end of training (rotation in radians, translations in half image "
        "sizes, scales and shear as log factors; `full` is fixed):",
        "",
        "| data set | method | " + " | ".join(GENERATORS) + " |",
        "|---|---|" + "---:|" * len(GENERATORS),
    ]
    for r in rows:
        if r["method"] != "none":
            cells = [f"{r['eta'][g]:.3f}" for g in GENERATORS]
            lines.append(f"| {r['dataset']} | {r['method']} | " + " | ".join(cells) + " |")
    lines += ["", "![eta over training](invariance_eta.png)"]
    lines += claims_markdown(payload["claims"], payload["notes"])
    write(args, "invariance", payload, "\n".join(lines))
    figure(rows, f"{args.results_dir}/invariance_eta.png")
    return payload


if __name__ == "__main__":
    main()
