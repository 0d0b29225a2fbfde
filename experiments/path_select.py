"""Table 3's claims asked as a discrete choice: which paths does the evidence select?

The continuous per-path priors of Table 3's learned column follow the weights training
grew and share out the effective parameters alike on every set
(docs/research/0031-table3-cpu.md). This trains
the same learned rows (the C4 FC+CONV+GCONV mixer at a Table 3 profile, one run per data
set and seed, kept in ``--work-dir``) and then selects their paths greedily by the Laplace
evidence, as ``ella select RUN`` does (:func:`ella.selection.select_paths`):
each round trains on, for ``--select-epochs``, the network as the round before left it and,
for each path it still has, the same network with that path at zero in every layer, and
drops the path whose removal raises the evidence most, until none does.

Table 3's share claims are then read from the selected networks' shares of the effective
parameters (at their evidence-optimal precisions, a dropped path holding none), at every
seed. Their accuracy is compared with the whole network trained on alike (the first
round's control), which has had fewer epochs when the selection took more than one round.

    python -m experiments.path_select --work-dir /tmp/path_select            # cpu profile
    python -m experiments.path_select --work-dir /tmp/path_select --seeds 0 1 \\
        --datasets mnist rotated_mnist
    python -m experiments.path_select --work-dir /tmp/path_select --render-only

``--table 1`` asks Table 1's question the same way: the FC+CONV mixer (trivial group) on
the digit task and on the (digit, quadrant) task, against the CONV-only and FC-only MAP
rows that Table 1's claims compare it with (trained alongside, in the work directory):

    python -m experiments.path_select --table 1 --work-dir /tmp/path_select \
        --results-dir experiments/results/path_select_table1

Both steps resume: a finished run or selection in the work directory is reused. Results go
to ``experiments/results/`` unless ``--results-dir`` says otherwise. What they show:
docs/research/0018-greedy-path-selection.md (Table 3) and
docs/research/0019-table1-as-path-selection.md (Table 1).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ella.nn import PATH_NAMES
from ella.rundir import CHECKPOINT, RESULTS, read_json
from ella.selection import kept_their_fit, select_paths
from ella.train import TrainConfig, train
from studies import table1, table3
from studies.results import EXPERIMENT_RESULTS
from studies.runner import (
    analysis_lines,
    as_experiment,
    claims_markdown,
    common_arguments,
    header_line,
    stamp,
    write,
)


def table3_claims(rows: list[dict]) -> dict[str, bool]:
    """Table 3's share claims (:func:`studies.table3.share_claims`) on the selected
    networks of one seed."""
    get = {(r["dataset"], "learned"): {"shares": r["selected"]["shares"]} for r in rows}
    return table3.share_claims(get, [r["dataset"] for r in rows], "shares", " (selected network)")


def table1_claims(rows: list[dict]) -> dict[str, bool]:
    """Table 1's claims on the selected networks of one seed: against the MAP rows the
    table compares its learned mixer with, and which paths the selection keeps (CONV alone
    where the labels are translation invariant, FC where they need the position)."""
    found = {}
    for r in rows:
        selected = r["selected"]["test_accuracy"]
        if r["dataset"] == "digit":
            conv = r["references"]["conv_map"]["test_accuracy"]
            found["selected >= conv_map - 1 point on digit"] = selected >= conv - 0.01
            found["the selection drops FC on digit"] = "fc" not in r["kept"]
        if r["dataset"] == "quadrant":
            fc = r["references"]["fc_map"]["test_accuracy"]
            found["selected >= fc_map on (digit, quadrant)"] = selected >= fc
            found["the selection keeps FC on (digit, quadrant)"] = "fc" in r["kept"]
    return found


@dataclass(frozen=True)
class Table:
    """One table of the paper asked as a path selection.

    Attributes:
        name: the results files' name (``NAME.json``, ``NAME.md``).
        title: the Markdown file's title.
        about: what the runs are, for the Markdown file.
        profiles: the table's benchmark profiles.
        rows: the table's rows (data sets or tasks), in order.
        config: ``(row, model, profile, args, source) -> TrainConfig``: ``model`` is
            ``"learned"`` (the run whose paths are selected) or a reference's name.
        claims: the claims on one seed's rows.
        references: per row, the models trained alongside for the claims.
        record: the decision record that reads the results (under ``docs/research/``).
        prefix: of the run directories' names in the work directory.
    """

    name: str
    title: str
    about: str
    profiles: dict[str, dict]
    rows: tuple[str, ...]
    config: Callable[[str, str, dict, argparse.Namespace, str], TrainConfig]
    claims: Callable[[list[dict]], dict[str, bool]]
    references: dict[str, tuple[str, ...]] = field(default_factory=dict)
    record: str = ""
    prefix: str = ""


TABLES = {
    "3": Table(
        name="path_select",
        title="Table 3's claims as a discrete choice: greedy path selection by the evidence",
        about="`ella train` at the profile, FC+CONV+GCONV, C4",
        profiles=table3.PROFILES,
        rows=tuple(table3.PAPER),
        config=lambda row, model, profile, args, source: table3.row_config(
            row, True, profile, source, args
        ),
        claims=table3_claims,
        record="docs/research/0018-greedy-path-selection.md",
    ),
    "1": Table(
        name="path_select_table1",
        title="Table 1's claims as a discrete choice: greedy path selection by the evidence",
        about="Table 1's learned row: `ella train` at the profile, FC+CONV, trivial group",
        profiles=table1.PROFILES,
        rows=tuple(table1.TASKS),
        config=lambda row, model, profile, args, source: table1.task_config(
            row, model, profile, args
        ),
        claims=table1_claims,
        references={"digit": ("conv_map",), "quadrant": ("fc_map",)},
        record="docs/research/0019-table1-as-path-selection.md",
        prefix="table1_",
    ),
}


def run_dir(args: argparse.Namespace, table: Table, row: str, seed: int, model: str) -> Path:
    model_part = "" if model == "learned" else f"_{model}"
    return Path(args.work_dir) / f"{table.prefix}{args.profile}_{row}{model_part}_seed{seed}"


def trained(
    args: argparse.Namespace, table: Table, row: str, model: str, seed: int, source: str
) -> Path:
    """The run directory of ``model`` on ``row`` at ``seed``, trained unless it finished."""
    out = run_dir(args, table, row, seed, model)
    profile = table.profiles[args.profile]
    config = table.config(row, model, profile, _with_seed(args, seed), source)
    if not (out / RESULTS).is_file():
        train(config, out, resume=(out / CHECKPOINT).is_file())
    return out


def select_row(
    args: argparse.Namespace, table: Table, dataset: str, seed: int, source: str
) -> dict:
    """Train (or reuse) the learned run of ``dataset`` at ``seed`` and the table's
    references, select the run's paths, and summarise them."""
    out = trained(args, table, dataset, "learned", seed, source)
    references = {}
    for model in table.references.get(dataset, ()):
        done = read_json(trained(args, table, dataset, model, seed, source) / RESULTS, "results")
        references[model] = {k: done[k] for k in ("test_accuracy", "test_nll")}
    record = select_paths(out, args.select_epochs, args.data_dir, progress=True)
    results = read_json(out / RESULTS, "run's results")
    last = record["rounds"][-1]
    selected = next(r for r in last["rows"] if r["dropped"] == last["winner"])
    return {
        "dataset": dataset,
        "seed": seed,
        "references": references,
        "run": {
            "test_accuracy": results["test_accuracy"],
            "test_nll": results["test_nll"],
            "log_evidence": results["log_marglik_reported_state"],
            "seconds": results["train_time_s"],
        },
        "null": record["null"],
        "rounds": record["rounds"],
        "kept": record["kept"],
        "selected": selected,
        "control": record["rounds"][0]["rows"][0],
        "selection_seconds": sum(r["seconds"] for t in record["rounds"] for r in t["rows"]),
    }


def _with_seed(args: argparse.Namespace, seed: int) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "seed": seed})


def claims(rows: list[dict], seeds: list[int], table: Table = TABLES["3"]) -> dict[str, bool]:
    """The table's claims on the selected networks (:attr:`Table.claims`) and their accuracy
    against the whole network trained on alike; each holds at every seed."""
    result: dict[str, bool] = {}
    for seed in seeds:
        mine = [r for r in rows if r["seed"] == seed]
        found = table.claims(mine)
        for r in mine:
            found[f"selected >= the whole network trained on alike in test accuracy on "
                  f"{r['dataset']}"] = (
                r["selected"]["test_accuracy"] >= r["control"]["test_accuracy"]
            )  # fmt: skip
        for text, holds in found.items():
            result[text] = result.get(text, True) and holds
    return result


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} (sd {statistics.stdev(values):.2f})"


def markdown(payload: dict, table: Table) -> str:
    rows = payload["rows"]
    lines = [
        f"# {table.title}",
        "",
        header_line(payload, f"--select-epochs {payload['select_epochs']}"),
        "",
        f"Each learned run ({table.about}) is followed by "
        "`ella select RUN`: rounds that train on the network and, for each of "
        "its paths, the network without it, dropping the path whose removal raises the "
        "Laplace evidence (exact GGN, each kept group's precision at its optimum) most. "
        "'whole, trained on' is the first round's control; 'selected' the last round's winner.",
        "",
        "| data set | seed | run acc | selection (log evidence gain of the drop) "
        "| selected | selected acc / whole, trained on | selected NLL / whole | "
        "selected shares FC/CONV/GCONV | log evidence selected - whole | log evidence "
        "selected / no network | min |",
        "|---|---:|---:|---|---|---|---|---|---:|---|---:|",
    ]
    for r in rows:
        steps = []
        for number, this in enumerate(r["rounds"], start=1):
            control = this["rows"][0]["log_evidence"]
            if this["winner"] == "none":
                # the best candidate that could have won: a collapsed one cannot
                fitting = kept_their_fit(this["rows"], r["null"])
                if fitting:
                    best = max(fitting, key=lambda x: x["log_evidence"])
                    steps.append(
                        f"{number}: keep (best drop {best['dropped'].upper()} "
                        f"{best['log_evidence'] - control:+.0f})"
                    )
                else:
                    steps.append(f"{number}: keep (every drop collapsed)")
            else:
                gain = next(x for x in this["rows"] if x["dropped"] == this["winner"])
                steps.append(
                    f"{number}: drop {this['winner'].upper()} {gain['log_evidence'] - control:+.0f}"
                )
        s, c = r["selected"], r["control"]
        shares = "/".join(f"{s['shares'].get(p, 0.0):.0f}" for p in PATH_NAMES)
        minutes = (r["run"]["seconds"] + r["selection_seconds"]) / 60
        lines.append(
            f"| {r['dataset']} | {r['seed']} | {100 * r['run']['test_accuracy']:.2f} "
            f"| {'; '.join(steps)} | {'+'.join(p.upper() for p in r['kept'])} "
            f"| {100 * s['test_accuracy']:.2f} / {100 * c['test_accuracy']:.2f} "
            f"| {s['test_nll']:.3f} / {c['test_nll']:.3f} | {shares} "
            f"| {s['log_evidence'] - c['log_evidence']:+.0f} "
            f"| {s['log_evidence']:.0f} / {r['null']['log_evidence']:.0f} | {minutes:.1f} |"
        )
    references = [
        f"{r['dataset']} seed {r['seed']}: {model} {100 * done['test_accuracy']:.2f}% "
        f"(NLL {done['test_nll']:.3f})"
        for r in rows
        for model, done in r.get("references", {}).items()
    ]
    if references:
        lines += ["", "The MAP rows the claims compare with (trained alike, at the profile):", ""]
        lines += [f"- {line}" for line in references]
    seeds = sorted({r["seed"] for r in rows})
    if len(seeds) > 1:
        lines += ["", "Over the seeds (mean and sd):", ""]
        for d in dict.fromkeys(r["dataset"] for r in rows):
            mine = [r for r in rows if r["dataset"] == d]
            kept = ", ".join("+".join(p.upper() for p in r["kept"]) for r in mine)
            lines.append(
                f"- {d}: selected {kept}; test accuracy selected "
                f"{spread([100 * r['selected']['test_accuracy'] for r in mine])}, whole "
                f"trained on {spread([100 * r['control']['test_accuracy'] for r in mine])}"
            )
    lines += ["", *claims_markdown(payload["claims"], payload.get("notes", []))]
    lines += analysis_lines(table.record)
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, {p: None for t in TABLES.values() for p in t.profiles})
    parser.set_defaults(results_dir=str(EXPERIMENT_RESULTS))
    parser.add_argument("--table", choices=sorted(TABLES), default="3")
    every_row = list(dict.fromkeys(row for t in TABLES.values() for row in t.rows))
    parser.add_argument(
        "--datasets", nargs="+", choices=every_row, help="the table's rows (default: all)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--select-epochs", type=int, default=20)
    parser.add_argument(
        "--work-dir", required=True, help="where the runs and their selections are kept"
    )
    args = parser.parse_args(argv)
    table = TABLES[args.table]
    if args.profile not in table.profiles:
        parser.error(f"--profile {args.profile}: Table {args.table} has {sorted(table.profiles)}")
    args.datasets = args.datasets or list(table.rows)
    if unknown := [d for d in args.datasets if d not in table.rows]:
        parser.error(f"--datasets {' '.join(unknown)}: Table {args.table}'s rows are {table.rows}")
    if args.select_epochs < 1:
        parser.error(f"--select-epochs must be at least 1, got {args.select_epochs}")
    root = Path(args.results_dir)
    if args.render_only:
        # a file made when this script lived under benchmarks/ names its module there
        payload = as_experiment(read_json(root / f"{table.name}.json", "results file"))
    else:
        source = table3.cifar_source(args.data_dir)
        rows = [
            select_row(args, table, d, seed, source) for seed in args.seeds for d in args.datasets
        ]
        # the runs' and selections' own times: a call that reuses them takes seconds
        seconds = sum(r["run"]["seconds"] + r["selection_seconds"] for r in rows)
        payload = {
            **stamp(args, table.name, table.profiles[args.profile], seconds),
            "table": args.table,
            "seed": ", ".join(map(str, args.seeds)),
            "seeds": args.seeds,
            "select_epochs": args.select_epochs,
            "cifar10_source": source,
            "rows": rows,
        }
        payload["command"] = (
            f"python -m experiments.path_select --table {args.table} --profile {args.profile} "
            f"--work-dir DIR --seeds {' '.join(map(str, args.seeds))} "
            f"--datasets {' '.join(args.datasets)} --select-epochs {args.select_epochs}"
        )
    payload["claims"] = claims(payload["rows"], payload["seeds"], table)
    payload["notes"] = []
    write(args, table.name, payload, markdown(payload, table))
    return payload


if __name__ == "__main__":
    main()
