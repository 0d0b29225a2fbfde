"""How deep should a path reach? The evidence's answer layer by layer.

Greedy path selection (``ella select RUN``) drops a path from every layer
at once. The paper's narrative is finer: symmetry in the early layers, broken in the
last ones. This asks it directly of a learned run: for k = 0, 1, ..., L it trains the run
on for ``--epochs`` with ``--path`` at zero in its first k relaxed layers
(:func:`ella.selection.train_on`, k = 0 the control), and scores each with the Laplace
evidence of the network it leaves (exact GGN, every group's precision at its optimum).
The evidence's choice is the k with the highest evidence among the candidates that did
not collapse (:func:`ella.selection.collapsed`): the path is dropped from layers 1..k
and kept after. ``--side output`` asks the mirror question, the path at zero in the last
k layers (symmetry kept near the input, broken near the output: the question for the
symmetric paths).

    python -m experiments.path_depth RUN [RUN ...] --path fc --results-dir DIR
    python -m experiments.path_depth RUN [RUN ...] --path gconv --side output --results-dir DIR

Every candidate is saved as it finishes (``path_depth.json``); a second call reuses them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ella.io import save_json
from ella.rundir import RESULTS, read_json
from ella.selection import check_selectable, collapsed, kept_their_fit, null_model, train_on
from studies.results import environment, write_markdown

NAME = "path_depth"

#: the end of the network from which a sweep drops the path: the first k layers or the last k
SIDES = ("input", "output")


def relaxed_layers(run_dir: Path) -> list[str]:
    """The run's relaxed layers (``layer1`` ...), input first, as its results name them
    (the prefixes of its prior groups, ``layer3.fc``); read without loading the run."""
    results = read_json(Path(run_dir) / RESULTS, "run's results")
    return [layer["layer"] for layer in results["effective_parameters"]]


def dropped_layers(layers: list[str], k: int, side: str) -> list[str]:
    """The k layers of ``layers`` (input first) nearest the ``side`` end, input first."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, not {side!r}")
    return layers[:k] if side == "input" else layers[len(layers) - k :]


def span(k: int, n_layers: int, side: str) -> str:
    """The layers a row drops, numbered from 1 at the input: ``1-3``, ``7-8``, ``none``."""
    if k == 0:
        return "none"
    first, last = (1, k) if side == "input" else (n_layers - k + 1, n_layers)
    return str(first) if first == last else f"{first}-{last}"


def depth_rows(
    run_dir: Path, path: str, epochs: int, saved: list[dict], save, side: str = "input"
) -> list[dict]:
    """One row per k (``path`` dropped from the k layers nearest the ``side`` end),
    reusing ``saved`` rows; ``save(rows)`` after each new one."""
    layers = relaxed_layers(run_dir)
    rows = list(saved)
    for k in range(len(rows), len(layers) + 1):
        dropped = [f"{layer}.{path}" for layer in dropped_layers(layers, k, side)]
        row, _ = train_on(run_dir, dropped, epochs, progress=True)
        rows.append({"k": k, "dropped": dropped, **row})
        save(rows)
    return rows


def choice(rows: list[dict], null: dict) -> dict:
    """The row of highest evidence among those that kept their fit (the control always)."""
    return max([rows[0], *kept_their_fit(rows, null)], key=lambda r: r["log_evidence"])


def markdown(payload: dict) -> str:
    lines = [
        f"# How deep should {payload['path'].upper()} reach? The evidence layer by layer",
        "",
        f"`{payload['command']}`; {payload['environment']['device']}; each candidate "
        f"trained on for {payload['epochs']} epochs from the run.",
        "",
    ]
    side = payload.get("side", "input")
    for name, run in payload["runs"].items():
        chosen = choice(run["rows"], run["null"])
        control = run["rows"][0]
        n_layers = len(run["rows"]) - 1
        lines += [
            f"## {name} ({run['dataset']}, seed {run['seed']})",
            "",
            f"| {payload['path'].upper()} dropped from layers | test acc % | log evidence "
            "| vs control | train log lik | collapsed |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in run["rows"]:
            lines.append(
                f"| {span(r['k'], n_layers, side)} | {100 * r['test_accuracy']:.2f} "
                f"| {r['log_evidence']:.0f} "
                f"| {r['log_evidence'] - control['log_evidence']:+.0f} "
                f"| {r['log_likelihood']:.0f} "
                f"| {'yes' if r['k'] and collapsed(r, control, run['null']) else ''} |"
            )
        lines += [
            "",
            f"The evidence drops {payload['path'].upper()} from the "
            f"{'first' if side == 'input' else 'last'} {chosen['k']} of {n_layers} layers "
            f"({100 * chosen['test_accuracy']:.2f}% test "
            f"accuracy). No network (the class frequencies): {run['null']['log_evidence']:.0f}.",
            "",
        ]
    return "\n".join(lines + payload.get("notes", [])) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="learned runs of ella train")
    parser.add_argument("--path", default="fc", choices=["fc", "conv", "gconv"])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument(
        "--side",
        default="input",
        choices=SIDES,
        help="drop the path from the first k layers (input, default) or the last k (output)",
    )
    parser.add_argument("--results-dir", required=True)
    args = parser.parse_args(argv)
    for run in args.runs:  # refused before any work: what cannot be dropped, no such path
        if args.path not in check_selectable(run, args.epochs):
            parser.error(f"{run} has no {args.path} path")
        relaxed_layers(run)  # an unfinished run has no results.json: its error, now
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    file = out / f"{NAME}.json"
    payload = read_json(file, "earlier results") if file.is_file() else {}
    asked = {"path": args.path, "epochs": args.epochs, "side": args.side}
    earlier = {"side": "input", **payload}  # files from before --side swept the input side
    if any(earlier.get(key) != value for key, value in asked.items()):
        payload = {"runs": {}}
    payload.update(asked)
    payload["command"] = (
        f"python -m experiments.{NAME} {' '.join(Path(r).name for r in args.runs)} "
        f"--path {args.path} --epochs {args.epochs}"
        + (f" --side {args.side}" if args.side != "input" else "")
    )
    payload["environment"] = environment("cpu")
    configs = {run: read_json(Path(run) / "config.json", "run's config") for run in args.runs}
    names = [Path(run).name for run in args.runs]
    for run, config in configs.items():  # a run's rows are kept under its directory's name
        earlier = payload["runs"].get(Path(run).name)
        this = (config["dataset"], config["seed"])
        other = earlier is not None and (earlier["dataset"], earlier["seed"]) != this
        if names.count(Path(run).name) > 1 or other:
            parser.error(
                f"{file} keeps the rows of runs by their directory's name, and another run "
                f"is named {Path(run).name}: use another --results-dir"
            )
    for run, config in configs.items():
        run = Path(run)
        entry = payload["runs"].setdefault(
            run.name,
            {"dataset": config["dataset"], "seed": config["seed"], "null": null_model(run)},
        )

        def save(rows, entry=entry):
            entry["rows"] = rows
            save_json(payload, file)

        depth_rows(run, args.path, args.epochs, entry.get("rows", []), save, args.side)
    write_markdown(out / f"{NAME}.md", markdown(payload))
    return payload


if __name__ == "__main__":
    main()
