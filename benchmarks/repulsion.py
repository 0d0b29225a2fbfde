"""How strongly the repulsion acts: gradient norms of the particle update's terms.

For the repulsive methods of ``benchmarks.fordes`` (same members, data and
settings as its profile), the norm over all members' weights of the gradient
of the likelihood term and of the repulsion term (``repulsion_scale = 1 /
batch_size``, the FoRDE reference's weighting), averaged over the first
minibatches of an epoch, at initialisation and after training. A ratio far
below 1 means the members move almost as a deep ensemble's would.

    python -m benchmarks.repulsion --profile cpu     # about 5 minutes on 1 CPU thread
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

from benchmarks._ensembles import run_ensembles
from benchmarks._runner import common_arguments, header_line, partial_path, stamp, write
from benchmarks.fordes import DATASETS, METHODS, build_runs
from benchmarks.fordes import PROFILES as FORDES_PROFILES
from ella.ensembles import EnsembleTrainer

REPULSIVE = [m for m in METHODS if m != "de"]
PROFILES = {
    "smoke": {**FORDES_PROFILES["smoke"], "batches": 2},
    "cpu": {**FORDES_PROFILES["cpu"], "epochs": 3, "batches": 8},
    "paper": {**FORDES_PROFILES["paper"], "batches": 50},
}


def mean_norms(trainer: EnsembleTrainer, batches: int) -> dict[str, float]:
    sums: dict[str, float] = {}
    for x, y in itertools.islice(trainer.batches(0), batches):
        for k, v in trainer.gradient_norms(x, y).items():
            sums[k] = sums.get(k, 0.0) + v / batches
    return sums


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, PROFILES)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    args = parser.parse_args(argv)
    args.methods = REPULSIVE
    profile = PROFILES[args.profile]
    if args.render_only:
        payload = json.loads((Path(args.results_dir) / "repulsion.json").read_text())
    else:
        start = time.time()
        runs = build_runs(args, profile)
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

        rows = run_ensembles(runs, measure, "repulsion", partial_path(args, "repulsion"))
        payload = {**stamp(args, "repulsion", profile, time.time() - start), "rows": rows}
    lines = [
        "# Repulsion strength: norm of the repulsion gradient over norm of the likelihood gradient",
        "",
        header_line(payload, "plain CNN members, settings of benchmarks.fordes"),
        "",
        f"Mean over the first {payload['settings']['batches']} minibatches; trained = after "
        f"{payload['settings']['epochs']} epochs. Repulsion weight 1/batch_size.",
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
    write(args, "repulsion", payload, "\n".join(lines) + "\n")
    return payload


if __name__ == "__main__":
    main()
