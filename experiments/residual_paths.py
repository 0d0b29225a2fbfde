"""Does the evidence give the rotation-breaking residual a larger share on MNIST than on
rotated MNIST? The small decisive experiment of the non-redundant paths.

Each layer of the mixer is a GCONV path plus the CONV residual with its group-equivariant
part removed (``--paths gconv residual``, :class:`ella.nn.ResidualConvPath`): the two span
what CONV+GCONV span, but only the residual can break the rotation symmetry, so its share
of the effective parameters and its prior variance read as "how much this layer breaks
the symmetry". On MNIST (upright digits: orientation carries information) a layer should
break more than on rotated MNIST (orientation is noise).

Protocol: ``ella train``'s budget and recipe, 4,000 images of each data set of which the
last 1,000 are held out for validation (3,000 trained on), seeds 0 and 1; two starts of
the residual (at its random start, and at zero: the network begins equivariant), and at
zero with the weights' Laplace response to each round's prior (the prior acting within
the round instead of over hundreds of steps). The
decision reads the residual's mean share and prior variance over the layers; the
validation accuracy is reported beside them, the test accuracy only for the record.

    python -m experiments.residual_paths --data-dir ../shared/data [--epochs 20]

Runs go to ``--runs-dir`` (default ``runs/residual_paths``) and are resumed or skipped
when finished; the table goes to ``experiments/results/residual_paths.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from ella.train import TrainConfig
from ella.train.loop import train
from studies.results import EXPERIMENT_RESULTS, environment, write_results

DATASETS = ("mnist", "rotated_mnist")
SEEDS = (0, 1)
#: the designs: the residual at its random start (like the GCONV path) or at zero, and at
#: zero with the weights' Laplace response to each round (``--weight-response laplace``)
VARIANTS: dict[str, dict] = {
    "zero": {"zero_init": ("residual",)},
    "zero+response": {"zero_init": ("residual",), "weight_response": "laplace"},
    "random": {"zero_init": ()},
}


def run_config(dataset: str, seed: int, variant: str, args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        dataset=dataset,
        data_dir=args.data_dir,
        train_size=4000,
        validation_size=1000,
        test_size=args.test_size,
        paths=("gconv", "residual"),
        epochs=args.epochs,
        seed=seed,
        progress=False,
        **VARIANTS[variant],
    )


def summarise(results: dict) -> dict:
    """The residual's mean share, share range and parameter-weighted prior variance over
    the relaxed layers, and the run's accuracies."""
    layers = results["effective_parameters"]
    shares = [row["residual"] for row in layers]
    variance = {
        path: statistics.fmean(row["prior_variance"][path] for row in layers)
        for path in ("gconv", "residual")
    }
    return {
        "residual_share": statistics.fmean(shares),
        "residual_share_by_layer": shares,
        "prior_variance": variance,
        "log_variance_ratio": statistics.fmean(
            math.log(row["prior_variance"]["residual"] / row["prior_variance"]["gconv"])
            for row in layers
        ),
        "validation_accuracy": results.get("validation_accuracy"),
        "validation_nll": results.get("validation_nll"),
        "test_accuracy": results["test_accuracy"],
        "log_marglik": results["log_marglik_reported_state"],
    }


def decisions(rows: list[dict], measure: str = "residual_share") -> dict[str, dict]:
    """Per design with all its runs: ``measure`` (the residual's mean share, or
    ``log_variance_ratio``) on MNIST minus rotated MNIST at each seed, the largest
    difference between the seeds on one data set, and whether every seed's gap exceeds it."""
    out = {}
    for variant in VARIANTS:
        by = {(r["dataset"], r["seed"]): r["summary"][measure] for r in rows
              if r["variant"] == variant}  # fmt: skip
        if len(by) < len(DATASETS) * len(SEEDS):
            continue
        gaps = [by[("mnist", s)] - by[("rotated_mnist", s)] for s in SEEDS]
        spread = max(abs(by[(d, SEEDS[0])] - by[(d, SEEDS[1])]) for d in DATASETS)
        out[variant] = {"gaps": gaps, "spread": spread, "holds": all(g > spread for g in gaps)}
    return out


def claims(rows: list[dict]) -> dict[str, bool]:
    return {
        f"the rotation-breaking residual holds a smaller share on rotated MNIST than on MNIST "
        f"at both seeds, by more than the seed spread ({variant})": d["holds"]
        for variant, d in decisions(rows).items()
    }


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# The rotation-breaking residual's share: MNIST against rotated MNIST",
        "",
        f"`{command}`. Mixer with paths gconv + residual, `ella train`'s recipe, 3,000 "
        "training and 1,000 validation images. Share: the residual's share of a layer's "
        "effective parameters, mean over the 8 layers [%]; log variance ratio: "
        "log(residual's prior variance / GCONV's), mean over the layers.",
        "",
        "| design | data | seed | residual share % | layers' range % | log variance ratio | "
        "val. accuracy | test accuracy | log evidence |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s = r["summary"]
        lines.append(
            f"| {r['variant']} | {r['dataset']} | {r['seed']} | {s['residual_share']:.1f} | "
            f"{min(s['residual_share_by_layer']):.0f}-{max(s['residual_share_by_layer']):.0f} | "
            f"{s['log_variance_ratio']:.2f} | "
            f"{s['validation_accuracy']:.4f} | {s['test_accuracy']:.4f} | "
            f"{s['log_marglik']:.1f} |"
        )
    lines += ["", "Decision rule (the issue's): per design, the residual's share on MNIST minus"]
    lines.append("rotated MNIST at each seed, against the spread between the two seeds. The")
    lines.append("log variance ratio is read the same way, as a second measure.")
    lines.append("")
    for measure, unit in (("residual_share", " points"), ("log_variance_ratio", "")):
        for variant, d in decisions(rows, measure).items():
            lines.append(
                f"- {measure}, {variant}: MNIST minus rotated MNIST "
                f"{', '.join(f'{g:+.2f}' for g in d['gaps'])}{unit} (seeds "
                f"{', '.join(map(str, SEEDS))}); seed spread {d['spread']:.2f}: "
                f"{'holds' if d['holds'] else 'does not hold'}"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--runs-dir", default="runs/residual_paths")
    parser.add_argument("--results-dir", type=Path, default=EXPERIMENT_RESULTS)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--test-size", type=int, default=None)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args(argv)
    rows = []
    for variant in args.variants:
        for seed in SEEDS:
            for dataset in DATASETS:
                cfg = run_config(dataset, seed, variant, args)
                run = Path(args.runs_dir) / f"{variant}_{dataset}_seed{seed}"
                if (run / "results.json").exists():  # finished earlier
                    results = json.loads((run / "results.json").read_text())
                else:
                    print(f"{run} ...", flush=True)
                    results = train(cfg, run, resume=run.exists())
                rows.append(
                    {
                        "variant": variant,
                        "dataset": dataset,
                        "seed": seed,
                        "run": str(run),
                        "summary": summarise(results),
                    }  # fmt: skip
                )
    command = "python -m experiments.residual_paths --data-dir DATA" + (
        f" --epochs {args.epochs}" if args.epochs != 20 else ""
    )
    payload = {
        "command": command,
        "environment": environment(),
        "rows": rows,
        "claims": claims(rows),
    }
    write_results("residual_paths", payload, markdown(rows, command), args.results_dir)
    print(markdown(rows, command))
    return payload


if __name__ == "__main__":
    main()
