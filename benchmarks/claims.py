"""The claims tables of README.md ("What reproduces") and docs/reproducing.md ("At a glance"),
and the guide's table of how often the evidence's choice of paths follows the data
(docs/guide/symmetry.md), written from the committed results files, not typed.

    python -m benchmarks.claims            # rewrite both tables
    python -m benchmarks.claims --check    # exit 1, printing a diff, where a file differs

Each table lies between two marker lines that this script owns (:data:`BEGIN`,
:data:`END`); nothing outside them is written. The rules:

- every row reads one profile of one benchmark and names it; a claim never mixes profiles;
- figures are means over the seeds ± half their range, computed from the unrounded
  per-seed values of the JSON files, with the number of seeds stated;
- a gap in the claim's direction is "yes", against it "no", but "within noise" where it is
  smaller than twice its standard error or than its half range over the seeds
  (:func:`verdict`), and "not reproduced, within noise" where such a gap points against
  the claim. The standard error of an accuracy on ``n`` test images is the binomial one
  (:func:`difference_se`); the seeds of a profile share their test images, so averaging
  seeds does not shrink it. One seed measures no seed-to-seed noise: its gap is "within
  noise" where the test images' noise alone covers it, else "noise not measured" (and
  "not reproduced, noise not measured" against the claim), never "yes" or "no".
- a tolerance ("within a point") is tested on the mean gap itself, its noise shown beside.

A results file that is missing stops the script, naming the command that writes it; so
does one that is not JSON, or whose fields the tables read are not what they can be
(numbers finite, accuracies fractions, kept paths registered path kinds): every file is
read by :func:`read_results`, checked by :mod:`ella.schemas`.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
import math
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from ella.schemas import (
    FINITE,
    PATH,
    ListOf,
    MapOf,
    Maybe,
    Record,
    at_least,
    between,
    mismatch,
    one_of,
)
from studies.results import splice_between, write_between
from studies.rules import follows_position, follows_rotation, over_seeds, paths_upper
from studies.runner import PAPER_SCHEDULE

ROOT = Path(__file__).resolve().parent.parent
README = Path("README.md")
REPRODUCING = Path("docs/reproducing.md")
BEGIN = "<!-- claims:begin (written by python -m benchmarks.claims; do not edit) -->"
END = "<!-- claims:end -->"

YES, NO, NOISE = "yes", "no", "within noise"
#: one seed: the gap is reported, not judged (its seed-to-seed noise is not measured)
UNMEASURED = "noise not measured"
#: a gap against the claim that is too small (or too little measured) to call "no"
NOT_REPRODUCED = "not reproduced"
NOT_TESTED = "not tested"
#: Table 1's collapse: the benchmark's claim "conv_map collapses on (digit, quadrant) (< 50%)"
COLLAPSE = 0.5
#: Table 1's "learned within a point of CONV on digit", in points
WITHIN = 1.0
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class Source:
    """A committed results file and the command that writes it."""

    path: str
    command: str


RESULTS = "benchmarks/results"
#: (benchmark, profile, seed) -> the file of that run
SOURCES = {
    ("table1", "cpu", 0): Source(
        f"{RESULTS}/table1.json", "python -m benchmarks.table1 --profile cpu"
    ),
    ("table1", "cpu", 1): Source(
        f"{RESULTS}/table1_seed1/table1.json",
        f"python -m benchmarks.table1 --profile cpu --seed 1 --results-dir {RESULTS}/table1_seed1",
    ),
    ("table1", "cpu_80", 0): Source(
        f"{RESULTS}/table1_cpu_80/table1.json",
        f"python -m benchmarks.table1 --profile cpu_80 --results-dir {RESULTS}/table1_cpu_80",
    ),
    ("table1", "cpu_80", 1): Source(
        f"{RESULTS}/table1_cpu_80/seed1/table1.json",
        "python -m benchmarks.table1 --profile cpu_80 --seed 1 "
        f"--results-dir {RESULTS}/table1_cpu_80/seed1",
    ),
    ("table3", "cpu_stratified", 0): Source(
        f"{RESULTS}/table3_cpu_stratified/table3.json",
        "python -m benchmarks.table3 --profile cpu_stratified "
        f"--results-dir {RESULTS}/table3_cpu_stratified",
    ),
    ("table3", "cpu_stratified", 1): Source(
        f"{RESULTS}/table3_cpu_stratified_seed1/table3.json",
        "python -m benchmarks.table3 --profile cpu_stratified --seed 1 "
        f"--results-dir {RESULTS}/table3_cpu_stratified_seed1",
    ),
    ("invariance", "cpu", 0): Source(
        f"{RESULTS}/invariance.json", "python -m benchmarks.invariance --profile cpu"
    ),
    ("osp", "cpu", 0): Source(f"{RESULTS}/osp.json", "python -m benchmarks.osp --profile cpu"),
    ("fordes", "cpu", 0): Source(
        f"{RESULTS}/fordes.json", "python -m benchmarks.fordes --profile cpu"
    ),
}
EXPERIMENTS = "experiments/results"
_SELECT = "python -m experiments.path_select --profile cpu --work-dir DIR --select-epochs 20"
_H100 = (
    "ella train --dataset rotated_mnist --train-size 60000 --width 4 --epochs 200 "
    "--n-epochs-burnin 10 --marglik-frequency 5 --optimizer sgd --prior-precision 1 "
    "--prior-update adam --prior-step 1 --batch-size 500 --device cuda "
    "--lr {rate}, time-boxed (its metrics.jsonl; docs/research/0034-table3-gpu.md)"
)
#: every file of the experiments' (under experiments/results/) that the tables read, by
#: name, and what writes it: the one place this script names them
#: (:func:`experiment_results` reads them)
EXPERIMENT_RESULTS = {
    # the learned rotated-MNIST runs of Table 3's paper profile on an H100, time-boxed, by
    # SGD rate (ella train's metrics.jsonl; docs/research/0034-table3-gpu.md)
    **{
        f"table3_paper_lr{rate}": Source(
            f"{EXPERIMENTS}/table3_paper_h100/rotated_mnist_learned_lr{rate}_metrics.jsonl",
            _H100.format(rate=rate),
        )
        for rate in ("0.1", "0.02")
    },
    # greedy selections of Table 3's rows at 1,000 images, by seed, and of Table 1's tasks
    "path_select_seed0": Source(
        f"{EXPERIMENTS}/path_select.json",
        f"{_SELECT} --seeds 0 --datasets rotated_mnist mnist translated_mnist cifar10 "
        "rotated_cifar10",
    ),
    "path_select_seed1": Source(
        f"{EXPERIMENTS}/path_select_seed1/path_select.json",
        f"{_SELECT} --seeds 1 --datasets rotated_mnist mnist translated_mnist",
    ),
    "path_select_table1": Source(
        f"{EXPERIMENTS}/path_select_table1/path_select_table1.json",
        f"{_SELECT} --table 1 --seeds 0 1 --datasets digit quadrant",
    ),
    "miniature": Source(
        f"{EXPERIMENTS}/miniature.jsonl",
        "the commands of record 0039 (docs/research/0039-the-paper-regime-in-miniature.md)",
    ),
    "reliability": Source(f"{EXPERIMENTS}/reliability.json", "python -m experiments.reliability"),
    "criteria": Source(f"{EXPERIMENTS}/criteria.json", "python -m experiments.criteria"),
}
#: Table 3's paper runs (:data:`EXPERIMENT_RESULTS`), by SGD rate
PAPER_RUNS = {rate: EXPERIMENT_RESULTS[f"table3_paper_lr{rate}"] for rate in ("0.1", "0.02")}
#: the profile of each benchmark the tables read, and its seeds
TABLE1, TABLE1_80, TABLE3 = "cpu", "cpu_80", "cpu_stratified"
SEEDS = {"table1": (0, 1), "table3": (0, 1)}


@dataclass(frozen=True)
class Claim:
    """One row of both tables."""

    readme: str  # the papers' claim as the README names it
    glance: str  # the same in the "At a glance" table, beside its experiment
    profile: str
    verdict: str
    figure: str
    section: str  # docs/reproducing.md's section: its title and anchor
    anchor: str


# ---------------------------------------------------------------- numbers


def mean_half_range(values: Sequence[float]) -> tuple[float, float]:
    """Mean of ``values`` and half their range (0 for one value)."""
    values = list(values)
    if not values:
        raise ValueError("no values")
    return sum(values) / len(values), (max(values) - min(values)) / 2


def accuracy_se(p: float, n: int) -> float:
    """Binomial standard error of an accuracy ``p`` on ``n`` test images."""
    return math.sqrt(p * (1 - p) / n)


def difference_se(p1: float, p2: float, n1: int, n2: int | None = None) -> float:
    """Standard error of the difference of two accuracies on ``n1`` and ``n2`` test images,
    ``sqrt(p1 (1 - p1) / n1 + p2 (1 - p2) / n2)``, taking their errors as independent."""
    return math.hypot(accuracy_se(p1, n1), accuracy_se(p2, n2 or n1))


def pooled_se(ses: Sequence[float]) -> float:
    """The standard error of a mean over seeds that share their test images: the root mean
    square of the seeds' (their test-set noise does not average out)."""
    return math.sqrt(sum(s * s for s in ses) / len(ses))


def accuracy_gaps(
    a: Sequence[dict], b: Sequence[dict], key: str = "test_accuracy"
) -> tuple[list[float], list[float]]:
    """Seed by seed, the rows ``a``'s accuracy ``key`` minus ``b``'s in points, and each
    difference's binomial standard error on the rows' ``test_size`` images."""
    pairs = list(zip(a, b, strict=True))
    gaps = [100 * (x[key] - y[key]) for x, y in pairs]
    ses = [100 * difference_se(x[key], y[key], x["test_size"], y["test_size"]) for x, y in pairs]
    return gaps, ses


def verdict(gaps: Sequence[float], ses: Sequence[float] | None = None) -> str:
    """Whether a claim holds, from its gap at each seed (positive where it holds).

    ``"within noise"`` where the mean gap is no larger than twice its standard error
    (:func:`pooled_se` of ``ses``, each seed's) or than the gaps' half range over the seeds
    (``"not reproduced, within noise"`` where it is negative); one seed beyond its
    standard error (or without one): ``"noise not measured"`` (``"not reproduced, noise
    not measured"`` where negative), since one seed measures no seed-to-seed noise;
    otherwise ``"yes"`` or ``"no"`` by the gap's sign.
    """
    mean, half = mean_half_range(gaps)
    noise = max(half, 2 * pooled_se(ses) if ses else 0.0)
    against = f"{NOT_REPRODUCED}, " if mean < 0 else ""
    if (ses or len(gaps) > 1) and abs(mean) <= noise:
        return f"{against}{NOISE}"
    if len(gaps) == 1:
        return f"{against}{UNMEASURED}"
    return YES if mean > 0 else NO


def fmt(x: float, digits: int = 1, sign: bool = False) -> str:
    """``x`` rounded half up to ``digits`` decimals (after dropping float noise below 1e-9),
    with its sign where ``sign`` and it is not zero."""
    q = Decimal(repr(round(x, 9))).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)
    if q == 0:
        return format(abs(q), "f")
    return format(q, "+f" if sign else "f")


def pm(values: Sequence[float], digits: int = 1, sign: bool = False) -> str:
    """``mean ± half range`` of ``values`` (the value alone for one)."""
    mean, half = mean_half_range(values)
    if len(values) == 1:
        return fmt(mean, digits, sign)
    return f"{fmt(mean, digits, sign)} ± {fmt(half, digits)}"


def seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def two_se(ses: Iterable[float], digits: int = 1) -> str:
    """``2 SE a`` or ``2 SE a-b`` over the claim's parts (``ses``: each part's pooled SE)."""
    low, high = min(ses := [2 * s for s in ses]), max(ses)
    if fmt(low, digits) == fmt(high, digits):
        return f"2 SE {fmt(low, digits)}"
    return f"2 SE {fmt(low, digits)}-{fmt(high, digits)}"


def summarise(verdicts: dict[str, str], every: str, on: str = "on") -> str:
    """One verdict over the parts of a claim: ``every`` after the verdict where all parts
    agree, else each verdict with the parts it holds for."""
    kinds = list(dict.fromkeys(verdicts.values()))
    if len(kinds) == 1:
        return f"{kinds[0]}{every}"
    return "; ".join(
        f"{kind} {on} {', '.join(p for p, v in verdicts.items() if v == kind)}" for kind in kinds
    )


# ---------------------------------------------------------------- results


def read_results(
    root: Path, name: str, command: str, schema: Any = None, lines: bool = False
) -> Any:
    """The JSON of the results file ``name`` under ``root`` (``lines``: JSON lines, a list
    of their values), refused where it cannot be read as JSON or where ``schema`` (of
    :mod:`ella.schemas`: the fields the tables read; a function of each value for a file
    of several kinds) does not hold. A refusal is a SystemExit naming the file, the field
    and ``command``, which writes it again."""
    try:
        text = (root / name).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise _refusal(name, f"cannot be read ({err})", command) from None
    payload = []
    for number, line in enumerate(text.splitlines() if lines else [text], start=1):
        try:
            if line.strip() or not lines:
                payload.append(json.loads(line))
        except json.JSONDecodeError as err:
            where = f"line {number}, column {err.colno}: {err.msg}" if lines else str(err)
            raise _refusal(name, f"cannot be read as JSON ({where})", command) from None
    payload = payload if lines else payload[0]
    return payload if schema is None else check_results(payload, name, command, schema, lines)


def check_results(payload: Any, name: str, command: str, schema: Any, lines: bool = False) -> Any:
    """``payload`` (read from the results file ``name``) if ``schema`` holds
    (:func:`read_results`), else a SystemExit naming the file, the field and ``command``."""
    for number, value in enumerate(payload if lines else [payload], start=1):
        spec = schema(value) if inspect.isfunction(schema) else schema
        found = mismatch(value, spec, f"line {number}" if lines else "")
        if found:
            raise _refusal(name, f"is not as its script writes it: {found}", command)
    return payload


def _refusal(name: str, problem: str, command: str) -> SystemExit:
    """The refusal of the results file ``name``: ``problem``, and what writes it again."""
    return SystemExit(
        f"{name} {problem}; restore it (git checkout -- {name}) or write it again with {command}"
    )


_FRACTION, _COUNT, _POSITIVE, _SE = between(0, 1), at_least(0), at_least(1), between(0, None)
#: an accuracy on ``test_size`` images (:func:`accuracy_gaps`)
_ACCURACY = {"test_accuracy": _FRACTION, "test_size": _POSITIVE}
_T = {"t": FINITE, "mean": FINITE, "se": _SE, "seeds": list}  # a contrast of record 0044


def _rows(required: dict, optional: dict | None = None, **fields: Any) -> Record:
    """A results file whose ``rows`` hold the ``required`` and ``optional`` fields, and
    its other ``fields``."""
    return Record({"rows": ListOf(Record(required, optional or {})), **fields})


#: what the tables read of each benchmark's results (besides its profile and seed)
SCHEMAS = {
    "table1": _rows({"task": str, "model": str, **_ACCURACY, "paper_test_accuracy": _FRACTION,
                     "epochs": _POSITIVE}),
    "table3": _rows({"dataset": str, "model": str, **_ACCURACY, "shares": MapOf(FINITE),
                     "relative_shares": MapOf(FINITE)},
                    {"paper_shares": MapOf(FINITE), "source": str}),
    "invariance": _rows({"dataset": str, "method": str, **_ACCURACY, "eta": MapOf(FINITE)}),
    "osp": _rows(
        {"model": str, "group": str, "osp": FINITE, "osp_std": _SE},
        {"averaged_over_models": _POSITIVE},
        settings=Record({"ood_size": _POSITIVE, "width": _POSITIVE}),
        members_sweep=ListOf(Record({"group": str, "osp": FINITE, "osp_std": _SE,
                                     "members": _POSITIVE, "width": _POSITIVE})),
    ),
    "fordes": _rows({"dataset": str, "method": str, "accuracy": _FRACTION,
                     "corrupted_accuracy": _FRACTION, "test_size": _POSITIVE}),
}  # fmt: skip
#: a line of a metrics file of Table 3's paper profile
_EPOCH = Record({"test_accuracy": _FRACTION})
#: a greedy selection's results (experiments.path_select)
_SELECTIONS = _rows(
    {"seed": int, "kept": ListOf(PATH), "selected": Record({"log_evidence": FINITE}),
     "null": Record({"log_evidence": FINITE})},
    {"dataset": str, "task": str},
)  # fmt: skip
#: the record 0043's results (experiments.reliability)
_RELIABILITY = _rows(
    {"part": str, "dataset": str, "seed": int, "train_size": _POSITIVE},
    {"winner": PATH, "kept": ListOf(PATH), "first_round_kept": ListOf(PATH)},
    verdicts=MapOf(Record({"part": str, "train_size": _POSITIVE, "key": str,
                           "follows": MapOf(bool), "answer": str})),
)  # fmt: skip
#: a line of record 0039's results (experiments.miniature): a check's, else any
_MINIATURE_CHECK = Record({
    "kind": str, "seed": int, "dataset": str, "paths": ListOf(PATH),
    "budget": Record({"train_size": _POSITIVE}),
    "readings": Record({r: Record({"at_optimum": Record({"log_evidence": FINITE})})
                        for r in ("kfac", "full")}),
})  # fmt: skip
_MINIATURE_LINE = Record({"kind": str})
#: record 0044's results (experiments.criteria)
_CRITERIA = Record(
    {"analysis": MapOf(MapOf(Record({**_T, "share_of_validation_t": FINITE,
                                     "both_ways": _COUNT}))),
     "noise": Record({"1000": Record({"seed_sd": Record({"total": FINITE}),
                                      "refit_sd": Record({"log_evidence": FINITE})})})},
    {"drop_analysis": MapOf(Record(_T)),
     "drop_rows": ListOf(Record({"dataset": str, "seed": int}))},
)  # fmt: skip
#: the main job's results (benchmarks.main_job); its rounds' winners are checked apart
_STEP = Record({"unit": PATH, "action": one_of("drop", "keep"), "mean": FINITE,
                "se": Maybe(FINITE), "agree": _COUNT, "seeds": _POSITIVE,
                "decided": bool})  # fmt: skip
_MAIN_JOB = Record({
    "run": Record({"seed": int}),
    "selection": Record(
        {"epochs": _POSITIVE, "kept": ListOf(PATH), "networks": _COUNT,
         "rounds": ListOf(Record({
             "kept": ListOf(PATH), "winner": Maybe(str),
             "rows": ListOf(Record({"dropped": str, "test_accuracy": _FRACTION,
                                    "log_evidence": FINITE}, {"kept": ListOf(PATH)})),
         }))},
        {"seeds": _POSITIVE, "decision": Maybe(Record({"steps": ListOf(_STEP), "decided": bool}))},
    ),
})  # fmt: skip


def load(benchmark: str, profile: str, seed: int, root: Path = ROOT) -> dict:
    """The results of one run, refusing a missing file (naming the command that writes it),
    a file of another profile or seed, and one that cannot be read or whose fields are
    not what they can be (:func:`read_results`, :data:`SCHEMAS`)."""
    source = SOURCES[benchmark, profile, seed]
    path = root / source.path
    if not path.is_file():
        raise FileNotFoundError(f"{source.path} is missing; `{source.command}` writes it")
    payload = read_results(root, source.path, source.command)
    held = (payload.get("profile"), payload.get("seed")) if isinstance(payload, dict) else None
    if held is not None and held != (profile, seed):
        raise ValueError(
            f"{source.path} holds profile {payload.get('profile')!r} seed "
            f"{payload.get('seed')!r}, not {profile!r} seed {seed}; `{source.command}` "
            "writes the file the tables read"
        )
    return check_results(payload, source.path, source.command, SCHEMAS[benchmark])


def load_metrics(rate: str, root: Path = ROOT) -> list[dict]:
    source = PAPER_RUNS[rate]
    path = root / source.path
    if not path.is_file():
        raise FileNotFoundError(f"{source.path} is missing; `{source.command}` writes it")
    return read_results(root, source.path, source.command, _EPOCH, lines=True)


def row(payload: dict, **match) -> dict:
    """The one row of ``payload`` with the values ``match``."""
    rows = [r for r in payload["rows"] if all(r.get(k) == v for k, v in match.items())]
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} rows with {match} in the {payload['profile']} results")
    return rows[0]


# ---------------------------------------------------------------- claims


def table1_claims(root: Path) -> list[Claim]:
    link = dict(section="Table 1", anchor="table-1")
    runs = {p: [load("table1", p, s, root) for s in SEEDS["table1"]] for p in (TABLE1, TABLE1_80)}

    def rows(profile, task, model):
        return [row(run, task=task, model=model) for run in runs[profile]]

    claims = []
    conv = rows(TABLE1, "quadrant", "conv_map")
    acc = [100 * r["test_accuracy"] for r in conv]
    gaps = [100 * COLLAPSE - a for a in acc]
    ses = [100 * accuracy_se(r["test_accuracy"], r["test_size"]) for r in conv]
    claims.append(Claim(
        "Table 1: CONV collapses on (digit, quadrant)", "CONV collapses on (digit, quadrant)",
        TABLE1, verdict(gaps, ses),
        f"{pm(acc)}% ({seeds(len(acc))}; paper {fmt(100 * conv[0]['paper_test_accuracy'])})",
        **link,
    ))  # fmt: skip

    learned, fc = rows(TABLE1, "quadrant", "learned"), rows(TABLE1, "quadrant", "fc_map")
    a_l = [100 * r["test_accuracy"] for r in learned]
    a_fc = [100 * r["test_accuracy"] for r in fc]
    word = verdict(*accuracy_gaps(learned, fc))
    paper = 100 * learned[0]["paper_test_accuracy"]
    if word == YES and max(a_l) < paper:
        word += ", below the paper's level"
    claims.append(Claim(
        "Table 1: learned FC+CONV solves (digit, quadrant)",
        "learned FC+CONV solves (digit, quadrant)", TABLE1, word,
        f"{pm(a_l)}% vs FC {pm(a_fc)}% ({seeds(len(a_l))}; paper {fmt(paper)})", **link,
    ))  # fmt: skip

    for profile in (TABLE1, TABLE1_80):
        learned, conv = rows(profile, "digit", "learned"), rows(profile, "digit", "conv_map")
        diffs, ses = accuracy_gaps(learned, conv)
        word = YES if mean_half_range(diffs)[0] >= -WITHIN else NO  # on the gap itself
        paper = 100 * (learned[0]["paper_test_accuracy"] - conv[0]["paper_test_accuracy"])
        noise = f"; {two_se([pooled_se(ses)], 2)}"
        claims.append(Claim(
            "Table 1: learned within a point of CONV on digit",
            "learned within a point of CONV on digit", profile, word,
            f"learned - CONV {pm(diffs, 2, sign=True)} points ({seeds(len(diffs))}{noise}; "
            f"paper {fmt(paper, 2, sign=True)}, {learned[0]['epochs']} epochs)",
            **link,
        ))  # fmt: skip
    return claims


SHORT = {
    "mnist": "MNIST",
    "translated_mnist": "translated",
    "rotated_mnist": "rotated",
    "cifar10": "CIFAR-10",
    "rotated_cifar10": "rotated CIFAR-10",
}
PAPERS_MEASURE, EFFECTIVE = "relative_shares", "shares"


def by_measure(paper: str, effective: str, map_too: str) -> str:
    """A share claim's verdict by the paper's measure and by the effective parameters, and
    whether the MAP network satisfies it too (by the paper's measure)."""
    if paper == effective:
        text = f"{paper}, by either measure"
    elif paper == YES and effective == NO:
        text = "yes by the paper's measure only"
    else:
        text = f"{paper} by the paper's measure, {effective} by effective parameters"
    if paper == YES and map_too == YES:
        text += "; MAP too"
    return text


def agree(verdicts: Iterable[str]) -> str:
    kinds = list(dict.fromkeys(verdicts))
    return kinds[0] if len(kinds) == 1 else " / ".join(kinds)


def table3_claims(root: Path) -> list[Claim]:
    link = dict(section="Table 3", anchor="table-3")
    runs = [load("table3", TABLE3, s, root) for s in SEEDS["table3"]]
    k = len(runs)

    def rows(dataset, model):
        return [row(run, dataset=dataset, model=model) for run in runs]

    def share(dataset, model, measure, path):
        return [r[measure][path] for r in rows(dataset, model)]

    claims = []
    parts, figures, ses_all = {}, [], []
    for dataset, name in SHORT.items():
        gaps, ses = accuracy_gaps(rows(dataset, "learned"), rows(dataset, "map"))
        parts[name] = verdict(gaps, ses)
        figures.append(f"{name} {pm(gaps, sign=True)}")
        ses_all.append(pooled_se(ses))
    subset = any(r.get("source") == "subset" for run in runs for r in run["rows"])
    claims.append(Claim(
        "Table 3: learned priors beat MAP in accuracy", "learned priors beat MAP on all five sets",
        TABLE3, summarise(parts, f" on all {NUMBERS.get(len(parts), len(parts))} sets"),
        f"learned - MAP, points: {', '.join(figures)} ({seeds(k)}; {two_se(ses_all)}"
        f"{'; CIFAR sets: the subset' if subset else ''})",
        **link,
    ))  # fmt: skip

    def largest(dataset, model, measure, path):
        others = [p for p in ("fc", "conv", "gconv") if p != path]
        return [r[measure][path] - max(r[measure][p] for p in others) for r in rows(dataset, model)]

    def smallest(dataset, model, measure, path):
        others = [p for p in ("fc", "conv", "gconv") if p != path]
        return [min(r[measure][p] for p in others) - r[measure][path] for r in rows(dataset, model)]

    rot = "rotated_mnist"
    paper_gconv = rows(rot, "learned")[0]["paper_shares"]["gconv"]
    claims.append(Claim(
        "Table 3: GCONV largest share on rotated MNIST",
        "GCONV largest share on rotated MNIST", TABLE3,
        by_measure(
            verdict(largest(rot, "learned", PAPERS_MEASURE, "gconv")),
            verdict(largest(rot, "learned", EFFECTIVE, "gconv")),
            verdict(largest(rot, "map", PAPERS_MEASURE, "gconv")),
        ),
        f"GCONV {pm(share(rot, 'learned', PAPERS_MEASURE, 'gconv'))} by the paper's measure "
        f"(MAP {pm(share(rot, 'map', PAPERS_MEASURE, 'gconv'))}; paper {paper_gconv}); "
        f"{pm(share(rot, 'learned', EFFECTIVE, 'gconv'))}% of effective parameters, FC "
        f"{pm(share(rot, 'learned', EFFECTIVE, 'fc'))}% ({seeds(k)})",
        **link,
    ))  # fmt: skip

    sets = ("translated_mnist", rot)
    fc = {m: [pm(share(d, "learned", m, "fc")) for d in sets] for m in (PAPERS_MEASURE, EFFECTIVE)}
    fc_map = [pm(share(d, "map", PAPERS_MEASURE, "fc")) for d in sets]
    paper_fc = [rows(d, "learned")[0]["paper_shares"]["fc"] for d in sets]
    claims.append(Claim(
        "Table 3: FC smallest share on translated, rotated MNIST",
        "FC smallest share on translated and rotated MNIST", TABLE3,
        by_measure(
            agree(verdict(smallest(d, "learned", PAPERS_MEASURE, "fc")) for d in sets),
            agree(verdict(smallest(d, "learned", EFFECTIVE, "fc")) for d in sets),
            agree(verdict(smallest(d, "map", PAPERS_MEASURE, "fc")) for d in sets),
        ),
        f"FC {' and '.join(fc[PAPERS_MEASURE])} by the paper's measure (MAP "
        f"{' and '.join(fc_map)}; paper {' and '.join(map(str, paper_fc))}); "
        f"{'% and '.join(fc[EFFECTIVE])}% of effective parameters ({seeds(k)})",
        **link,
    ))  # fmt: skip

    def higher(model, measure):
        rotated, mnist = (share(d, model, measure, "gconv") for d in (rot, "mnist"))
        return [a - b for a, b in zip(rotated, mnist, strict=True)]

    paper_mnist = rows("mnist", "learned")[0]["paper_shares"]["gconv"]
    claims.append(Claim(
        "Table 3: GCONV share higher on rotated MNIST than MNIST",
        "GCONV share higher on rotated MNIST than on MNIST", TABLE3,
        by_measure(
            verdict(higher("learned", PAPERS_MEASURE)),
            verdict(higher("learned", EFFECTIVE)),
            verdict(higher("map", PAPERS_MEASURE)),
        ),
        f"{pm(share(rot, 'learned', PAPERS_MEASURE, 'gconv'))} vs "
        f"{pm(share('mnist', 'learned', PAPERS_MEASURE, 'gconv'))} by the paper's measure; "
        f"{pm(share(rot, 'learned', EFFECTIVE, 'gconv'))}% vs "
        f"{pm(share('mnist', 'learned', EFFECTIVE, 'gconv'))}% of effective parameters "
        f"({seeds(k)}); paper {paper_gconv} vs {paper_mnist}",
        **link,
    ))  # fmt: skip
    return claims


def paper_scale_claims(root: Path) -> list[Claim]:
    """Table 3's paper profile: two learned rotated-MNIST runs on an H100, time-boxed; no
    MAP row and no run to the schedule's end, so no claim is tested."""
    runs = {rate: load_metrics(rate, root) for rate in PAPER_RUNS}
    reference, chosen = runs["0.1"], runs["0.02"]
    return [Claim(
        "Table 3 at full scale (H100)", "all of Table 3's claims, full data", "paper",
        NOT_TESTED,
        f"learned rotated MNIST only, 1 seed, time-boxed: SGD rate 0.1 (the reference's) at "
        f"most {fmt(100 * max(e['test_accuracy'] for e in reference), 2)}% in "
        f"{len(reference)} epochs; 0.02 reaches {fmt(100 * chosen[-1]['test_accuracy'], 2)}% "
        f"in {len(chosen)} of {PAPER_SCHEDULE['epochs']}",
        "Table 3 at the paper's scale", "table-3-at-the-papers-scale",
    )]  # fmt: skip


INVARIANCE_SETS = {
    "mnist": "MNIST",
    "rotated_mnist": "rotated",
    "translated_mnist": "translated",
    "scaled_mnist": "scaled",
}
#: the extents that each transformed set's transformation should raise, against MNIST's
EXTENTS = {
    "rotated_mnist": ("rotation", ("rotate",), "rad"),
    "translated_mnist": ("translations", ("translate_x", "translate_y"), ""),
    "scaled_mnist": ("scales", ("scale_x", "scale_y"), ""),
}


def invariance_claims(root: Path) -> list[Claim]:
    link = dict(section="Learned invariance", anchor="learned-invariance")
    run = load("invariance", "cpu", 0, root)
    eta = {d: row(run, dataset=d, method="learned")["eta"] for d in INVARIANCE_SETS}
    parts, figures = {}, []
    for dataset, (name, keys, unit) in EXTENTS.items():
        on, off = sum(eta[dataset][k] for k in keys), sum(eta["mnist"][k] for k in keys)
        # one seed, no standard error in the file: the direction is shown, not called
        parts[name] = UNMEASURED if on > off else f"{NOT_REPRODUCED}, {UNMEASURED}"
        figures.append(f"{name} {fmt(on, 2)} vs {fmt(off, 2)}{' ' + unit if unit else ''}")
    claims = [Claim(
        "Learned invariance: extents follow the data",
        "learned extents follow the data's transformation", "cpu",
        summarise(parts, " for every extent (each in the data's direction)", on="for"),
        f"{', '.join(figures)} (the set with the transformation vs MNIST; 1 seed, "
        "no standard error)",
        **link,
    )]  # fmt: skip

    methods = {m: [] for m in ("learned", "augerino", "none")}
    parts, ses = {}, []
    for dataset, name in INVARIANCE_SETS.items():
        rows = {m: row(run, dataset=dataset, method=m) for m in methods}
        for m, r in rows.items():
            methods[m].append(fmt(100 * r["test_accuracy"]))
        best = max((rows["augerino"], rows["none"]), key=lambda r: r["test_accuracy"])
        gaps, se = accuracy_gaps([rows["learned"]], [best])
        parts[name] = verdict(gaps, se)
        ses += se
    claims.append(Claim(
        "Learned invariance: more accurate than none / Augerino",
        "learned invariance more accurate than none and Augerino", "cpu",
        summarise(parts, " on all four sets"),
        f"learned {' / '.join(methods['learned'])}% vs Augerino "
        f"{' / '.join(methods['augerino'])}%, none {' / '.join(methods['none'])}% "
        f"({' / '.join(INVARIANCE_SETS.values())}; 1 seed; {two_se(ses)})",
        **link,
    ))  # fmt: skip
    return claims


def osp_claims(root: Path) -> list[Claim]:
    """OSP: the ensemble's spread is over its OOD inputs, a single model's over the
    ensemble's members; their standard errors divide by the square roots of those counts."""
    link = dict(section="Emergent equivariance", anchor="emergent-equivariance")
    run = load("osp", "cpu", 0, root)
    n_inputs = run["settings"]["ood_size"]
    groups = list(dict.fromkeys(r["group"] for r in run["rows"]))
    parts, ensemble, single = {}, [], []
    for group in groups:
        e = row(run, model="ensemble_da", group=group)
        s = row(run, model="single_da", group=group)
        se = math.hypot(
            e["osp_std"] / math.sqrt(n_inputs), s["osp_std"] / math.sqrt(s["averaged_over_models"])
        )
        parts[group] = verdict([e["osp"] - s["osp"]], [se])
        ensemble.append(fmt(e["osp"], 2))
        single.append(fmt(s["osp"], 2))
    claims = [Claim(
        "Ensemble + augmentation more equivariant (OSP) than one model",
        "ensemble + augmentation more equivariant than one model", "cpu",
        summarise(parts, ", " + " / ".join(groups), on="at"),
        f"{' / '.join(ensemble)} vs {' / '.join(single)} (1 seed)",
        **link,
    )]  # fmt: skip

    width = run["settings"]["width"]
    sweep = [r for r in run["members_sweep"] if r["width"] == width]
    group = sweep[0]["group"]
    fewest = min(sweep, key=lambda r: r["members"])
    most = max(sweep, key=lambda r: r["members"])
    se = math.hypot(fewest["osp_std"], most["osp_std"]) / math.sqrt(n_inputs)
    members = verdict([most["osp"] - fewest["osp"]], [se])
    gconv = row(run, model="gconv", group="C4")
    exact = YES if gconv["osp"] == 4 and gconv["osp_std"] == 0 else NO
    claims.append(Claim(
        "OSP grows with members; exact GCONV model is C4-invariant",
        "OSP grows with members; the GCONV model is exactly C4-invariant", "cpu",
        f"{members}; {exact}",
        f"{fmt(fewest['osp'], 2)} -> {fmt(most['osp'], 2)} from {fewest['members']} to "
        f"{most['members']} members ({group}); {fmt(gconv['osp'], 2)} at C4 (1 seed)",
        **link,
    ))  # fmt: skip
    return claims


FORDE_SETS = {"cifar10_subset": "CIFAR-10 subset", "fashion_mnist": "FashionMNIST"}


def forde_claims(root: Path) -> list[Claim]:
    """FoRDE: corrupted accuracy is a mean over corruptions of the same test images, so its
    standard error is taken as that of one accuracy on them."""
    run = load("fordes", "cpu", 0, root)
    parts, figures, ses, clean = {}, [], [], []
    for dataset, name in FORDE_SETS.items():
        de, pca = (row(run, dataset=dataset, method=m) for m in ("de", "forde_pca"))
        gaps, se = accuracy_gaps([pca], [de], "corrupted_accuracy")
        parts[name] = verdict(gaps, se)
        ses += se
        figures.append(
            f"{fmt(100 * pca['corrupted_accuracy'])} vs {fmt(100 * de['corrupted_accuracy'])}% "
            f"on {'the ' if 'subset' in name else ''}{name}"
        )
        for r in run["rows"]:
            if r["dataset"] == dataset and r["method"] != "de":
                clean.append(verdict(*accuracy_gaps([r], [de], "accuracy")))
    keeps = "clean within noise" if set(clean) == {NOISE} else f"clean: {agree(clean)}"
    return [Claim(
        "FoRDE-PCA more robust to corruptions than a deep ensemble",
        "FoRDE-PCA more robust to corruptions than a deep ensemble", "cpu",
        summarise(parts, " on both sets"),
        f"corrupted {', '.join(figures)} (1 seed; {two_se(ses)}; {keeps})",
        "FoRDE", "forde",
    )]  # fmt: skip


def all_claims(root: Path = ROOT) -> list[Claim]:
    """Every row of the two tables, in order, from the results files under ``root``."""
    return [
        *table1_claims(root),
        *table3_claims(root),
        *paper_scale_claims(root),
        *invariance_claims(root),
        *osp_claims(root),
        *forde_claims(root),
    ]


# ---------------------------------------------------------------- the guide's reliability
GUIDE = Path("docs/guide/symmetry.md")
#: the greedy selections of Table 3's rows at 1,000 images (:data:`EXPERIMENT_RESULTS`)
SELECT_1000 = ("path_select_seed0", "path_select_seed1")


def experiment_results(root: Path, name: str, schema: Any, lines: bool = False) -> Any:
    """The experiment's results file ``name`` (a key of :data:`EXPERIMENT_RESULTS`) under
    ``root``, read and checked (:func:`read_results`); a missing one stops the script."""
    source = require_experiment(root, name)
    return read_results(root, source.path, source.command, schema, lines)


def require_experiment(root: Path, name: str) -> Source:
    """The source of the experiment's results file ``name``, which must be under ``root``
    (it is committed with its record)."""
    source = EXPERIMENT_RESULTS[name]
    if not (root / source.path).is_file():
        raise SystemExit(f"{source.path} is missing: it is committed with its record")
    return source


@dataclass(frozen=True)
class Reliability:
    """One row of the guide's table "How often it follows the data"."""

    question: str
    size: str
    answer: str
    records: str


def _record(number: str, slug: str) -> str:
    return f"[{number}](../research/{number}-{slug}.md)"


def _selection_rows(root: Path, name: str) -> dict[tuple[str, int], dict]:
    rows = experiment_results(root, name, _SELECTIONS)["rows"]
    return {(r.get("dataset") or r["task"], r["seed"]): r for r in rows}


def _measured_anew(root: Path) -> Callable[..., Reliability]:
    """``measured(part, size, question, images, records)``: the row of one question of
    ``experiments/results/reliability.json`` (its verdict by :func:`follows_rotation` per
    seed, :func:`over_seeds` over them, and what each seed kept); a question the file has
    not measured at two seeds is refused (``python -m experiments.reliability`` resumes)."""
    payload = experiment_results(root, "reliability", _RELIABILITY)
    path = EXPERIMENT_RESULTS["reliability"].path
    rows = payload["rows"]

    def measured(part, size, question, images, records):
        part, _, key = part.partition(":")
        key = key or ("winner" if part == "corners" else "kept")
        verdict = next(
            (v for v in payload["verdicts"].values()
             if (v["part"], v["train_size"], v["key"]) == (part, size, key)),
            None,
        )  # fmt: skip
        if verdict is None or len(verdict["follows"]) < 2:  # a row is asked at two seeds
            raise SystemExit(
                f"{path} has no {part} row at {size} images at two seeds: run "
                f"python -m experiments.reliability --parts {part} (it resumes)"
            )
        mine = {(r["dataset"], r["seed"]): r for r in rows
                if r["part"] == part and r["train_size"] == size}  # fmt: skip
        seeds = [int(s) for s in verdict["follows"]]
        if part == "corners":
            won = {d: sum(mine[d, s]["winner"] == w for s in seeds)
                   for d, w in (("mnist", "conv"), ("rotated_mnist", "gconv"))}  # fmt: skip
            detail = (f"CONV's evidence ahead upright at {won['mnist']} of {len(seeds)} seeds, "
                      f"GCONV's rotated at {won['rotated_mnist']}")  # fmt: skip
        else:
            detail = "; ".join(
                f"seed {s}: {paths_upper(mine['mnist', s][key])} upright, "
                f"{paths_upper(mine['rotated_mnist', s][key])} rotated"
                for s in seeds
            )
        return Reliability(question, images, f"{verdict['answer']} ({detail})", records)

    return measured


def _miniature_line(line: Any) -> Record:
    """What the guide's table reads of a line of the miniature's results: a check's
    readings, and the kind of any other line."""
    is_check = isinstance(line, dict) and line.get("kind") == "check"
    return _MINIATURE_CHECK if is_check else _MINIATURE_LINE


def reliability_rows(root: Path = ROOT) -> list[Reliability]:
    """The guide's reliability table: every row read from a results file by one rule
    (:func:`follows_rotation`, :func:`follows_position`, :func:`over_seeds`)."""
    for name in (*SELECT_1000, "path_select_table1", "miniature"):
        require_experiment(root, name)
    r0016 = _record("0016", "evidence-ranks-single-path-mixers")
    r0017 = _record("0017", "dropping-a-path")
    r0018 = _record("0018", "greedy-path-selection")
    measured = _measured_anew(root)
    r0043 = _record("0043", "reliability-rows-measured")
    rows = [
        measured("corners", 1000, "CONV-only against GCONV-only, each trained from scratch",
                 "1,000, the default mixer", f"{r0043} ({r0016})"),
        measured("corners", 5000, "the same", "5,000, the default mixer", f"{r0043} ({r0016})"),
    ]  # fmt: skip
    # the miniature: single-path networks after 300 epochs, by KFAC and by the full GGN
    checks = experiment_results(root, "miniature", _miniature_line, lines=True)
    checks = [c for c in checks if c["kind"] == "check" and c["budget"]["train_size"] == 2000]
    answers = []
    for reading in ("kfac", "full"):
        flags = []
        for seed in sorted({c["seed"] for c in checks}):
            winner = {}
            for dataset in ("mnist", "rotated_mnist"):
                runs = [c for c in checks if c["seed"] == seed and c["dataset"] == dataset]
                best = max(runs, key=lambda c: c["readings"][reading]["at_optimum"]["log_evidence"])
                winner[dataset] = best["paths"]
            flags.append(follows_rotation(winner["mnist"], winner["rotated_mnist"]))
        answers.append(f"{over_seeds(flags)} by {'KFAC' if reading == 'kfac' else 'the full GGN'}")
    rows.append(Reliability(
        "the same, trained 300 epochs to convergence", "2,000, a 1,160-parameter mixer",
        "; ".join(answers), _record("0039", "the-paper-regime-in-miniature"),
    ))  # fmt: skip
    rows += [
        measured("drop", 5000, "drop one path, train on 20 epochs (`--drop-only`)",
                 "5,000, CONV+GCONV", f"{r0043} ({r0017})"),
        measured("select:first_round_kept", 5000, "the same", "5,000, FC+CONV+GCONV",
                 f"{r0043} ({r0017})"),
    ]  # fmt: skip
    selected: dict[tuple[str, int], dict] = {}
    for name in SELECT_1000:
        selected.update(_selection_rows(root, name))
    seeds = sorted({seed for dataset, seed in selected if dataset == "mnist"})
    flags = [follows_rotation(selected["mnist", s]["kept"], selected["rotated_mnist", s]["kept"])
             for s in seeds]  # fmt: skip
    below = all(
        r["selected"]["log_evidence"] < r["null"]["log_evidence"]
        for (dataset, _), r in selected.items()
        if dataset in ("mnist", "rotated_mnist")
    )
    kept = "; ".join(
        f"seed {s}: {'+'.join(selected['mnist', s]['kept']).upper()} upright, "
        f"{'+'.join(selected['rotated_mnist', s]['kept']).upper()} rotated"
        for s in seeds
    )
    answer = f"{over_seeds(flags)} ({kept})"
    if below:
        answer += "; every selected network's evidence below that of no network"
    rows += [
        Reliability("greedy selection (`ella select`)", "1,000, Table 3's mixer", answer, r0018),
        measured("select", 5000, "the same", "5,000, the default mixer", f"{r0043} ({r0018})"),
    ]  # fmt: skip
    table1 = _selection_rows(root, "path_select_table1")
    seeds = sorted({seed for _, seed in table1})
    flags = [follows_position(table1["digit", s]["kept"], table1["quadrant", s]["kept"])
             for s in seeds]  # fmt: skip
    rows.append(Reliability(
        "the same, Table 1's two tasks", "4,000, FC+CONV",
        f"{over_seeds(flags)}: FC kept on (digit, quadrant) only",
        f"{_record('0019', 'table1-as-path-selection')}, {_record('0020', 'how-deep-fc-reaches')}",
    ))  # fmt: skip
    return rows


GUIDE_LEGEND = textwrap.fill(
    "Every row is read from its results file by `python -m benchmarks.claims`, by one "
    "rule: on MNIST against rotated MNIST the evidence follows the data where it keeps CONV "
    "on the upright digits and drops it on the rotated ones, keeping GCONV there; on Table "
    "1's tasks where it keeps FC on (digit, quadrant) and drops it on digit.",
    width=92,
    break_on_hyphens=False,
)


def reliability_table(root: Path = ROOT) -> str:
    lines = [
        "| question | training images, network | follows the data's symmetry? | record |",
        "|---|---|---|---|",
        *(
            f"| {r.question} | {r.size} | {r.answer} | {r.records} |"
            for r in reliability_rows(root)
        ),
    ]
    return "\n".join([*lines, "", GUIDE_LEGEND])


# ---------------------------------------------------------------- how sure each answer is
CRITERIA_BEGIN = "<!-- criteria:begin (written by python -m benchmarks.claims; do not edit) -->"
CRITERIA_END = "<!-- criteria:end -->"
ANSWERS_BEGIN = "<!-- answers:begin (written by python -m benchmarks.claims; do not edit) -->"
ANSWERS_END = "<!-- answers:end -->"
#: each criterion of record 0044: its words, what it reads, its ``ella select`` name
CRITERION_WORDS = {
    "a_evidence": ("the KFAC evidence", "training images", "evidence"),
    "b_evidence_optimum": ("the evidence, exact GGN at optimal precisions", "training images",
                           None),
    "c_evidence_last3": ("the evidence, mean of the last 3 rounds", "training images", None),
    "e_laplace_predictive": ("the GLM Laplace predictive", "held-out images", None),
    "f_conditional": ("the conditional marginal likelihood", "training images", None),
    "g_validation": ("the held-out log likelihood", "held-out images", "validation"),
    "h_training_speed": ("training speed (summed training NLL)", "training images",
                         "training_speed"),
}  # fmt: skip


def _criteria(root: Path) -> dict:
    return experiment_results(root, "criteria", _CRITERIA)


def _t(found: dict | None) -> str:
    """``1.6 (798 ± 491, 5 seeds)``: a contrast's t with its mean and standard error."""
    if found is None:
        return "not measured"
    return (
        f"{found['t']:.1f} ({found['mean']:+.0f} ± {found['se']:.0f}, {len(found['seeds'])} seeds)"
    )


def criteria_table(root: Path = ROOT) -> str:
    """The guide's table "How sure each answer is": per criterion of record 0044, the
    rotated-minus-upright contrast in standard errors (``t``) of decision (i) (single-path
    networks) and (ii) (drops from the mixer), against the held-out likelihood's."""
    payload = _criteria(root)
    single = payload["analysis"].get("1000", {})
    drops, drop_rows = payload.get("drop_analysis", {}), payload.get("drop_rows", [])
    lines = [
        "| criterion (`--criterion`) | reads | (i) CONV-only vs GCONV-only, 1,000 images: t "
        "(contrast ± SE) | of the held-out likelihood's t | right on both data sets | (ii) a "
        "path dropped from the mixer, 3,000 images: t |",
        "|---|---|---|---:|---|---|",
    ]
    for key, (words, reads, name) in CRITERION_WORDS.items():
        one = single.get(key)
        if one is None:
            continue
        label = words if name is None else f"{words} (`{name}`)"
        if drops:
            two = "not computed"
            if key in drops:
                found = drops[key]
                two = f"{_t(found)}; right on both at {found['both_ways']} of {len(found['seeds'])}"
        else:
            done = sorted({(r["dataset"], r["seed"]) for r in drop_rows})
            two = f"not measured yet ({len(done)} of 6 data set and seed pairs)"
        lines.append(
            f"| {label} | {reads} | {_t(one)} | {100 * one['share_of_validation_t']:.0f}% | "
            f"{one['both_ways']} of {len(one['seeds'])} seeds | {two} |"
        )
    noise = payload["noise"]["1000"]
    legend = textwrap.fill(
        "t: the mean over the seeds of the rotated-minus-upright difference of each "
        "criterion's GCONV-minus-CONV gap (in (ii): of the gains of dropping CONV and "
        "GCONV), over its standard error; *right on both data sets*: CONV ahead on upright "
        "digits and GCONV on rotated ones at that seed. One architecture's evidence moved "
        f"by {noise['seed_sd']['total']:.0f} nats between seeds, "
        f"{noise['refit_sd']['log_evidence']:.0f} when refitted at the same weights: the "
        "spread is the trainings', not the estimator's. Written from "
        "`experiments/results/criteria.json` by `python -m benchmarks.claims`; the record: "
        "[0044](../research/0044-how-sure-each-answer-is.md).",
        width=92,
        break_on_hyphens=False,
    )
    return "\n".join([*lines, "", legend])


def answers_sentence(root: Path = ROOT) -> str:
    """The README's sentence on how sure the answers are, from record 0044's results."""
    single = _criteria(root)["analysis"]["1000"]
    a, g, h = (single[k] for k in ("a_evidence", "g_validation", "h_training_speed"))
    return textwrap.fill(
        "How sure: on CONV-only against GCONV-only networks (1,000 images, "
        f"{len(a['seeds'])} seeds) the evidence's answer is {a['t']:.1f} standard errors from "
        f"none (right on both data sets at {a['both_ways']} of {len(a['seeds'])} seeds), a "
        f"held-out likelihood's {g['t']:.1f} ({g['both_ways']} of {len(g['seeds'])}), "
        f"training speed's {h['t']:.1f} ({h['both_ways']} of {len(h['seeds'])}) "
        "([how sure](docs/guide/symmetry.md#how-sure-each-answer-is)).",
        width=92,
        break_on_hyphens=False,
    )


# ---------------------------------------------------------------- tables

LEGEND = textwrap.fill(
    "Each row reads one profile of one benchmark. *Within noise*: the gap is under twice its "
    "standard error (binomial, on the test images the seeds share) or its half range over "
    "the seeds; *not reproduced*: it points against the claim; one seed measures no "
    "seed-to-seed noise, so its gaps are reported, not called (*noise not measured*); a "
    "tolerance is tested on the mean gap. Written by `python -m benchmarks.claims`.",
    width=92,
    break_on_hyphens=False,
)


def readme_table(claims: Sequence[Claim]) -> str:
    lines = [
        "| claim of the papers | profile | holds at our budget? | current figure "
        "(seeds; mean ± half range) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {c.readme} | `{c.profile}` | {c.verdict} | {c.figure} |" for c in claims]
    return "\n".join([*lines, "", LEGEND])


def glance_table(claims: Sequence[Claim]) -> str:
    lines = [
        "| experiment | profile | the paper's claim | at our budget | figure "
        "(seeds; mean ± half range) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| [{c.section}](#{c.anchor}) | `{c.profile}` | {c.glance} | {c.verdict} | {c.figure} |"
        for c in claims
    ]
    return "\n".join([*lines, "", LEGEND])


MAIN_JOB = "benchmarks/results/main_job.json"
#: the README's line under the main job's sample output
MAIN_BEGIN = "<!-- main-job:begin (written by python -m benchmarks.claims; do not edit) -->"
MAIN_END = "<!-- main-job:end -->"


def _rounds_problem(rounds: list[dict]) -> str | None:
    """Where the main job's rounds drop a path their round does not keep, or name a winner
    that is none of their rows (the last one must have one); None where nothing is."""
    if not rounds:
        return "selection.rounds is empty"
    for i, this in enumerate(rounds):
        dropped = [r["dropped"] for r in this["rows"]]
        for j, name in enumerate(dropped):
            if name != "none" and name not in this["kept"]:
                return (
                    f"selection.rounds[{i}].rows[{j}].dropped is {name!r}, neither 'none' nor "
                    f"one of the round's kept paths ({', '.join(this['kept'])})"
                )
        if this["winner"] not in dropped and (this["winner"] is not None or i == len(rounds) - 1):
            return (
                f"selection.rounds[{i}].winner is {this['winner']!r}, none of its rows' "
                f"({', '.join(dropped) or 'no rows'})"
            )
    return None


def main_job_line(root: Path = ROOT) -> str:
    """The README's sentence on the main job's selection, from ``results/main_job.json``
    (``python -m benchmarks.main_job``): the answer, each step with its spread over the seeds
    where they were measured (:func:`ella.selection.decision`), else that one training per
    candidate decides nothing and what more seeds cost."""
    path = root / MAIN_JOB
    if not path.is_file():
        raise SystemExit(f"{MAIN_JOB} is missing: python -m benchmarks.main_job writes it")
    from ella.selection import MORE_SEEDS, drop_gains, format_spread, replicate_seeds

    payload = read_results(root, MAIN_JOB, "python -m benchmarks.main_job", _MAIN_JOB)
    sel = payload["selection"]
    problem = _rounds_problem(sel["rounds"])
    if problem is not None:
        raise _refusal(
            MAIN_JOB, f"is not as its script writes it: {problem}", "python -m benchmarks.main_job"
        )
    sure, k = sel.get("decision"), sel.get("seeds", 1)

    last = sel["rounds"][-1]
    chosen = next(r for r in last["rows"] if r["dropped"] == last["winner"])
    first = sel["rounds"][0]["rows"][0]
    kept = "+".join(sel["kept"]).upper()
    if sure is not None and k > 1:
        drops = [f"{s['unit'].upper()} ({format_spread(s, ' nats')})"
                 for s in sure["steps"] if s["action"] == "drop"]  # fmt: skip
        rival = next((s for s in sure["steps"] if s["action"] == "keep"), None)
        rival_text = (
            ""
            if rival is None
            else f" (dropping {rival['unit'].upper()}, the cheapest, would cost "
            f"{format_spread(rival, ' nats', cost=True)})"
        )
    else:
        drops = [f"{d.upper()} ({gain:+.0f} nats)" for _, d, gain in drop_gains(sel)]
        rival_text = ""
        if last["winner"] == "none" and len(last["rows"]) > 1:
            rival = max(last["rows"][1:], key=lambda r: r["log_evidence"])
            cost = chosen["log_evidence"] - rival["log_evidence"]
            rival_text = (
                f" (dropping {rival['dropped'].upper()}, the cheapest, would cost {cost:.0f} nats)"
            )
    how = f"drops {', then '.join(drops)} and keeps {kept}" if drops else f"keeps {kept}"
    how += rival_text
    if k == 1:
        more = MORE_SEEDS - 1
        how += (
            f"; one training per candidate, so not decided (one seed measures no spread; "
            f"`--seeds {MORE_SEEDS}` trains {more * sel['networks']} more networks)"
        )
    elif sure is not None and not sure["decided"]:
        how += f"; not decided at {k} seeds"
    seed = payload["run"]["seed"]
    command, networks, seeds = "`ella select RUN`", f"{sel['networks']} networks", f"seed {seed}"
    if k > 1:
        command = f"`ella select RUN --seeds {k}`"
        networks += f" at {k} seeds each"
        seeds = f"seeds {', '.join(map(str, replicate_seeds(seed, k)))}"
    return (
        f"Asked which paths the data need ({command}, {sel['epochs']} epochs per "
        f"network, {networks}), the evidence {how}; the selected network's test accuracy "
        f"is {100 * chosen['test_accuracy']:.2f}% (the whole network trained on alike: "
        f"{100 * first['test_accuracy']:.2f}%; {seeds}, `{MAIN_JOB}`)."
    )


def blocks(root: Path = ROOT) -> dict[tuple[Path, str, str], str]:
    """What lies between each file's markers (paths relative to ``root``)."""
    claims = all_claims(root)
    return {
        (README, BEGIN, END): readme_table(claims),
        (REPRODUCING, BEGIN, END): glance_table(claims),
        (GUIDE, BEGIN, END): reliability_table(root),
        (GUIDE, CRITERIA_BEGIN, CRITERIA_END): criteria_table(root),
        (README, ANSWERS_BEGIN, ANSWERS_END): answers_sentence(root),
        (README, MAIN_BEGIN, MAIN_END): main_job_line(root),
    }


def render(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """Each file's text now and as the script writes it."""
    out: dict[Path, tuple[str, str]] = {}
    for (name, begin, end), block in blocks(root).items():
        text = out[name][1] if name in out else (root / name).read_text()
        old = out[name][0] if name in out else text
        out[name] = old, splice_between(text, begin, end, block, str(name))
    return out


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 and print a diff where a table differs from the results",
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = 0
        for name, (text, new) in render(root).items():
            if new != text:
                stale += 1
                sys.stdout.writelines(
                    difflib.unified_diff(
                        text.splitlines(keepends=True),
                        new.splitlines(keepends=True),
                        f"a/{name}",
                        f"b/{name}",
                    )
                )
        if stale:
            print(f"{stale} file(s) differ from the results: run python -m benchmarks.claims")
        return 1 if stale else 0
    for (name, begin, end), block in blocks(root).items():
        changed = write_between(root / name, begin, end, block)
        print(f"{'wrote' if changed else 'unchanged:'} {name} ({begin.split(':')[0][5:]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
