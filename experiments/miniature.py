"""Issue 59's decisive experiment, in miniature: does the learned CONV/GCONV split of a
redundant mixer follow the data's symmetry once the priors have converged, from either
start, by the Kronecker-factored evidence (ella's) and by the full GGN's?

The network is small enough that the full GGN of all its parameters is a dense matrix
whose log determinant costs a fraction of a second: 14x14 images (MNIST average-pooled
2x2), lifted to C4, three :class:`ella.nn.RelaxedLayer`\\ s with paths CONV and GCONV and
no normalisation (with instance norm the evidence has a flat direction and the
precisions run away, ``docs/research/0012-precisions-run-away.md``), a max group pool, a
global average pool and a linear head.

Phases (``--phase``):

* ``check``: the single-path networks, CONV-only and GCONV-only, on MNIST and rotated MNIST
  at both seeds, trained with learned priors (ella's KFAC rounds) for ``--check-epochs``;
  at the end each is read by both estimators at their optimal precisions. The evidence
  should rank CONV first on MNIST and GCONV first on rotated MNIST; if it does not at this
  ``--train-size``, the mixture's split cannot be expected to follow the data there.
* ``map``: MAP runs (the initial precision held fixed) choose the learning rate on
  validation NLL: Adam at a constant rate, ``LEARNING_RATES``, at seed 0 from the CONV
  start, on both data sets (lowest mean validation NLL wins); then the MAP twin of every
  learned configuration at the chosen rate, for learned against MAP.
* ``learned``: the main grid. Two data sets x two seeds x two starts (``conv``: the GCONV
  path starts at zero; ``gconv``: the CONV path does) x two estimators (``kfac``: ella's
  :class:`~ella.PriorLearner` rounds, native backend, exact GGN on the whole training set;
  ``full``: the dense GGN of :mod:`experiments.full_ggn`), the same Adam steps on the log
  precisions per round (20 at rate 0.1, the learner's defaults), every ``--frequency``
  epochs from ``--burnin``. Every round records the precisions and each layer's shares.
* ``summarise``: ``experiments/results/miniature.md`` from the results file, printed.
* ``all``: check, map, learned, summarise. ``time``: measures an epoch and one round of
  each estimator at the chosen size and prints the estimated time of every phase.

What is ella's and what is this script's own: the data (``load_dataset`` and the hold-out
split of ``ella train --validation-size``), the layers, the priors' rounds
(:class:`~ella.PriorLearner`: KFAC evidence, Adam on the log precisions), the KFAC
readings (:class:`~ella.marglik.LaplaceEvidence`, the effective-parameter report) and the
results file's writes (:func:`ella.io.save_jsonl`) are ella's. Three parts are the
script's own, and stay so because the committed results were made with them:

* the network (:func:`build`): 14x14 images, three layers of these widths and strides and a
  bare linear head, small enough for the dense GGN; ella's mixer builds another network
  (its head, normalisation and downsampling);
* the epoch (:func:`train_epoch`, :func:`run`): Adam at a constant rate over one random
  order per seed, no augmentation, with a round of either estimator; ella's loop draws its
  own random streams, schedules the rate and shifts the images, and has no full-GGN
  round (:mod:`experiments.full_ggn`), so its runs would be other runs;
* the validation figures (:func:`evaluate`): the float32 mean over all held-out logits;
  :func:`ella.train.evaluate` sums in float64, which moves the last digits.

Each finished run appends one JSON line to ``experiments/results/miniature.jsonl`` (its
configuration, summary, per-round trace and the final readings of both estimators); a
run already in the file with the same configuration and budget is skipped, so an
interrupted phase resumes with the run it was in.

Measures (fixed before the runs): per layer, GCONV's share of the effective parameters
and ``log(CONV prior variance / GCONV prior variance) = log(delta_gconv / delta_conv)``,
each averaged over the layers, with the paper's per-parameter relative measure beside
them. The split *follows the data* for an estimator where the GCONV share is higher and
the log ratio lower on rotated MNIST than on MNIST in all four (seed, start) runs: the
ranges over the four runs on the two data sets do not overlap.

At the defaults (1,000 training and 500 validation images, 300 epochs of Adam at a
constant rate in batches of 100, a round every 10 epochs from epoch 20: 29 rounds) the
network has 1,160 parameters; an epoch takes about 0.12-0.15 s on 2 CPU cores, a KFAC
round 0.5 s, a full-GGN round 2.5 s (1.2 s for the GGN, 1.3 s for the 20 steps), and
``--phase all`` about 36 minutes (``--phase time`` measures and estimates again):

    python -m experiments.miniature --phase time      --data-dir ../shared/data
    python -m experiments.miniature --phase check     --data-dir ../shared/data   # ~3 min
    python -m experiments.miniature --phase map       --data-dir ../shared/data   # ~8 min
    python -m experiments.miniature --phase learned   --data-dir ../shared/data   # ~25 min
    python -m experiments.miniature --phase summarise --data-dir ../shared/data
    python -m experiments.miniature --phase all       --data-dir ../shared/data
    python -m experiments.miniature --phase all --dry   # every phase on 64 images, ~1.5 min
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella import PriorLearner
from ella.data import load_dataset
from ella.io import save_jsonl
from ella.learner.report import effective_parameter_report
from ella.marglik import LaplaceEvidence
from ella.nn import GroupPool, Lift, RelaxedLayer
from ella.train.loop import split_validation
from experiments.full_ggn import FullEvidence, effective_report, optimal_log_prior
from studies.results import EXPERIMENT_RESULTS, environment, write_markdown

NAME = "miniature"
DATASETS = ("mnist", "rotated_mnist")
SEEDS = (0, 1)
#: a learned run's start: the path that starts at zero (RelaxedLayer's ``zero_init``)
STARTS = {"conv": ("gconv",), "gconv": ("conv",)}
ESTIMATORS = ("kfac", "full")
#: the learning rates the MAP phase chooses between (Adam, constant rate)
LEARNING_RATES = (3e-3, 1e-2)
#: the learning rate of the check phase's single-path networks (not tuned)
CHECK_LR = 3e-3
#: channels per group copy of the three relaxed layers, and their strides
WIDTHS = (1, 1, 4)
STRIDES = (1, 2, 1)
IMAGE_SIZE = 14
#: the rounds' window for "do the precisions still move": the change over the last 5 rounds
LAST_ROUNDS = 5


@dataclass(frozen=True)
class Budget:
    """What every run of a phase shares; part of each run's key in the results file."""

    train_size: int = 1000
    validation_size: int = 500
    epochs: int = 300
    burnin: int = 20
    frequency: int = 10
    batch_size: int = 100
    check_epochs: int = 150
    prior_precision: float = 1.0
    n_hypersteps: int = 20
    lr_hyp: float = 0.1
    widths: tuple[int, ...] = WIDTHS

    def tag(self, kind: str) -> str:
        epochs = self.check_epochs if kind == "check" else self.epochs
        return (
            f"n{self.train_size}v{self.validation_size}e{epochs}b{self.burnin}"
            f"f{self.frequency}bs{self.batch_size}p{self.prior_precision:g}"
            f"w{'-'.join(map(str, self.widths))}"
        )

    def rounds(self, epochs: int) -> list[int]:
        return [e for e in range(1, epochs + 1) if due(self, e)]


#: ``--dry``: a smoke test of every phase in seconds
DRY = Budget(
    train_size=64, validation_size=32, epochs=3, burnin=1, frequency=1, batch_size=32,
    check_epochs=2,
)  # fmt: skip


def due(budget: Budget, epoch: int) -> bool:
    return epoch >= budget.burnin and epoch % budget.frequency == 0


# ---------------------------------------------------------------------------- data, model
@dataclass
class Split:
    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor

    @property
    def train_set(self) -> TensorDataset:
        return TensorDataset(self.x, self.y)


_DATA: dict[tuple, Split] = {}


def load(dataset: str, budget: Budget, data_dir: str | None) -> Split:
    """The first ``train_size + validation_size`` training images of ``dataset``,
    average-pooled 28 -> 14, the last ``validation_size`` held out (as ``ella train
    --validation-size`` holds them out)."""
    key = (dataset, budget.train_size, budget.validation_size, data_dir)
    if key not in _DATA:
        data = load_dataset(dataset, data_dir, budget.train_size + budget.validation_size, 1)
        data, validation = split_validation(data, budget.validation_size)
        (x, y), (x_val, y_val) = data.train.tensors, validation.tensors
        _DATA[key] = Split(F.avg_pool2d(x, 2), y, F.avg_pool2d(x_val, 2), y_val)
    return _DATA[key]


def build(
    paths: Sequence[str] | Sequence[Sequence[str]],
    zero_init: Sequence[str],
    widths: Sequence[int],
) -> nn.Module:
    """Lift to C4, three relaxed layers (``widths`` channels per group copy, strides
    ``STRIDES``, no normalisation), max over the group, global average, linear head.

    ``paths`` names the paths of every layer (``("conv", "gconv")``) or, one tuple per
    layer, each layer's own (``(("conv",), ("conv", "gconv"), ("gconv",))``)."""
    per_layer = [paths] * len(widths) if isinstance(paths[0], str) else list(paths)
    modules: list[tuple[str, nn.Module]] = [("lift", Lift("C4"))]
    channels, size = 1, IMAGE_SIZE
    for i, (width, stride, kept) in enumerate(zip(widths, STRIDES, per_layer, strict=True)):
        layer = RelaxedLayer(
            channels, width, size, "C4", paths=kept, stride=stride, norm="none",
            zero_init=zero_init,
        )  # fmt: skip
        modules.append((f"layer{i + 1}", layer))
        channels, size = width, layer.out_size[0]
    modules += [
        ("pool", GroupPool("C4")),
        ("gap", nn.AdaptiveAvgPool2d(1)),
        ("flat", nn.Flatten()),
        ("head", nn.Linear(channels, 10)),
    ]
    return nn.Sequential(OrderedDict(modules))


def describe_network(widths: Sequence[int]) -> str:
    sizes = {}
    for paths in (("conv", "gconv"), ("conv",), ("gconv",)):
        sizes["+".join(paths)] = sum(p.numel() for p in build(paths, (), widths).parameters())
    return (
        f"Lift(C4) on 14x14, RelaxedLayer x3 (channels per copy 1->{'->'.join(map(str, widths))}, "
        f"strides {'/'.join(map(str, STRIDES))}, 3x3, no norm), GroupPool(max), global average, "
        f"Linear({widths[-1]}, 10); parameters: "
        + ", ".join(f"{k} {v:,}" for k, v in sizes.items())
    )


# ---------------------------------------------------------------------------- measures
def layer_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, RelaxedLayer)]


def measures(layers: list[dict], log_prior: dict[str, float]) -> dict:
    """GCONV's share of the effective parameters, the paper's relative measure and
    ``log(delta_gconv / delta_conv)``, per layer and averaged over the layers (``None``
    for a single-path network)."""
    if not layers or not all(row["parameters"].get(p) for row in layers for p in ("conv", "gconv")):
        return {"gconv_share": None, "log_ratio": None, "relative_gconv": None}
    share = [row["gconv"] for row in layers]
    relative = [row["relative"]["gconv"] for row in layers]
    ratio = [
        log_prior[f"{row['layer']}.gconv"] - log_prior[f"{row['layer']}.conv"] for row in layers
    ]
    return {
        "gconv_share": statistics.fmean(share),
        "gconv_share_by_layer": share,
        "log_ratio": statistics.fmean(ratio),
        "log_ratio_by_layer": ratio,
        "relative_gconv": statistics.fmean(relative),
        "relative_gconv_by_layer": relative,
        "effective_by_layer": [
            {p: row["effective"][p] for p in ("conv", "gconv")} for row in layers
        ],
    }


def as_dict(prior, log_prior: torch.Tensor) -> dict[str, float]:
    return dict(zip(prior.names, log_prior.detach().double().tolist(), strict=True))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = torch.cat([model(xb) for xb in x.split(500)])
    model.train()
    return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


def kfac_evidence(model: nn.Module, prior, split: Split) -> LaplaceEvidence:
    evidence = LaplaceEvidence(model, prior, ggn="exact")
    evidence.fit(DataLoader(split.train_set, batch_size=250))
    return evidence


def reading(estimator: str, model: nn.Module, prior, split: Split, log_prior: torch.Tensor) -> dict:
    """Both readings of one estimator at the model's weights: at the run's precisions and
    at the estimator's optimum for these weights (KFAC: the closed form; full GGN:
    Newton), each with its log evidence and measures."""
    out = {}
    if estimator == "kfac":
        evidence = kfac_evidence(model, prior, split)
        optimum = evidence.optimal_log_prior()
        for where, u in (("at_run", log_prior.detach()), ("at_optimum", optimum)):
            layers = effective_parameter_report(model, evidence, u.exp())["layers"]
            u_dict = as_dict(prior, u)
            out[where] = {
                "log_evidence": float(evidence.log_marginal_likelihood(u)),
                "log_prior": u_dict,
                **measures(layers, u_dict),
            }
    else:
        evidence = FullEvidence.of_model(model, prior, split.x, split.y)
        optimum, iterations = optimal_log_prior(evidence, log_prior)
        for where, u in (("at_run", log_prior.detach().double()), ("at_optimum", optimum)):
            layers = effective_report(prior, evidence, u)["layers"]
            u_dict = as_dict(prior, u)
            out[where] = {
                "log_evidence": evidence.log_marginal_likelihood(u),
                "log_prior": u_dict,
                **measures(layers, u_dict),
            }
        out["newton_iterations"] = iterations
    return out


# ---------------------------------------------------------------------------- one run
@dataclass(frozen=True)
class Spec:
    kind: str  # check, map, learned
    dataset: str
    seed: int
    paths: tuple[str, ...]
    start: str | None  # conv / gconv for the mixer; None for a single-path network
    estimator: str | None  # kfac / full; None: MAP
    lr: float

    def key(self, budget: Budget) -> str:
        what = self.start if self.start else "+".join(self.paths)
        return (
            f"{self.kind}/{self.dataset}/seed{self.seed}/{what}/{self.estimator or 'map'}/"
            f"lr{self.lr:g}/{budget.tag(self.kind)}"
        )


def train_epoch(
    model: nn.Module,
    priors: PriorLearner,
    optimizer: torch.optim.Optimizer,
    split: Split,
    order: torch.Generator,
    batch_size: int,
) -> tuple[float, float]:
    """One epoch of ``optimizer`` on the cross-entropy plus the priors' penalty, in the
    random order ``order`` draws; returns the mean training loss and accuracy."""
    n = len(split.y)
    model.train()
    total_loss, correct = 0.0, 0
    for index in torch.randperm(n, generator=order).split(batch_size):
        logits = model(split.x[index])
        loss = F.cross_entropy(logits, split.y[index])
        optimizer.zero_grad(set_to_none=True)
        (loss + priors.penalty()).backward()
        optimizer.step()
        total_loss += float(loss.detach()) * len(index)
        correct += int((logits.argmax(1) == split.y[index]).sum())
    return total_loss / n, correct / n


def run(spec: Spec, budget: Budget, data_dir: str | None, log=print) -> dict:
    """Train one configuration and read it; returns its results row."""
    split = load(spec.dataset, budget, data_dir)
    n = len(split.y)
    epochs = budget.check_epochs if spec.kind == "check" else budget.epochs
    torch.manual_seed(spec.seed)
    zero = STARTS[spec.start] if spec.start else ()
    model = build(spec.paths, zero, budget.widths)
    priors = PriorLearner(
        model, n, prior_precision=budget.prior_precision, lr=budget.lr_hyp, ggn="exact",
        update="adam", subset_size=None, control="none", batch_size=250,
        n_hypersteps=budget.n_hypersteps, seed=spec.seed,
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.lr)
    order = torch.Generator().manual_seed(spec.seed)
    trace: list[dict] = []
    epoch_seconds, round_seconds = [], []
    start_time = time.perf_counter()
    train_loss = train_acc = float("nan")
    for epoch in range(1, epochs + 1):
        tick = time.perf_counter()
        train_loss, train_acc = train_epoch(
            model, priors, optimizer, split, order, budget.batch_size
        )
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"{spec.key(budget)}: training diverged at epoch {epoch}")
        epoch_seconds.append(time.perf_counter() - tick)
        if spec.estimator is None or not due(budget, epoch):
            continue
        tick = time.perf_counter()
        if spec.estimator == "kfac":
            value = priors.evidence_round(split.train_set, epoch)
            layers = priors.report()["effective_parameters"]
        else:
            evidence = FullEvidence.of_model(model, priors.prior, split.x, split.y)
            value = evidence.hyper_steps(priors.log_prior, priors.optimizer, budget.n_hypersteps, n)
            layers = effective_report(priors.prior, evidence, priors.log_prior)["layers"]
        round_seconds.append(time.perf_counter() - tick)
        u = as_dict(priors.prior, priors.log_prior)
        val_acc, val_nll = evaluate(model, split.x_val, split.y_val)
        m = measures(layers, u)
        trace.append(
            {
                "epoch": epoch, "log_evidence": value, "log_prior": u,
                "gconv_share_by_layer": m.get("gconv_share_by_layer"),
                "relative_gconv_by_layer": m.get("relative_gconv_by_layer"),
                "effective_by_layer": m.get("effective_by_layer"),
                "train_loss": train_loss, "train_acc": train_acc,
                "val_acc": val_acc, "val_nll": val_nll, "seconds": round_seconds[-1],
            }
        )  # fmt: skip
        share = "" if m["gconv_share"] is None else (
            f", GCONV share {m['gconv_share']:.1f}%, log ratio {m['log_ratio']:+.2f}"
        )  # fmt: skip
        log(
            f"    epoch {epoch}: log evidence {value:.1f}{share}, train {train_acc:.3f}, "
            f"val {val_acc:.3f}/{val_nll:.3f} ({round_seconds[-1]:.1f} s round)"
        )
    training_seconds = time.perf_counter() - start_time
    tick = time.perf_counter()
    val_acc, val_nll = evaluate(model, split.x_val, split.y_val)
    readings = {e: reading(e, model, priors.prior, split, priors.log_prior) for e in ESTIMATORS}
    reading_seconds = time.perf_counter() - tick
    own = readings[spec.estimator or "kfac"]["at_run"]
    summary = {
        "val_acc": val_acc, "val_nll": val_nll, "train_acc": train_acc, "train_loss": train_loss,
        "log_evidence": own["log_evidence"],
        **{k: v for k, v in own.items() if k not in ("log_evidence", "log_prior")},
        "log_prior": as_dict(priors.prior, priors.log_prior),
        **movement(trace),
    }  # fmt: skip
    return {
        "key": spec.key(budget),
        **dataclasses.asdict(spec),
        "budget": dataclasses.asdict(budget),
        "parameters": sum(p.numel() for p in model.parameters()),
        "summary": summary,
        "readings": readings,
        "trace": trace,
        "seconds": {
            "total": training_seconds + reading_seconds,
            "epoch": statistics.fmean(epoch_seconds),
            "round": statistics.fmean(round_seconds) if round_seconds else None,
            "readings": reading_seconds,
        },
        "environment": environment("cpu"),
    }


def movement(trace: list[dict], window: int = LAST_ROUNDS) -> dict:
    """How much the log precisions and the GCONV share moved over the last ``window``
    rounds (from round ``-window-1`` to the last; all rounds where there are fewer)."""
    if len(trace) < 2:
        return {"last_rounds": None, "last_change": None, "last_share_change": None}
    first, last = trace[max(0, len(trace) - 1 - window)], trace[-1]
    steps = {g: last["log_prior"][g] - first["log_prior"][g] for g in last["log_prior"]}
    group = max(steps, key=lambda g: abs(steps[g]))
    share_change = None
    if last["gconv_share_by_layer"] is not None:
        share_change = statistics.fmean(last["gconv_share_by_layer"]) - statistics.fmean(
            first["gconv_share_by_layer"]
        )
    return {
        "last_rounds": len(trace) - 1 - max(0, len(trace) - 1 - window),
        "last_change": abs(steps[group]),
        "last_change_group": group,
        "last_change_by_group": steps,
        "last_share_change": share_change,
    }


# ---------------------------------------------------------------------------- results file
def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by an interrupted write
                continue
    return rows


def append_row(path: Path, row: dict) -> None:
    """Add ``row`` to the JSON lines of ``path`` (the file written again atomically, as
    strict JSON; a line an interrupted write of an older version cut is dropped)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_jsonl([*read_rows(path), row], path)


class Runner:
    """Runs the specs that the results file does not hold yet, appending each row."""

    def __init__(self, path: Path, budget: Budget, data_dir: str | None):
        self.path, self.budget, self.data_dir = path, budget, data_dir
        self.rows = {r["key"]: r for r in read_rows(path)}

    def get(self, spec: Spec) -> dict | None:
        return self.rows.get(spec.key(self.budget))

    def ensure(self, specs: Iterable[Spec], what: str) -> list[dict]:
        specs = list(specs)
        todo = [s for s in specs if self.get(s) is None]
        print(f"== {what}: {len(specs)} runs, {len(specs) - len(todo)} already in {self.path}")
        done_seconds: list[float] = []
        for i, spec in enumerate(todo, 1):
            eta = ""
            if done_seconds:
                left = statistics.fmean(done_seconds) * (len(todo) - i + 1) / 60
                eta = f", about {left:.1f} min left"
            print(f"  [{i}/{len(todo)}] {spec.key(self.budget)}{eta}", flush=True)
            tick = time.perf_counter()
            try:
                row = run(spec, self.budget, self.data_dir, log=lambda s: print(s, flush=True))
            except Exception as error:  # recorded, so that a restart does not repeat it
                row = {"key": spec.key(self.budget), **dataclasses.asdict(spec),
                       "failed": f"{type(error).__name__}: {error}"}  # fmt: skip
                print(f"  FAILED: {row['failed']}", flush=True)
            append_row(self.path, row)
            self.rows[row["key"]] = row
            done_seconds.append(time.perf_counter() - tick)
            if "failed" in row:
                continue
            s = row["summary"]
            share = "" if s["gconv_share"] is None else (
                f", GCONV share {s['gconv_share']:.1f}%, log ratio {s['log_ratio']:+.2f}"
            )  # fmt: skip
            print(
                f"  done in {row['seconds']['total']:.0f} s: val {s['val_acc']:.3f}/"
                f"{s['val_nll']:.3f}, log evidence {s['log_evidence']:.1f}{share}",
                flush=True,
            )
        rows = [self.get(s) for s in specs]
        return [r for r in rows if "failed" not in r]


# ---------------------------------------------------------------------------- the phases
def check_specs() -> list[Spec]:
    return [
        Spec("check", d, s, (p,), None, "kfac", CHECK_LR)
        for s in SEEDS for d in DATASETS for p in ("conv", "gconv")
    ]  # fmt: skip


def selection_specs() -> list[Spec]:
    return [
        Spec("map", d, SEEDS[0], ("conv", "gconv"), "conv", None, lr)
        for lr in LEARNING_RATES for d in DATASETS
    ]  # fmt: skip


def twin_specs(lr: float) -> list[Spec]:
    return [
        Spec("map", d, s, ("conv", "gconv"), start, None, lr)
        for start in STARTS for s in SEEDS for d in DATASETS
    ]  # fmt: skip


def learned_specs(lr: float) -> list[Spec]:
    return [
        Spec("learned", d, s, ("conv", "gconv"), start, e, lr)
        for e in ESTIMATORS for s in SEEDS for d in DATASETS for start in STARTS
    ]  # fmt: skip


def chosen_lr(rows: list[dict]) -> float:
    """The learning rate whose MAP runs at seed 0 have the lowest mean validation NLL over
    the two data sets."""
    by_lr: dict[float, list[float]] = {}
    for r in rows:
        by_lr.setdefault(r["lr"], []).append(r["summary"]["val_nll"])
    return min(by_lr, key=lambda lr: statistics.fmean(by_lr[lr]))


def phase_map(runner: Runner) -> float:
    lr = chosen_lr(runner.ensure(selection_specs(), "map: choosing the learning rate"))
    print(f"chosen learning rate {lr:g} (lowest mean validation NLL of the MAP runs at seed 0)")
    runner.ensure(twin_specs(lr), f"map: the MAP twin of every learned run at lr {lr:g}")
    return lr


# ---------------------------------------------------------------------------- summary
def _fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def follows(rows: list[dict], measure: str, higher_on_rotated: bool) -> dict | None:
    """The rule: over the (seed, start) runs, the range of ``measure`` on rotated MNIST
    lies above (or below) its range on MNIST; ``None`` without every run."""
    values = {d: [r["summary"][measure] for r in rows if r["dataset"] == d] for d in DATASETS}
    if any(len(v) < len(SEEDS) * len(STARTS) or None in v for v in values.values()):
        return None
    mnist, rotated = values["mnist"], values["rotated_mnist"]
    gap = min(rotated) - max(mnist) if higher_on_rotated else min(mnist) - max(rotated)
    return {
        "mnist": [min(mnist), max(mnist)],
        "rotated_mnist": [min(rotated), max(rotated)],
        "spread": max(max(mnist) - min(mnist), max(rotated) - min(rotated)),
        "gap": gap,
        "holds": gap > 0,
    }


def start_dependence(rows: list[dict], measure: str) -> list[float]:
    """``|conv start - gconv start|`` of ``measure`` per (data set, seed)."""
    out = []
    for d in DATASETS:
        for s in SEEDS:
            pair = {r["start"]: r["summary"][measure] for r in rows
                    if r["dataset"] == d and r["seed"] == s}  # fmt: skip
            if len(pair) == 2 and None not in pair.values():
                out.append(abs(pair["conv"] - pair["gconv"]))
    return out


def summarise(runner: Runner, command: str) -> str:
    b = runner.budget
    rows = [r for r in runner.rows.values() if "failed" not in r]
    failed = [r["key"] for r in runner.rows.values() if "failed" in r]
    lines = [
        "# Issue 59's miniature: does the CONV/GCONV split follow the data?",
        "",
        f"`{command}`. {describe_network(b.widths)}. {b.train_size} training and "
        f"{b.validation_size} validation images (the first of each set's training images), "
        f"Adam at a constant rate, batches of {b.batch_size}, {b.epochs} epochs (check: "
        f"{b.check_epochs}); evidence rounds every {b.frequency} epochs from epoch "
        f"{b.burnin}, {b.n_hypersteps} Adam steps at {b.lr_hyp:g} on the log precisions "
        f"(initial precision {b.prior_precision:g}); KFAC: ella's native backend, exact GGN, "
        "all training images; full: the dense GGN (`experiments/full_ggn.py`).",
        "",
    ]
    # check
    check = {(r["dataset"], r["seed"], r["paths"][0]): r for r in rows
             if r["kind"] == "check" and r["key"].endswith(b.tag("check"))}  # fmt: skip
    lines += [
        "## Check: the single-path networks ranked by the evidence",
        "",
        "Log evidence at each estimator's optimal precisions for the final weights "
        "(trained with KFAC rounds). Right: CONV ahead on MNIST, GCONV ahead on rotated MNIST.",
        "",
        "| data | seed | CONV-only val acc / NLL | GCONV-only val acc / NLL | KFAC CONV | "
        "KFAC GCONV | KFAC GCONV - CONV | full CONV | full GCONV | full GCONV - CONV |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    verdict: dict[str, list[bool]] = {e: [] for e in ESTIMATORS}
    for d in DATASETS:
        for s in SEEDS:
            c, g = check.get((d, s, "conv")), check.get((d, s, "gconv"))
            if c is None or g is None:
                continue
            cells = []
            for e in ESTIMATORS:
                ec = c["readings"][e]["at_optimum"]["log_evidence"]
                eg = g["readings"][e]["at_optimum"]["log_evidence"]
                cells += [f"{ec:.1f}", f"{eg:.1f}", f"{eg - ec:+.1f}"]
                verdict[e].append((eg > ec) == (d == "rotated_mnist"))
            lines.append(
                f"| {d} | {s} | {c['summary']['val_acc']:.3f} / {c['summary']['val_nll']:.3f} | "
                f"{g['summary']['val_acc']:.3f} / {g['summary']['val_nll']:.3f} | "
                + " | ".join(cells)
                + " |"
            )
    lines.append("")
    for e, right in verdict.items():
        if right:
            decisive = len(right) == len(DATASETS) * len(SEEDS) and all(right)
            lines.append(
                f"- {e}: right in {sum(right)} of {len(right)} (data set, seed) pairs"
                + (": decisive at this training-set size" if decisive else "")
            )
    # map
    maps = [r for r in rows if r["kind"] == "map" and r["key"].endswith(b.tag("map"))]
    selection = [r for r in maps if r["seed"] == SEEDS[0] and r["start"] == "conv"]
    lr = chosen_lr(selection) if selection else None
    lines += [
        "",
        "## MAP: the learning rate, and the MAP networks' split",
        "",
        "The precisions held at their initial value; the split is KFAC's reading at them.",
        "",
        "| lr | data | seed | start | val acc | val NLL | GCONV share % | log ratio |",
        "|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in sorted(maps, key=lambda r: (r["lr"], r["dataset"], r["seed"], r["start"])):
        s = r["summary"]
        lines.append(
            f"| {r['lr']:g} | {r['dataset']} | {r['seed']} | {r['start']} | {s['val_acc']:.3f} | "
            f"{s['val_nll']:.3f} | {_fmt(s['gconv_share'])} | {_fmt(s['log_ratio'], '+.2f')} |"
        )
    if lr is not None:
        lines += ["", f"Chosen learning rate: {lr:g} (lowest mean validation NLL at seed 0)."]
    # learned
    learned = [r for r in rows if r["kind"] == "learned" and r["key"].endswith(b.tag("learned"))
               and (lr is None or r["lr"] == lr)]  # fmt: skip
    twin = {(r["dataset"], r["seed"], r["start"]): r for r in maps if r["lr"] == lr}
    lines += [
        "",
        "## Learned priors",
        "",
        "At the final weights and precisions, read by the run's own estimator. Share: GCONV's "
        "share of the effective parameters, mean over the layers (the layers' values in "
        "brackets); log ratio: log(CONV prior variance / GCONV prior variance), mean over the "
        "layers; relative: the paper's per-parameter measure for GCONV; moved: the largest "
        f"change of a log precision over the last {LAST_ROUNDS} rounds (and of the share).",
        "",
        "| estimator | data | seed | start | GCONV share % | log ratio | relative GCONV % | "
        "val acc / NLL | MAP val acc / NLL | log evidence | moved: log delta, share |",
        "|---|---|---:|---|---|---|---:|---|---|---:|---|",
    ]
    order = {e: i for i, e in enumerate(ESTIMATORS)}
    for r in sorted(
        learned, key=lambda r: (order[r["estimator"]], r["dataset"], r["seed"], r["start"])
    ):
        s = r["summary"]
        m = twin.get((r["dataset"], r["seed"], r["start"]))
        map_cell = (
            "-" if m is None else f"{m['summary']['val_acc']:.3f} / {m['summary']['val_nll']:.3f}"
        )
        lines.append(
            f"| {r['estimator']} | {r['dataset']} | {r['seed']} | {r['start']} | "
            f"{s['gconv_share']:.1f} ({'/'.join(f'{v:.0f}' for v in s['gconv_share_by_layer'])}) | "
            f"{s['log_ratio']:+.2f} ({'/'.join(f'{v:+.1f}' for v in s['log_ratio_by_layer'])}) | "
            f"{s['relative_gconv']:.1f} | {s['val_acc']:.3f} / {s['val_nll']:.3f} | {map_cell} | "
            f"{s['log_evidence']:.1f} | {_fmt(s['last_change'], '.3f')}, "
            f"{_fmt(s['last_share_change'], '+.1f')} |"
        )
    lines += [
        "",
        "## Does the split follow the data?",
        "",
        "Per estimator and measure, the range over the four (seed, start) runs on each data "
        "set; it holds where the ranges do not overlap in the expected direction (GCONV "
        "share and relative measure higher, log ratio lower on rotated MNIST). Start: the "
        "largest |CONV start - GCONV start| over (data set, seed).",
        "",
        "| estimator | measure | MNIST | rotated MNIST | largest spread | gap | start | holds |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    overall = {}
    for e in ESTIMATORS:
        mine = [r for r in learned if r["estimator"] == e]
        results = {}
        for measure, higher in (
            ("gconv_share", True),
            ("log_ratio", False),
            ("relative_gconv", True),
        ):
            rule = follows(mine, measure, higher)
            if rule is None:
                continue
            results[measure] = rule["holds"]
            starts = start_dependence(mine, measure)
            lines.append(
                f"| {e} | {measure} | {rule['mnist'][0]:.2f} to {rule['mnist'][1]:.2f} | "
                f"{rule['rotated_mnist'][0]:.2f} to {rule['rotated_mnist'][1]:.2f} | "
                f"{rule['spread']:.2f} | {rule['gap']:+.2f} | {max(starts):.2f} | "
                f"{'yes' if rule['holds'] else 'no'} |"
            )
        if "gconv_share" in results and "log_ratio" in results:
            overall[e] = results["gconv_share"] and results["log_ratio"]
    lines.append("")
    for e in ESTIMATORS:
        if e in overall:
            lines.append(
                f"- **{e}: the split {'follows' if overall[e] else 'does not follow'} the data** "
                "(the rule: the GCONV share's and the log ratio's ranges over all seeds and "
                "starts both separated in the expected direction)."
            )
        else:
            lines.append(f"- {e}: not every run is in yet.")
    # learned vs MAP
    pairs = [(r, twin.get((r["dataset"], r["seed"], r["start"]))) for r in learned]
    pairs = [(r, m) for r, m in pairs if m is not None]
    if pairs:
        lines += ["", "Learned minus MAP (validation), mean over the runs with a MAP twin:", ""]
        for e in ESTIMATORS:
            mine = [(r, m) for r, m in pairs if r["estimator"] == e]
            if mine:
                acc = statistics.fmean(
                    r["summary"]["val_acc"] - m["summary"]["val_acc"] for r, m in mine
                )
                nll = statistics.fmean(
                    r["summary"]["val_nll"] - m["summary"]["val_nll"] for r, m in mine
                )
                better = sum(r["summary"]["val_nll"] < m["summary"]["val_nll"] for r, m in mine)
                lines.append(
                    f"- {e}: accuracy {100 * acc:+.2f} points, NLL {nll:+.3f}; lower NLL than "
                    f"MAP in {better} of {len(mine)}"
                )
    # cross readings and movement
    lines += [
        "",
        "## Both estimators at each learned run's final weights",
        "",
        "GCONV share % / log ratio read by KFAC and by the full GGN, at the run's precisions "
        "and at each estimator's optimum for the final weights.",
        "",
        "| run estimator | data | seed | start | KFAC at run | full at run | KFAC optimum "
        "| full optimum |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for r in sorted(
        learned, key=lambda r: (order[r["estimator"]], r["dataset"], r["seed"], r["start"])
    ):
        cells = []
        for where in ("at_run", "at_optimum"):
            for e in ESTIMATORS:
                x = r["readings"][e][where]
                cells.append(f"{x['gconv_share']:.1f} / {x['log_ratio']:+.2f}")
        lines.append(
            f"| {r['estimator']} | {r['dataset']} | {r['seed']} | {r['start']} | "
            + " | ".join(cells)
            + " |"
        )
    lines += [
        "",
        "## How the split moved over the rounds",
        "",
        "Mean GCONV share % and log ratio at five rounds, evenly spaced from the first to the "
        "last.",
        "",
        "| estimator | data | seed | start | rounds (epoch: share, log ratio) |",
        "|---|---|---:|---|---|",
    ]
    for r in sorted(
        learned, key=lambda r: (order[r["estimator"]], r["dataset"], r["seed"], r["start"])
    ):
        t = r["trace"]
        picks = sorted({round(i * (len(t) - 1) / 4) for i in range(5)}) if t else []
        steps = []
        for i in picks:
            u = t[i]["log_prior"]
            layers = layer_names_of(u)
            ratio = statistics.fmean(u[f"{name}.gconv"] - u[f"{name}.conv"] for name in layers)
            share = statistics.fmean(t[i]["gconv_share_by_layer"])
            steps.append(f"{t[i]['epoch']}: {share:.1f}, {ratio:+.2f}")
        lines.append(
            f"| {r['estimator']} | {r['dataset']} | {r['seed']} | {r['start']} | "
            f"{'; '.join(steps)} |"
        )
    if failed:
        lines += ["", "## Failed runs", ""] + [
            f"- `{key}`: {runner.rows[key]['failed']}" for key in failed
        ]
    return "\n".join(lines) + "\n"


def layer_names_of(log_prior: dict[str, float]) -> list[str]:
    return sorted({g.rsplit(".", 1)[0] for g in log_prior if g.endswith(".gconv")})


# ---------------------------------------------------------------------------- timing
def measure_times(budget: Budget, data_dir: str | None) -> dict:
    """Seconds of one epoch (mixer, and each single-path network), one round of each
    estimator and the final readings, at ``budget``'s size on the MNIST images."""
    split = load("mnist", budget, data_dir)
    n = len(split.y)
    out: dict[str, float] = {}
    for paths in (("conv", "gconv"), ("conv",), ("gconv",)):
        torch.manual_seed(0)
        model = build(paths, STARTS["conv"], budget.widths)
        optimizer = torch.optim.Adam(model.parameters(), lr=CHECK_LR)
        priors = PriorLearner(model, n, prior_precision=budget.prior_precision, ggn="exact",
                              update="adam", subset_size=None, control="none",
                              batch_size=250, seed=0)  # fmt: skip
        times = []
        for _ in range(3):  # the first warms up
            tick = time.perf_counter()
            for index in torch.randperm(n).split(budget.batch_size):
                loss = F.cross_entropy(model(split.x[index]), split.y[index]) + priors.penalty()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            times.append(time.perf_counter() - tick)
        tag = "+".join(paths)
        out[f"epoch {tag}"] = min(times[1:])
        tick = time.perf_counter()
        priors.evidence_round(split.train_set, 1)
        priors.report()
        out[f"kfac round {tag}"] = time.perf_counter() - tick
        tick = time.perf_counter()
        evidence = FullEvidence.of_model(model, priors.prior, split.x, split.y)
        out[f"full GGN {tag}"] = time.perf_counter() - tick
        tick = time.perf_counter()
        evidence.hyper_steps(priors.log_prior, priors.optimizer, budget.n_hypersteps, n)
        effective_report(priors.prior, evidence, priors.log_prior)
        out[f"full steps {tag}"] = time.perf_counter() - tick
        out[f"full round {tag}"] = out[f"full GGN {tag}"] + out[f"full steps {tag}"]
        tick = time.perf_counter()
        for e in ESTIMATORS:
            reading(e, model, priors.prior, split, priors.log_prior)
        out[f"readings {tag}"] = time.perf_counter() - tick
        out[f"parameters {tag}"] = sum(p.numel() for p in model.parameters())
    return out


def estimate(times: dict, budget: Budget) -> dict[str, float]:
    """Estimated seconds of each phase from :func:`measure_times`."""
    mix = "conv+gconv"
    rounds, check_rounds = (
        len(budget.rounds(budget.epochs)),
        len(budget.rounds(budget.check_epochs)),
    )
    check = sum(
        len(SEEDS) * len(DATASETS) * (
            budget.check_epochs * times[f"epoch {p}"] + check_rounds * times[f"kfac round {p}"]
            + times[f"readings {p}"]
        )
        for p in ("conv", "gconv")
    )  # fmt: skip
    map_run = budget.epochs * times[f"epoch {mix}"] + times[f"readings {mix}"]
    n_map = len(selection_specs()) + len(twin_specs(LEARNING_RATES[0])) - len(DATASETS)
    learned = {
        e: len(SEEDS) * len(DATASETS) * len(STARTS) * (
            map_run + rounds * times[f"{e} round {mix}"]
        )
        for e in ESTIMATORS
    }  # fmt: skip
    return {
        "check": check,
        "map": n_map * map_run,
        "learned kfac": learned["kfac"],
        "learned full": learned["full"],
        "all": check + n_map * map_run + sum(learned.values()),
    }


# ---------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> str | None:
    global SEEDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    phases = ["check", "map", "learned", "summarise", "all", "time"]
    parser.add_argument("--phase", required=True, choices=phases)
    parser.add_argument("--data-dir", default=os.environ.get("ELLA_DATA", "../shared/data"))
    parser.add_argument(
        "--results-dir", type=Path, default=None,
        help=f"default {EXPERIMENT_RESULTS} (a temporary folder with --dry)",
    )  # fmt: skip
    parser.add_argument("--train-size", type=int, default=None)
    parser.add_argument("--validation-size", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--check-epochs", type=int, default=None)
    parser.add_argument("--burnin", type=int, default=None)
    parser.add_argument("--frequency", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help=f"default {' '.join(map(str, SEEDS))}")  # fmt: skip
    parser.add_argument(
        "--widths",
        type=int,
        nargs=3,
        default=None,
        help="channels per group copy of the three layers (default 1 1 4)",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="learned runs at this rate, without the MAP phase's choice",
    )
    parser.add_argument(
        "--estimators",
        nargs="+",
        choices=ESTIMATORS,
        default=None,
        help="the learned runs of these estimators only (default both)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dry", action="store_true", help="a smoke test of the phase in seconds")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.seeds:
        SEEDS = tuple(args.seeds)
    budget = DRY if args.dry else Budget()
    overrides = {
        "train_size": args.train_size, "validation_size": args.validation_size,
        "epochs": args.epochs, "check_epochs": args.check_epochs, "burnin": args.burnin,
        "frequency": args.frequency,
    }  # fmt: skip
    if args.widths:
        overrides["widths"] = tuple(args.widths)
    budget = dataclasses.replace(budget, **{k: v for k, v in overrides.items() if v is not None})
    results_dir = args.results_dir
    if results_dir is None:
        results_dir = (
            Path(tempfile.mkdtemp(prefix="miniature_dry_")) if args.dry else EXPERIMENT_RESULTS
        )
    path = Path(results_dir) / f"{NAME}.jsonl"
    print(f"{describe_network(budget.widths)}\nbudget: {budget}\nresults: {path}", flush=True)
    if args.phase == "time":
        times = measure_times(budget, args.data_dir)
        for k, v in times.items():
            print(f"  {k}: {v:.3f}" if "parameters" not in k else f"  {k}: {v:,}")
        for k, v in estimate(times, budget).items():
            print(f"estimated {k}: {v / 60:.1f} min")
        return None
    runner = Runner(path, budget, args.data_dir)
    if args.phase in ("check", "all"):
        runner.ensure(check_specs(), "check: single-path networks")
    lr = args.lr
    if args.phase == "map" or (args.phase in ("learned", "all") and lr is None):
        lr = phase_map(runner)
    if args.phase in ("learned", "all"):
        specs = [s for s in learned_specs(lr) if s.estimator in (args.estimators or ESTIMATORS)]
        runner.ensure(specs, f"learned priors at lr {lr:g}")
    if args.phase in ("summarise", "all"):
        command = "python -m experiments.miniature --phase all" + " ".join(
            f" --{k.replace('_', '-')} {v}" for k, v in overrides.items() if v is not None
        )
        text = summarise(runner, command)
        write_markdown(Path(results_dir) / f"{NAME}.md", text)
        print(text)
        return text
    return None


if __name__ == "__main__":
    main()
