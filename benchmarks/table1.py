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

    python -m benchmarks.table1 --profile cpu     # about 5 minutes on 2 CPU cores (5.0 min)
    python -m benchmarks.table1 --profile cpu_80 --results-dir benchmarks/results/table1_cpu_80
    python -m benchmarks.table1 --profile paper   # full MNIST, long schedule (GPU)
"""

from __future__ import annotations

import argparse

from benchmarks._runner import (
    ADAM_ROUNDS,
    MC_ROUNDS,
    PAPER_SCHEDULE,
    SMOKE,
    claims_markdown,
    common_arguments,
    comparison_notes,
    header_line,
    run_or_load,
    schedule_note,
    write,
)
from ella.train import TrainConfig

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
MODELS = {
    "fc_map": (("fc",), False),
    "conv_map": (("conv",), False),
    "fc_laplace": (("fc",), True),
    "conv_laplace": (("conv",), True),
    "learned": (("fc", "conv"), True),
}
TASKS = {"digit": "quadrant_mnist", "quadrant": "quadrant40_mnist"}
#: what we could and could not establish about a profile's results (written by hand)
ANALYSIS = {
    "cpu": [
        "setting (2026-11-24): ella train's recipe without instance norm and the head's "
        "standardisation, chosen on a validation split of both tasks (3000/1000 images; "
        "recipe.md, 'The FC path's rank'): with them the FC networks stayed at chance "
        "(validation 10.5% on the digit task), without them FC reached 60.1% and learned "
        "FC+CONV 61.3%, CONV 94.8-94.9% either way.",
        "the learned mixer's FC path starts at zero (ella train's default since 2026-11-25, "
        "the profile names it): on the same validation split of both tasks it raised the "
        "learned FC+CONV mixer from 58.1% to 89.6% (digit) and from 46.9% to 78.4% (digit, "
        "quadrant) (recipe.md, 'The FC path starts at zero'); the single-path rows are "
        "untouched by it (a single-path layer keeps its start).",
        "analysis (written by hand from this file, table1_seed1/ and two extra runs, "
        "2026-11-25; not computed): CONV collapses on (digit, quadrant) (22.0%; seed 1: "
        "24.3%) and learned FC+CONV solves it: 88.5% (seed 1: 89.0%), 40.5 points above "
        "FC-only (48.0%; seed 1: 38.0%), where the paper has 99.0% against 95.1%. On the "
        "digit task learned FC+CONV reaches 93.15% (seed 1: 92.75%) against CONV's 94.40% "
        "(94.60%): 1.25 and 1.85 points under it, so the claim 'learned >= CONV - 1' misses "
        "in both seeds (before the FC path started at zero it missed by 33 points: 61.4%). "
        "The learned priors neither cause nor close that gap, measured with the learned "
        "row's command and a fixed prior (`ella train --dataset D --group trivial --width 4 "
        "--train-size 4000 --test-size 2000 --norm none --head-init default --paths fc conv "
        "--lr-scaling none --prior-update adam --prior-step 1.0 --marglik-frequency 3 "
        "--no-learn-priors`, seed 0): the MAP FC+CONV mixer reaches 93.30% on the digit task "
        "and 88.65% on (digit, quadrant), learned - MAP -0.15 and -0.20. The gap is the "
        "mixture's: FC+CONV trains about a point under CONV alone on the digit task at this "
        "budget. The evidence keeps FC at 70% of the effective parameters on the digit task "
        "and 72% on (digit, quadrant) (seed 1: 70% and 72%), so the shares do not tell the "
        "translation-invariant task from the other; with the Adam rounds the profile pins, "
        "the priors did not converge (last change 0.53 and 0.60).",
        "asked as a discrete choice (written by hand, 2026-11-26; `python -m "
        "benchmarks.path_select --table 1 --seeds 0 1`, path_select_table1/): greedy path "
        "selection by the evidence on this profile's learned runs drops FC on the digit task "
        "(+1894 and +1997 nats; CONV alone at 95.65 and 95.25% against CONV MAP's 93.95 and "
        "94.65% in the same file) and keeps FC+CONV on (digit, quadrant) (dropping FC costs "
        "3398 and 3441 nats; 92.35 and 92.15%). All three claims hold for the selected "
        "networks at both seeds, which had 20 epochs more than the rows above.",
    ],
    "cpu_80": [
        "how this profile was chosen (2026-11-25): the cpu profile with --epochs 80 against "
        "20, the learned FC+CONV mixer on the validation split of both tasks (2000 training "
        "images, the last 1000 of the first 3000 held out, seed 0; recipe.md, 'Table 1 at 80 "
        "epochs on the validation split'): digit 96.0% / NLL 0.160 against 89.6% / 0.348, "
        "(digit, quadrant) 90.7% / 0.307 against 78.4% / 0.669. Seed 1 is in seed1/ "
        "(`--seed 1 --results-dir benchmarks/results/table1_cpu_80/seed1`, 15.7 min).",
        "analysis (written by hand from this file, seed1/ and one extra run, 2026-11-25; not "
        "computed): all three claims hold at seed 0; at seed 1 the digit claim misses. CONV "
        "collapses on (digit, quadrant) (22.55%; seed 1: 23.35%) and learned FC+CONV solves "
        "it: 94.10% (seed 1: 93.65%), against 88.5% at 20 epochs. On the digit task learned "
        "FC+CONV reaches 95.80% against CONV's 96.25% (-0.45: holds) and at seed 1 95.70% "
        "against 96.90% (-1.2: misses by 0.2); at 20 epochs it missed by 1.25 and 1.85, so "
        "the longer training closed most of the gap that the FC+CONV mixture's training had "
        "opened. Its test NLL is the lower at seed 0 (0.131 against 0.158) and the higher at "
        "seed 1 (0.122 against 0.117). The FC-only networks of seed 1 never trained: "
        "repeated with `ella train --dataset quadrant_mnist --data-dir ../shared/data --group "
        "trivial --paths fc --no-learn-priors --seed 1 --epochs 80 --train-size 4000 "
        "--test-size 2000 --width 4 --norm none --head-init default --lr-scaling none`, "
        "which reproduces its 11.70%, the train loss rises from 2.35 to 2.62 at epoch 3 and "
        "then stays at 2.33 with 11.1% train accuracy (the most frequent class) to epoch 80: "
        "the network died in its first epochs. The 20-epoch seed 1 trained (45.80% and "
        "37.95%), so seed 1's FC rows are a failed run, not FC's accuracy, and 'learned >= "
        "fc_map on (digit, quadrant)' is read from seed 0 (94.10% against 56.15%). The "
        "shares: the evidence moves the learned mixer from FC to CONV round after round on "
        "both tasks (mean FC/CONV 22/78 on digit, 24/76 on (digit, quadrant); seed 1: 21/79 "
        "and 26/74), so the mean shares barely tell the tasks apart, but per layer the "
        "last two layers keep more FC where the labels need the position: 17 and 15% on "
        "(digit, quadrant) against 9 and 5% on digit (seed 1: 22 and 19% against 8 and 4%), "
        "the direction the paper describes (symmetry broken in the last layers). The priors "
        "came close to converging (largest change of a log precision in the last round "
        "0.13 and 0.06; seed 1: 0.09 and 0.05; tolerance 0.05).",
    ],
}
#: the ``cpu`` profile (why these settings: the comments in :data:`PROFILES`)
CPU = dict(
    train_size=4000, test_size=2000, width=4, norm="none", head_init="default",
    lr_scaling="none", zero_init=("fc",), **ADAM_ROUNDS, **MC_ROUNDS,
)  # fmt: skip
PROFILES = {
    "smoke": SMOKE,
    # ella train's recipe (20 epochs, shifts of up to 2 px, max downsampling, evidence
    # rounds at epochs 6-18, MC GGN) without instance norm and the head's standardisation,
    # which stop FC networks on the trivial group: chosen on a validation split of both
    # tasks (benchmarks/results/recipe.md, "The FC path's rank")
    # (Adam's rate per fan-in, the default since, was not part of that validation: pinned off);
    # the FC path starting at zero in the learned mixer (ella train's default since
    # 2026-11-25) validated better on both tasks (recipe.md, "The FC path starts at zero")
    "cpu": CPU,
    # the same with four times the epochs, chosen over 20 on the validation split of both
    # tasks (recipe.md, "Table 1 at 80 epochs on the validation split")
    "cpu_80": {**CPU, "epochs": 80},
    "paper": {**PAPER_SCHEDULE, "width": 8},
}  # fmt: skip


def task_config(task: str, model: str, profile: dict, args: argparse.Namespace) -> TrainConfig:
    """One run of the table: ``model`` (a key of :data:`MODELS`) on ``task`` (a key of
    :data:`TASKS`) at ``profile`` (``args``: data directory, seed and device)."""
    paths, learn = MODELS[model]
    return TrainConfig(
        dataset=TASKS[task], data_dir=args.data_dir, group="trivial", paths=paths,
        learn_priors=learn, seed=args.seed, device=args.device, progress=False, **profile,
    )  # fmt: skip


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
        *(ANALYSIS.get(payload["profile"], []) if payload["seed"] == 0 else []),
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
    write(args, "table1", payload, "\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
