"""Where an evidence round of ``ella train`` spends its time, beside an epoch.

Trains ``ella train``'s default run (or a tiny one with ``--profile smoke``) for one epoch,
fits one round to warm up, then runs ``--rounds`` rounds (``Trainer.evidence_round``)
and times the learner's round inside each (``PriorLearner.evidence_round``, the row
"round") with wall-clock timers around its parts: the native Kronecker factors (the forward, the
output factors' backward passes and products, the rest: input factors and sums), the
eigenvalues of the factors, the rest of the evidence's terms, the closed-form step on the
prior precisions, and the round's report. A second epoch in the same process is the
yardstick. Timers (the sections ella marks, :mod:`ella.runtime.timing`), not a profiler: a
profiler's per-call overhead moves Python-heavy parts.

    python -m experiments.round_parts      # about a minute on 2 cores
"""

from __future__ import annotations

import argparse
import tempfile
import time

from ella.runtime.timing import SECTIONS, sections
from ella.train import TrainConfig, Trainer
from studies.results import EXPERIMENT_RESULTS, environment, write_results

PROFILES = {
    "default": {},
    "smoke": dict(train_size=64, test_size=32, width=1, batch_size=32, marglik_subset_size=32),
}

#: the timed sections (:mod:`ella.runtime.timing`), in the order of the table; nested ones are
#: parts of the one above
TIMED = [
    "round",
    "evidence fit",
    "native factors",
    "forward",
    "output factors (backward passes, products)",
    "evidence terms",
    "eigenvalues",
    "closed-form optimum",
    "learner fit (fit, step)",
]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--rounds", type=int, default=3, help="rounds timed (default: 3)")
    parser.add_argument(
        "--results-dir", default=str(EXPERIMENT_RESULTS), help="where to write results"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    config = TrainConfig(progress=False, **PROFILES[args.profile])
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out)
        trainer.state.epoch = 1
        trainer.train_epoch()
        trainer.evidence_round()  # warm-up
        with sections() as seconds:
            for _ in range(args.rounds):
                trainer.evidence_round()
        trainer.state.epoch = 2
        start = time.perf_counter()
        trainer.train_epoch()
        epoch = time.perf_counter() - start
    missing = sorted(set(TIMED) - set(SECTIONS))
    if missing:
        raise SystemExit(f"ella marks no section {missing}: see ella.runtime.timing.SECTIONS")
    per_round = {label: seconds[label] / args.rounds for label in TIMED}
    whole = per_round["round"]
    derived = {
        "native factors: the rest (input factors, sums)": per_round["native factors"]
        - per_round["forward"]
        - per_round["output factors (backward passes, products)"],
        "evidence terms: the rest": per_round["evidence terms"] - per_round["eigenvalues"],
        "evidence fit: the rest (laplace-torch around the factors, checks)": per_round[
            "evidence fit"
        ]
        - per_round["native factors"]
        - per_round["evidence terms"],
        "report and the rest of the round": whole - per_round["learner fit (fit, step)"],
    }
    rows = [(label, per_round[label]) for label in TIMED] + list(derived.items())
    env = environment("cpu")
    payload = {
        "command": f"python -m experiments.round_parts --profile {args.profile}",
        "environment": env,
        "config": config.to_dict(),
        "rounds": args.rounds,
        "epoch_s": epoch,
        "seconds_per_round": dict(rows),
    }
    lines = [
        "# Where an evidence round spends its time",
        "",
        f"`{payload['command']}` on {env['cpu']}, {env['threads']} threads, {env['date']}. "
        f"Mean of {args.rounds} rounds after one epoch and one warm-up round; an epoch in "
        f"the same process took {epoch:.2f} s ({config.train_size} images).",
        "",
        "| part | s per round | share of the round |",
        "|---|---:|---:|",
        *[f"| {label} | {s:.3f} | {100 * s / whole:.0f}% |" for label, s in rows],
        "",
        f"A round is {whole / epoch:.2f} epochs.",
        "",
    ]
    write_results(f"round_parts_{args.profile}", payload, "\n".join(lines), args.results_dir)
    print("\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
