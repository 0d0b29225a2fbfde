"""How each path's determined fraction moves between two learned runs, layer by layer.

For two run directories of ``ella train`` (e.g. MNIST and rotated MNIST with the same
settings), reads ``results.json``'s ``effective_parameters`` rows and prints per relaxed
layer: each path's determined fraction (effective parameters / parameters, weights and
bias) in the first and second run, the factor by which it moved, the paper's per-parameter
measure for GCONV (``relative``, :func:`ella.marglik.relative_effective`), GCONV's
effective parameters over CONV's, and the learned CONV / GCONV prior-variance quotient.
Nothing is trained; the table is the reading behind
``docs/research/0015-more-images-do-not-lift-gconv.md``.

    python -m experiments.path_fractions runs/mnist runs/rotated_mnist
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ella.errors import RunDirectoryError
from ella.nn import PATH_NAMES
from ella.rundir import RESULTS, read_json


def layer_rows(results: dict) -> list[dict]:
    """The per-layer rows of a learned run's results, refused where there are none."""
    rows = results.get("effective_parameters") or []
    if not rows or any(set(PATH_NAMES) - set(r.get("parameters", {})) for r in rows):
        raise RunDirectoryError(
            "this run has no per-layer FC, CONV and GCONV effective parameters: give runs of "
            "a learned FC+CONV+GCONV mixer (ella train without --no-learn-priors)"
        )
    return rows


def fraction(row: dict, path: str) -> float:
    """Percent of ``path``'s parameters in ``row`` that the evidence counts as determined."""
    return 100 * row["effective"][path] / row["parameters"][path]


def compare(first: dict, second: dict) -> list[dict]:
    """One dict per layer of both runs' fractions and quotients (the runs' layers must match)."""
    a, b = layer_rows(first), layer_rows(second)
    if [r["layer"] for r in a] != [r["layer"] for r in b]:
        raise RunDirectoryError("the two runs have different layers: compare runs of one model")
    out = []
    for ra, rb in zip(a, b, strict=True):
        row = {"layer": ra["layer"]}
        for p in PATH_NAMES:
            row[p] = (fraction(ra, p), fraction(rb, p))
        row["gconv_relative"] = (ra["relative"]["gconv"], rb["relative"]["gconv"])
        row["gconv_over_conv"] = tuple(
            r["effective"]["gconv"] / r["effective"]["conv"] for r in (ra, rb)
        )
        row["variance_conv_over_gconv"] = tuple(
            r["prior_variance"]["conv"] / r["prior_variance"]["gconv"] for r in (ra, rb)
        )
        out.append(row)
    return out


def format_comparison(rows: list[dict]) -> str:
    """A markdown table of :func:`compare`'s rows."""
    lines = [
        "| layer | FC % | CONV % | GCONV % | factor FC / CONV / GCONV | paper's measure, GCONV "
        "| GCONV / CONV effective | CONV / GCONV prior variance |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        moved = " | ".join(f"{r[p][0]:.2f} -> {r[p][1]:.2f}" for p in PATH_NAMES)
        factors = " / ".join(f"x{r[p][1] / r[p][0]:.2f}" for p in PATH_NAMES)
        pairs = [
            f"{r[k][0]:.{d}f} -> {r[k][1]:.{d}f}"
            for k, d in (("gconv_relative", 1), ("gconv_over_conv", 2))
        ]
        pairs.append("{:.2f} -> {:.2f}".format(*r["variance_conv_over_gconv"]))
        lines.append(f"| {r['layer']} | {moved} | {factors} | {' | '.join(pairs)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="run directory of the first run")
    parser.add_argument("second", type=Path, help="run directory of the second run")
    args = parser.parse_args(argv)
    results = [
        read_json(run / RESULTS, "the results of a finished run")
        for run in (args.first, args.second)
    ]
    rows = compare(*results)
    print(
        f"test accuracy {100 * results[0]['test_accuracy']:.2f}% ({args.first}) -> "
        f"{100 * results[1]['test_accuracy']:.2f}% ({args.second})"
    )
    print(format_comparison(rows))
    return rows


if __name__ == "__main__":
    main()
