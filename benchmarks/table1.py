"""ELLA paper, Table 1: digit vs (digit, quadrant) classification, FC vs CONV vs learned.

MNIST digits placed in a random quadrant of a 56x56 canvas, resized to 32x32,
labelled by digit (10 classes, ``quadrant_mnist``) or by (digit, quadrant)
(40 classes, ``quadrant40_mnist``). A CONV network with global pooling is
translation invariant and cannot tell quadrants apart; an FC network can but
generalises worse; learning FC+CONV priors by marginal likelihood should do
well on both. Models (group ``trivial``: no rotations):

* ``fc_map``, ``conv_map``: FC-only / CONV-only mixer, fixed prior (MAP);
* ``fc_laplace``, ``conv_laplace``: the same with learned priors;
* ``learned``: FC+CONV mixer with learned per-layer, per-path priors.

    python -m benchmarks.table1 --profile cpu     # about 5 minutes on 2 CPU cores
    python -m benchmarks.table1 --profile cpu_80 --results-dir benchmarks/results/table1_cpu_80
    python -m benchmarks.table1 --profile paper   # full MNIST, long schedule (GPU)

What the results show, profile by profile: docs/research/0030-table1-results.md.
"""

from __future__ import annotations

import argparse

from benchmarks.runner import comparison_notes, run_or_load, schedule_note
from studies.runner import (
    analysis_lines,
    claims_markdown,
    common_arguments,
    header_line,
    write,
)
from studies.table1 import MODELS, PROFILES, TASKS, task_config

PAPER = {  # test accuracy in %, ELLA paper Table 1
    ("digit", "fc_map"): 95.73,
    ("quadrant", "fc_map"): 95.10,
    ("digit", "conv_map"): 99.38,
    ("quadrant", "conv_map"): 24.68,
    ("digit", "fc_laplace"): 97.04,
    ("quadrant", "fc_laplace"): 95.46,
    ("digit", "conv_laplace"): 99.23,
    ("quadrant", "conv_laplace"): 24.50,
    ("digit", "learned"): 98.86,
    ("quadrant", "learned"): 99.00,
}
#: the decision record that reads each profile's results
RECORDS = {
    "cpu": "docs/research/0030-table1-results.md",
    "cpu_80": "docs/research/0030-table1-results.md",
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, PROFILES)
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    runs = [
        ({"task": task, "model": model}, task_config(task, model, profile, args))
        for task in TASKS
        for model in MODELS
    ]
    payload = run_or_load(args, "table1", runs, {"settings": profile})
    rows = payload["rows"]
    for row in rows:
        row["paper_test_accuracy"] = PAPER[(row["task"], row["model"])] / 100
    acc = {(r["task"], r["model"]): r["test_accuracy"] for r in rows}
    claims = {
        "learned >= conv_map - 1 point on digit": acc[("digit", "learned")]
        >= acc[("digit", "conv_map")] - 0.01,
        "learned >= fc_map on (digit, quadrant)": acc[("quadrant", "learned")]
        >= acc[("quadrant", "fc_map")],
        "conv_map collapses on (digit, quadrant) (< 50%)": acc[("quadrant", "conv_map")] < 0.5,
    }
    payload["claims"] = claims
    payload["notes"] = [
        schedule_note({**PROFILES[args.profile], **payload["settings"]}),
        *comparison_notes(rows, "task", "fc_map", "learned"),
    ]
    lines = [
        "# ELLA Table 1: digit vs (digit, quadrant), test accuracy [%]",
        "",
        header_line(payload),
        "",
        "| model | digit (ours) | digit (paper) | (digit, quadrant) (ours) | (digit, quadrant) "
        "(paper) | parameters |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model in MODELS:
        d = next(r for r in rows if r["task"] == "digit" and r["model"] == model)
        q = next(r for r in rows if r["task"] == "quadrant" and r["model"] == model)
        lines.append(
            f"| {model} | {100 * d['test_accuracy']:.2f} | {100 * d['paper_test_accuracy']:.2f} "
            f"| {100 * q['test_accuracy']:.2f} | {100 * q['paper_test_accuracy']:.2f} "
            f"| {q['parameters']:,} |"
        )
    lines += claims_markdown(claims, payload["notes"])
    lines += analysis_lines(RECORDS.get(payload["profile"]))
    write(args, "table1", payload, "\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
