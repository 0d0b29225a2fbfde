"""Does the evidence follow the data's symmetry? The guide's reliability rows, measured anew.

MNIST (upright digits: no rotation symmetry to find) against rotated MNIST (GCONV should
win), with ``ella train``'s defaults on the shared data (``--data-dir``), three questions:

- ``corners``: the CONV-only and the GCONV-only network, each trained from scratch; the
  evidence's winner of the two (1,000 training images at seeds 0-4, 5,000 at seeds 0-1).
- ``drop``: the CONV+GCONV mixer at 5,000 images, then ``ella select RUN --drop-only``:
  the control and each path dropped from every layer, trained on 20 epochs; the answer is
  the drop that raises the Laplace evidence most among the candidates that kept their fit
  (:func:`ella.selection.kept_their_fit`), or none.
- ``select``: the default mixer (FC+CONV+GCONV) at 5,000 images, then ``ella select RUN``
  (greedy, 20 epochs a network). Its first round is the ``drop`` question for this mixer.

By one rule (:func:`studies.rules.follows_rotation`), the evidence follows the data
where it keeps CONV on the upright digits and drops it on the rotated ones, keeping GCONV
there. Each step resumes from ``--work-dir`` (a finished run or selection is reused), and
the results files are written after every step, so a call that is stopped loses at most
the network in training:

    python -m experiments.reliability --work-dir runs/reliability --data-dir ../shared/data
    python -m experiments.reliability ... --parts corners     # about 20 minutes on 2 cores
    python -m experiments.reliability ... --render-only

Results: ``experiments/results/reliability.{json,md}``; the guide's table
(docs/guide/symmetry.md) is written from them by ``python -m benchmarks.claims``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

from ella.rundir import CHECKPOINT, CONFIG, RESULTS, SELECT_EPOCHS, read_json
from ella.selection import drop_each_path, kept_their_fit, null_model, select_paths
from ella.train import TrainConfig, train
from studies.results import EXPERIMENT_RESULTS, environment, write_results
from studies.rules import as_paths, follows_rotation, over_seeds, paths_upper
from studies.runner import default_data_dir

__all__ = ["PARTS", "main", "verdicts"]

DATASETS = ("mnist", "rotated_mnist")
#: training images -> test images
TEST_SIZES = {1000: 1000, 5000: 2000}
#: training images -> seeds of the single-path networks
CORNER_SEEDS = {1000: (0, 1, 2, 3, 4), 5000: (0, 1)}
#: training images and seeds of the mixers whose paths are dropped or selected
SIZE, SEEDS = 5000, (0, 1)
#: the questions, in the order they run (cheapest first)
PARTS = ("corners", "drop", "select")
NAME = "reliability"
RECORD = "docs/research/0043-reliability-rows-measured.md"


def trained(work: Path, dataset: str, size: int, seed: int, paths: tuple[str, ...], data_dir):
    """The run directory of ``ella train`` (defaults but these), trained unless finished."""
    test_size = TEST_SIZES[size]
    out = work / f"{dataset}_{size}_{'+'.join(paths)}_seed{seed}"
    if not (out / RESULTS).is_file():
        config = TrainConfig(
            dataset=dataset, data_dir=data_dir, train_size=size, test_size=test_size,
            paths=paths, seed=seed, progress=False,
        )  # fmt: skip
        # a call stopped before the first checkpoint leaves config.json: start it again
        train(config, out, resume=(out / CHECKPOINT).is_file() or (out / CONFIG).is_file())
    return out


def run_row(out: Path) -> dict:
    done = read_json(out / RESULTS, "run's results")
    return {
        "test_accuracy": done["test_accuracy"],
        "test_nll": done["test_nll"],
        "log_evidence": done["log_marglik_reported_state"],
        "seconds": done["train_time_s"],
    }


def corners(work: Path, data_dir) -> Iterator[dict]:
    for size, seeds in CORNER_SEEDS.items():
        for seed in seeds:
            for dataset in DATASETS:
                row = {"part": "corners", "dataset": dataset, "seed": seed, "train_size": size}
                for path in ("conv", "gconv"):
                    row[path] = run_row(trained(work, dataset, size, seed, (path,), data_dir))
                row["winner"] = max(("conv", "gconv"), key=lambda p: row[p]["log_evidence"])
                yield row


def drops(work: Path, data_dir) -> Iterator[dict]:
    for seed in SEEDS:
        for dataset in DATASETS:
            out = trained(work, dataset, SIZE, seed, ("conv", "gconv"), data_dir)
            record = drop_each_path(out, SELECT_EPOCHS, data_dir, progress=True)
            rows, null = record["rows"], null_model(out, data_dir)
            # the round's winner by ella select's rule: the control, or the best candidate
            # that kept its fit (the control wins ties)
            eligible = [rows[0], *kept_their_fit(rows, null)]
            dropped = max(eligible, key=lambda r: r["log_evidence"])["dropped"]
            yield {
                "part": "drop", "dataset": dataset, "seed": seed, "train_size": SIZE,
                "paths": ["conv", "gconv"], "run": run_row(out), "null": null,
                "rows": rows, "dropped": dropped,
                "kept": [p for p in ("conv", "gconv") if p != dropped],
            }  # fmt: skip


def selections(work: Path, data_dir) -> Iterator[dict]:
    for seed in SEEDS:
        for dataset in DATASETS:
            out = trained(work, dataset, SIZE, seed, ("fc", "conv", "gconv"), data_dir)
            record = select_paths(out, SELECT_EPOCHS, data_dir, progress=True)
            first = record["rounds"][0]
            yield {
                "part": "select", "dataset": dataset, "seed": seed, "train_size": SIZE,
                "paths": ["fc", "conv", "gconv"], "run": run_row(out), "null": record["null"],
                "rounds": record["rounds"], "kept": record["kept"],
                # the first round alone is the drop question for the whole mixer
                "first_round_kept": [p for p in first["kept"] if p != first["winner"]],
            }  # fmt: skip


STEPS = {"corners": corners, "drop": drops, "select": selections}


def _pairs(rows: list[dict], part: str, size: int, key: str) -> dict[int, bool]:
    """Per seed with both data sets measured: whether ``key`` (the paths kept, or the
    winner of two) follows the rotation."""
    mine = {
        (r["dataset"], r["seed"]): r for r in rows if r["part"] == part and r["train_size"] == size
    }
    found = {}
    for seed in sorted({s for _, s in mine}):
        if ("mnist", seed) in mine and ("rotated_mnist", seed) in mine:
            upright, rotated = (mine[d, seed][key] for d in DATASETS)
            found[seed] = follows_rotation(as_paths(upright), as_paths(rotated))
    return found


#: (part, training images, the row's key, the claim's words)
QUESTIONS = (
    ("corners", 1000, "winner", "CONV-only against GCONV-only from scratch, 1,000 images"),
    ("corners", 5000, "winner", "CONV-only against GCONV-only from scratch, 5,000 images"),
    ("drop", 5000, "kept", "drop one path (--drop-only), CONV+GCONV, 5,000 images"),
    ("select", 5000, "first_round_kept",
     "drop one path (--drop-only), FC+CONV+GCONV, 5,000 images"),
    ("select", 5000, "kept", "greedy selection, FC+CONV+GCONV, 5,000 images"),
)  # fmt: skip


def verdicts(rows: list[dict]) -> dict[str, dict]:
    """Per question measured: its seeds, whether each follows the data, and the answer over
    the seeds (:func:`studies.rules.over_seeds`)."""
    found = {}
    for part, size, key, words in QUESTIONS:
        flags = _pairs(rows, part, size, key)
        if flags:
            found[words] = {
                "part": part, "train_size": size, "key": key, "follows": flags,
                "answer": over_seeds(list(flags.values())),
            }  # fmt: skip
    return found


def _candidate(row: dict, control: dict) -> str:
    """A candidate's dropped path, test accuracy and evidence against its round's control."""
    text = f"{row['dropped']} {100 * row['test_accuracy']:.2f}%"
    gain = row["log_evidence"] - control["log_evidence"]
    return text if row is control else f"{text} {gain:+.0f}"


def markdown(payload: dict) -> str:
    rows = payload["rows"]
    lines = [
        "# Does the evidence follow the data's symmetry? The reliability rows",
        "",
        f"`{payload['command']}`; `ella train` defaults on the shared data, "
        f"{payload['environment']['device']}; "
        f"this call {payload['seconds_this_call'] / 60:.1f} min.",
        "",
    ]  # fmt: skip
    corner = [r for r in rows if r["part"] == "corners"]
    if corner:
        lines += [
            "## CONV-only against GCONV-only, each trained from scratch",
            "",
            "| images | data set | seed | CONV acc / evidence | GCONV acc / evidence "
            "| GCONV - CONV | winner |",
            "|---:|---|---:|---|---|---:|---|",
        ]  # fmt: skip
        for r in corner:
            c, g = r["conv"], r["gconv"]
            lines.append(
                f"| {r['train_size']} | {r['dataset']} | {r['seed']} "
                f"| {100 * c['test_accuracy']:.2f} / {c['log_evidence']:.0f} "
                f"| {100 * g['test_accuracy']:.2f} / {g['log_evidence']:.0f} "
                f"| {g['log_evidence'] - c['log_evidence']:+.0f} | {r['winner'].upper()} |"
            )
        lines.append("")
    for part, title in (("drop", "Drop one path (`--drop-only`), CONV+GCONV"),
                        ("select", "Greedy selection (`ella select`), FC+CONV+GCONV")):  # fmt: skip
        mine = [r for r in rows if r["part"] == part]
        if not mine:
            continue
        lines += [
            f"## {title}, {SIZE} images, {SELECT_EPOCHS} epochs a network",
            "",
            "| data set | seed | run acc | round: candidate acc, evidence vs control "
            "| kept | no network |",
            "|---|---:|---:|---|---|---:|",
        ]  # fmt: skip
        for r in mine:
            rounds = r.get("rounds") or [{"rows": r["rows"]}]
            steps = []
            for number, this in enumerate(rounds, start=1):
                control = this["rows"][0]
                candidates = ", ".join(_candidate(x, control) for x in this["rows"])
                steps.append(f"{number}: {candidates}")
            lines.append(
                f"| {r['dataset']} | {r['seed']} | {100 * r['run']['test_accuracy']:.2f} "
                f"| {'; '.join(steps)} | {paths_upper(r['kept'])} "
                f"| {r['null']['log_evidence']:.0f} |"
            )
        lines.append("")
    lines += ["## Does it follow the data?", ""]
    for words, v in payload["verdicts"].items():
        seeds = ", ".join(f"seed {s}: {'yes' if ok else 'no'}" for s, ok in v["follows"].items())
        lines.append(f"- {words}: **{v['answer']}** ({seeds})")
    lines += ["", f"Analysis: {RECORD}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", default="runs/reliability", help="the runs (resumed)")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--results-dir", default=str(EXPERIMENT_RESULTS))
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    root = Path(args.results_dir)
    earlier = root / f"{NAME}.json"
    payload = read_json(earlier, "results file") if earlier.is_file() else {"rows": []}
    if args.render_only:
        write_results(NAME, payload, markdown(payload), root)
        return payload
    if args.data_dir is None:
        parser.error("--data-dir: where MNIST is (../shared/data in a checkout)")
    began = time.perf_counter()
    rows = [r for r in payload["rows"] if r["part"] not in args.parts]
    for part in (p for p in PARTS if p in args.parts):
        for row in STEPS[part](Path(args.work_dir), args.data_dir):
            rows = [r for r in rows if (r["part"], r["dataset"], r["seed"], r["train_size"])
                    != (row["part"], row["dataset"], row["seed"], row["train_size"])]  # fmt: skip
            rows.append(row)
            rows.sort(key=lambda r: (PARTS.index(r["part"]), r["train_size"], r["seed"],
                                     DATASETS.index(r["dataset"])))  # fmt: skip
            found = verdicts(rows)
            payload = {
                "command": "python -m experiments.reliability",
                "environment": environment("cpu"),
                "seconds_this_call": time.perf_counter() - began,
                "rows": rows,
                "verdicts": found,
                "claims": {words: v["answer"].startswith("yes") for words, v in found.items()},
            }
            write_results(NAME, payload, markdown(payload), root)
    return payload


if __name__ == "__main__":
    main()
