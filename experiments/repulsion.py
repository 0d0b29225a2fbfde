"""How strongly the repulsion acts: gradient norms of the particle update's terms.

For the repulsive methods of ``benchmarks.fordes`` (same members, data and
settings as its profile), the norm over all members' weights of the gradient
of the likelihood term and of the repulsion term (``repulsion_scale = 1 /
batch_size``, the FoRDE reference's weighting), averaged over the first
minibatches of an epoch, at initialisation and after training. A ratio far
below 1 means the members move almost as a deep ensemble's would.

Then FoRDE-Identity and FoRDE-PCA are trained at the full ``benchmarks.fordes``
budget with the repulsion weight multiplied by 10 and 100, and measured as
there (the multiplier-1 rows are those of ``benchmarks/results/fordes.json``).

    python -m experiments.repulsion --profile cpu     # about 20 minutes on 1 CPU thread
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from pathlib import Path

from ella.ensembles import EnsembleTrainer
from studies.fordes import DATASETS, METHODS, build_runs
from studies.fordes import PROFILES as FORDES_PROFILES
from studies.fordes import measure as fordes_measure
from studies.results import BENCHMARK_RESULTS, EXPERIMENT_RESULTS
from studies.runner import (
    as_experiment,
    common_arguments,
    header_line,
    load_or_measure,
    partial_path,
    run_ensembles,
    write,
)

REPULSIVE = [m for m in METHODS if m != "de"]
PROFILES = {
    "smoke": {**FORDES_PROFILES["smoke"], "batches": 2, "norm_epochs": 1, "multipliers": (10,)},
    "cpu": {**FORDES_PROFILES["cpu"], "batches": 8, "norm_epochs": 3, "multipliers": (10, 100)},
    "paper": {**FORDES_PROFILES["paper"], "batches": 50, "norm_epochs": 30,
              "multipliers": (10, 100)},
}  # fmt: skip
SWEPT = ["forde_identity", "forde_pca"]


def mean_norms(trainer: EnsembleTrainer, batches: int) -> dict[str, float]:
    sums: dict[str, float] = {}
    for x, y, _ in itertools.islice(trainer.batches(0), batches):
        for k, v in trainer.gradient_norms(x, y).items():
            sums[k] = sums.get(k, 0.0) + v / batches
    return sums


def sweep_markdown(payload: dict, fordes_json: Path) -> list[str]:
    """The multiplier sweep next to ``fordes.json``'s multiplier-1 rows (when present)."""
    base = {}
    if fordes_json.is_file():
        saved = json.loads(fordes_json.read_text())
        ours = json.loads(json.dumps(payload["settings"]))  # tuples as lists, as saved
        if all(ours.get(k) == v for k, v in saved["settings"].items()):
            base = {(r["dataset"], r["method"]): r for r in saved["rows"]}
    rows = sorted(
        payload.get("sweep", []), key=lambda r: (r["dataset"], r["method"], r["multiplier"])
    )
    lines = [
        "",
        f"## Stronger repulsion (full budget: {payload['settings']['epochs']} epochs)",
        "",
        "| data set | method | weight x | acc % | NLL | ECE | corrupted acc % | disagreement |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    shown = set()
    for r in rows:
        for row, mult in (
            (base.get((r["dataset"], "de")), 0),
            (base.get((r["dataset"], r["method"])), 1),
            (r, r["multiplier"]),
        ):
            key = (row and row["dataset"], row and row["method"], mult)
            if row is None or key in shown:
                continue
            shown.add(key)
            lines.append(
                f"| {row['dataset']} | {row['method']} | {mult} | {100 * row['accuracy']:.1f} "
                f"| {row['nll']:.3f} | {row['ece']:.3f} | {100 * row['corrupted_accuracy']:.1f} "
                f"| {row['disagreement']:.3f} |"
            )
    return lines


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, PROFILES)
    parser.set_defaults(results_dir=str(EXPERIMENT_RESULTS))
    parser.add_argument(
        "--fordes-json",
        default=str(BENCHMARK_RESULTS / "fordes.json"),
        help="benchmarks.fordes's results, whose rows at the same settings are the sweep's "
        "multiplier-1 rows",
    )
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    args = parser.parse_args(argv)
    args.methods = REPULSIVE
    profile = PROFILES[args.profile]

    def produce() -> dict:
        runs = build_runs(args, {**profile, "epochs": profile["norm_epochs"]})
        initial = {}
        for labels, config in runs:  # the same members before training
            norms = mean_norms(EnsembleTrainer(config), profile["batches"])
            initial[(labels["dataset"], labels["method"])] = norms

        def measure(labels: dict, trainer: EnsembleTrainer) -> dict:
            trained = mean_norms(trainer, profile["batches"])
            init = initial[(labels["dataset"], labels["method"])]
            return {
                "initial": init,
                "trained": trained,
                "ratio_initial": init["repulsion"] / init["likelihood"],
                "ratio_trained": trained["repulsion"] / trained["likelihood"],
            }

        partial = partial_path(args, "repulsion")
        rows = run_ensembles(runs, measure, "repulsion", partial)
        args.methods = SWEPT
        sweep_runs = []
        for labels, config in build_runs(args, profile):
            for multiplier in profile["multipliers"]:
                scaled = dataclasses.replace(config, repulsion_scale=multiplier / config.batch_size)
                sweep_runs.append(({**labels, "multiplier": multiplier}, scaled))
        sweep = run_ensembles(sweep_runs, fordes_measure, "repulsion x", partial.with_suffix(".x"))
        partial.with_suffix(".x").unlink(missing_ok=True)
        return {"rows": rows, "sweep": sweep}

    payload = as_experiment(load_or_measure(args, "repulsion", profile, produce))
    lines = [
        "# Repulsion strength: norm of the repulsion gradient over norm of the likelihood gradient",
        "",
        header_line(payload, "plain CNN members, settings of benchmarks.fordes"),
        "",
        f"Mean over the first {payload['settings']['batches']} minibatches; trained = after "
        f"{payload['settings']['norm_epochs']} epochs. Repulsion weight 1/batch_size.",
        "",
        "| data set | method | ratio at init | ratio trained | likelihood grad norm init / trained "
        "| repulsion grad norm init / trained |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in payload["rows"]:
        i, t = r["initial"], r["trained"]
        lines.append(
            f"| {r['dataset']} | {r['method']} | {r['ratio_initial']:.4f} "
            f"| {r['ratio_trained']:.4f} | {i['likelihood']:.3f} / {t['likelihood']:.3f} "
            f"| {i['repulsion']:.4f} / {t['repulsion']:.4f} |"
        )
    lines += sweep_markdown(payload, Path(args.fordes_json))
    write(args, "repulsion", payload, "\n".join(lines) + "\n")
    return payload


if __name__ == "__main__":
    main()
